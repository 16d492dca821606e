"""An upstream's usage is its word on what a request cost, and a key's spend and limits
follow it. A count no engine can report (negative, or past the request log's 32-bit
columns) is not taken: the gateway's own estimate stands in, as for a stream without usage.
A negative count used to credit a key's budget back and its tokens-per-minute with it."""

from __future__ import annotations

import httpx
import pytest

from tests.admin.helpers import admin, options
from tests.harness import Stack, deployment, provider, wait_until
from tests.security.servers import Scripted, chat_answer

PRICE = 1e6  # 1 per token, either way


@pytest.mark.parametrize(
    ("usage", "taken"),
    [
        ({"prompt_tokens": -1_000_000, "completion_tokens": 5}, (None, 5)),
        ({"prompt_tokens": 7, "completion_tokens": 2**40}, (7, None)),  # past the log's INTEGER
        # Anthropic's prompt is its three parts: one that is no count spoils the sum
        ({"input_tokens": 3, "cache_read_input_tokens": -100, "output_tokens": 2}, (None, 2)),
    ],
)
def test_a_count_no_engine_can_report_is_not_spent(
    stack: Stack, sqlite_url: str, usage: dict[str, int], taken: tuple[int | None, int | None]
) -> None:
    up = Scripted()
    up.answer = chat_answer(usage)
    stack.lt.run(up.start())
    try:
        gw = stack.start_gateway(
            {
                "auth": {"enabled": True},
                "providers": [provider("p", up)],
                "deployments": [
                    deployment(
                        "m", "p", context_window=8192, price={"input": PRICE, "output": PRICE}
                    )
                ],
            },
            options(sqlite_url),
        )
        api = admin(stack)
        key = api.post("/admin/keys", json={"name": "k", "budget": 1e12}).json()
        resp = httpx.post(
            stack.url + "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": f"Bearer {key['key']}"},
            timeout=10,
        )
        assert resp.status_code == 200, resp.text
        rid = resp.headers["x-request-id"]
        wait_until(lambda: gw.pipeline.recent.newest(rid) is not None, 5, "the record")
        record = gw.pipeline.recent.newest(rid)
        assert record is not None
        served = record.attempts[-1]
        estimate = record.notes.get("context_estimate")
        assert (served.prompt_tokens, served.completion_tokens) == taken
        # as for a stream without usage: the gateway's own estimate of the prompt, if any
        prompt = served.prompt_tokens or (estimate if isinstance(estimate, int) else None)
        completion = served.completion_tokens
        wait_until(lambda: api.get("/admin/requests").json()["data"] != [], 10, "the row")
        row = api.get("/admin/requests").json()["data"][0]
        assert row["request_id"] == rid
        assert (row["prompt_tokens"], row["completion_tokens"]) == (prompt, completion)
        expected = (prompt or 0) + (completion or 0)  # 1 per token
        assert expected > 0
        wait_until(
            lambda: api.get(f"/admin/keys/{key['id']}").json()["spent"] > 0, 10, "spend stored"
        )
        assert api.get(f"/admin/keys/{key['id']}").json()["spent"] == pytest.approx(expected)
    finally:
        stack.lt.run(up.stop())
