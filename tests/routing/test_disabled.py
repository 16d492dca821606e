"""`enabled: false`: a deployment stays in the fleet, shown as disabled, and is sent nothing;
requests already on it finish."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from tests.admin.helpers import admin, options
from tests.harness import Stack, deployment, provider, wait_until

MSG = [{"role": "user", "content": "hello"}]


def _fleet(stack: Stack, enabled: bool = True) -> dict:
    a, b = stack.engine("a"), stack.engine("b")
    return {
        "providers": [provider("pa", a), provider("pb", b)],
        "deployments": [
            deployment("m", "pa", priority=0, enabled=enabled),
            deployment("m", "pb", priority=1),
        ],
    }


def test_a_disabled_deployment_is_sent_nothing(stack: Stack) -> None:
    stack.start_gateway(_fleet(stack, enabled=False))
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="k", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model="m", messages=MSG)
    assert (raw.headers["x-fleetgate-route"], raw.headers["x-fleetgate-attempts"]) == ("pb", "1")
    assert stack.engines["a"].requests == []
    plan = httpx.post(stack.url + "/v1/routing/explain", json={"model": "m", "messages": MSG})
    dropped = plan.json()["dropped"]
    assert {"deployment": "pa", "filter": "availability", "reason": "disabled"}.items() <= (
        dropped[0].items()
    )
    # pinned by its id, it is still refused, with the reason
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="pa", messages=MSG)
    assert info.value.status_code == 503 and "disabled" in info.value.message


def test_disabled_through_the_admin_api_lets_in_flight_requests_finish(
    stack: Stack, db_url: str
) -> None:
    stack.start_gateway(_fleet(stack), options(db_url))
    a = stack.engines["a"]
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="k", max_retries=0, timeout=10)
    api = admin(stack)
    a.hold()
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(
            client.chat.completions.with_raw_response.create, model="m", messages=MSG
        )
        wait_until(lambda: a.active == 1, 5, "a request on pa")
        resp = api.patch("/admin/deployments/pa", json={"enabled": False})
        assert resp.status_code == 200, resp.text
        raw = client.chat.completions.with_raw_response.create(model="m", messages=MSG)
        assert raw.headers["x-fleetgate-route"] == "pb"  # new requests: elsewhere
        a.release()
        assert held.result(10).headers["x-fleetgate-route"] == "pa"  # the one on it finished
    fleet = api.get("/admin/fleet").json()
    pa = next(d for d in fleet["deployments"] if d["id"] == "pa")
    assert pa["enabled"] is False
    assert pa["health"]["available"] is False and pa["health"]["unavailable_reason"] == "disabled"
    assert api.patch("/admin/deployments/pa", json={"enabled": True}).status_code == 200
    raw = client.chat.completions.with_raw_response.create(model="m", messages=MSG)
    assert raw.headers["x-fleetgate-route"] == "pa"
