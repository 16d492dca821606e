"""A pick whose answer the picker never sees: the data plane's observe call never came (its
filter fails open, or is missing). Once the pick's deadline passes, the sweep ends it."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
import pytest

from fleetgate.control.plane import ControlOptions
from fleetgate.epp.picker import UNOBSERVED
from tests.epp.bootstraps import without_observer
from tests.epp.stack import EppStack
from tests.harness import Stack, deployment, provider, wait_until

ADMIN = "admin-secret"


def test_a_pick_never_observed_gives_its_budget_hold_back_and_is_logged(
    stack: Stack, epp: EppStack, tmp_path
):
    engine = stack.engine("a")
    config = {
        "auth": {"enabled": True},
        "providers": [provider("a", engine)],
        # 1 per token each way: the hold is the request's expected cost
        "deployments": [deployment("m", "a", price={"input": 1e6, "output": 1e6})],
    }
    options = ControlOptions(data_dir=str(tmp_path / "data"), admin_key=ADMIN)
    envoy = epp.start(config, options=options, edit=without_observer)
    api = httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
    # a budget under one request's expected cost: while its hold stands, no other request
    key = api.post("/admin/keys", json={"name": "k", "budget": 50.0}).json()
    client = openai.OpenAI(
        base_url=envoy.url + "/v1", api_key=key["key"], max_retries=0, timeout=20
    )

    def ask() -> Any:
        return client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "hello"}], max_tokens=8
        )

    raw = ask()
    assert raw.http_response.status_code == 200
    request_id = raw.headers["x-request-id"]

    assert epp.picker is not None and stack.gateway is not None
    picker, pipeline = epp.picker.picker, stack.gateway.pipeline
    pick = picker._pending[request_id]  # waits for an observe call that never comes
    hold = pick.ex.hold
    assert hold is not None and hold.amount > 50 and not hold.settled
    with pytest.raises(openai.RateLimitError) as refused:
        ask()
    assert refused.value.code == "budget_exceeded"
    assert pipeline.state.health("a").inflight == 1
    assert picker.sweep(time.monotonic()) == 0  # not before its deadline

    async def sweep_past_deadline() -> int:
        return picker.sweep(pick.deadline + 1)

    assert stack.lt.run(sweep_past_deadline()) == 1
    assert not picker._pending
    assert pipeline.state.health("a").inflight == 0
    wait_until(lambda: hold.settled, 5, "the hold settled")

    # given back: no usage is known, so nothing is charged, and the key is served again
    assert float(api.get(f"/admin/keys/{key['id']}").json()["spent"]) == 0.0
    assert ask().http_response.status_code == 200
    (record,) = [r for r in pipeline.recent._records.values() if r.request_id == request_id]
    assert record.error_code == UNOBSERVED
    assert record.status == 0
    assert record.attempts == []
    assert record.notes["handed"] == [f"127.0.0.1:{engine.port}"]
