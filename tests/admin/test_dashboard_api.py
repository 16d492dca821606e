"""The admin endpoints the dashboard reads beyond the CRUD: stats, request filters, explain,
the fleet's prices, capabilities and route chains; and how /ui's files are served."""

from __future__ import annotations

import httpx
import openai
import pytest

from fleetgate.testing import Fault
from tests.admin.helpers import admin, options, two_tier_fleet
from tests.harness import Stack, wait_until

MSG = [{"role": "user", "content": "three short words"}]


def _written(stack: Stack) -> int:
    return stack.gateway.control.log_writer.written  # type: ignore[union-attr]


def test_stats_filters_explain_and_fleet_details(stack: Stack, db_url: str, client_for) -> None:
    config = two_tier_fleet(stack)
    config["auth"] = {"enabled": True}
    config["deployments"][0]["price"] = {"input": 0.5, "output": 1.5}
    config["virtual_models"] = [{"name": "bot", "routes": [{"model": "m"}]}]
    stack.start_gateway(config, options(db_url))
    api = admin(stack)
    one = api.post("/admin/keys", json={"name": "one"}).json()
    two = api.post("/admin/keys", json={"name": "two"}).json()
    wait_until(lambda: len(stack.gateway.control.ring) == 2, 5, "keys loaded")  # type: ignore[union-attr]

    for key, fault in ((one, None), (one, 503), (two, None)):
        if fault:
            stack.engines["a"].fail_next(Fault("status", status=fault))
        client_for(stack).chat.completions.create(
            model="m", messages=MSG, extra_headers={"Authorization": f"Bearer {key['key']}"}
        )
    stack.engines["a"].set_fault(Fault("status", status=503))
    stack.engines["b"].set_fault(Fault("status", status=502))
    with pytest.raises(openai.APIStatusError):
        client_for(stack).chat.completions.create(
            model="m", messages=MSG, extra_headers={"Authorization": f"Bearer {two['key']}"}
        )
    wait_until(lambda: _written(stack) >= 4, 10, "four rows written")

    # the request log filtered by key and by the deployment that answered
    by_key = api.get("/admin/requests", params={"key": one["id"]}).json()["data"]
    assert [r["client_key_id"] for r in by_key] == [one["id"], one["id"]]
    by_dep = api.get("/admin/requests", params={"deployment": "pb"}).json()["data"]
    assert [r["fallback_count"] for r in by_dep] == [1]

    # stats: counted in the database, per bucket
    stats = api.get("/admin/stats", params={"window": 600, "buckets": 10}).json()
    assert len(stats["buckets"]) == len(stats["requests"]) == 10
    assert stats["step"] == 60 and stats["end"] - stats["start"] == 600
    assert stats["totals"] == {"requests": 4, "errors": 1, "fallbacks": 2}
    assert sum(stats["fallbacks"]) == 2 and sum(stats["errors"]) == 1
    deps = {
        name: (sum(v["attempts"]), sum(v["errors"])) for name, v in stats["deployments"].items()
    }
    assert deps == {"pa": (4, 2), "pb": (2, 1)}  # pa: 2 ok, 2 x 503; pb: 1 ok, 1 x 502
    assert {k: sum(v) for k, v in stats["context_tiers"].items()} == {"default": 3, "none": 1}
    answered = [p for p in stats["ttft_p50"] if p is not None]
    assert len(answered) >= 1 and all(0 <= p < 5 for p in answered)
    p99 = [p for p in stats["ttft_p99"] if p is not None]
    assert all(b >= a for a, b in zip(answered, p99, strict=True))
    assert api.get("/admin/stats", params={"window": 10}).status_code == 400

    # explain behind the admin key, though client auth is on
    plan = api.post(
        "/admin/explain",
        json={"request": {"model": "m", "messages": MSG, "provider": {"ignore": ["pb"]}}},
    ).json()
    assert [c["deployment"] for c in plan["candidates"]] == ["pa"]
    assert plan["dropped"] == [
        {"deployment": "pb", "filter": "provider_prefs", "reason": "in provider.ignore"}
    ]
    assert httpx.post(stack.url + "/admin/explain", json={"request": {}}).status_code == 401

    # the live fleet: kind, price, capabilities, route chains
    fleet = api.get("/admin/fleet").json()
    pa = next(d for d in fleet["deployments"] if d["id"] == "pa")
    assert pa["kind"] == "vllm" and pa["price"] == {"input": 0.5, "output": 1.5}
    assert "tools" in pa["capabilities"]
    assert fleet["virtual_models"] == [
        {
            "name": "bot",
            "response_mode": "any",
            "continue_on_default": False,
            "routes": [
                {
                    "target": "model:m",
                    "deployments": ["pa", "pb"],
                    "key_label": None,
                    "params": None,
                }
            ],
        }
    ]


def test_dashboard_files(stack: Stack, sqlite_url: str) -> None:
    stack.start_gateway(two_tier_fleet(stack), options(sqlite_url))
    page = httpx.get(stack.url + "/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert httpx.get(stack.url + "/ui/").text == page.text
    script = httpx.get(stack.url + "/ui/static/app.js")
    assert script.headers["content-type"].startswith("text/javascript")
    again = httpx.get(
        stack.url + "/ui/static/app.js", headers={"if-none-match": script.headers["etag"]}
    )
    assert again.status_code == 304 and again.content == b""
    assert httpx.get(stack.url + "/ui/static/vendor/uplot/uPlot.iife.min.js").status_code == 200
    missing = httpx.get(stack.url + "/ui/static/../../server/app.py")
    assert missing.status_code == 404
    assert httpx.get(stack.url + "/ui/static/nothing.js").json()["error"]["code"] == "not_found"
    assert httpx.post(stack.url + "/ui").status_code == 405
