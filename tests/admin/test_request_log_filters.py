"""The request log answers "which deployment served my last requests, and why did one
fall back?": filters for fallbacks, status, deployment and model (and a 400 for any
other), the stages' notes and each attempt's finish and failure, the same `request_id`
everywhere, and each deployment's last error in `/admin/fleet`."""

from __future__ import annotations

import time

import httpx

from tests.admin.helpers import admin, options
from tests.harness import Stack, deployment, provider, wait_until

WORDS = "five words the client said"
MSG = [{"role": "user", "content": WORDS}]


def _written(stack: Stack) -> int:
    return stack.gateway.control.log_writer.written  # type: ignore[union-attr]


def _chat(stack: Stack, request_id: str, model: str = "m") -> httpx.Response:
    return httpx.post(
        stack.url + "/v1/chat/completions",
        json={"model": model, "messages": MSG, "max_tokens": 50},
        headers={"X-Request-Id": request_id},
        timeout=10,
    )


def test_filters_notes_finish_and_failure(stack: Stack, db_url: str) -> None:
    a, b = stack.engine("a"), stack.engine("b")
    stack.start_gateway(
        {
            "providers": [provider("pa", a, health_check={"enabled": False}), provider("pb", b)],
            "deployments": [
                deployment("m", "pa", priority=0, context_window=8192),
                deployment("m", "pb", priority=1, context_window=100_000),
                deployment("n", "pb", id="pb-n"),
            ],
        },
        options(db_url),
    )
    api = admin(stack)
    assert _chat(stack, "plain-1").status_code == 200
    assert _chat(stack, "other-1", model="n").status_code == 200
    stack.lt.run(a.stop())
    refused = time.time()
    assert _chat(stack, "fell-1").headers["x-fleetgate-route"] == "pb"
    wait_until(lambda: _written(stack) >= 3, 10, "three rows written")

    def ids(**params: str) -> list[str]:
        resp = api.get("/admin/requests", params=params)
        assert resp.status_code == 200, resp.text
        return [r["request_id"] for r in resp.json()["data"]]

    assert ids() == ["fell-1", "other-1", "plain-1"]
    assert ids(fallback="true") == ["fell-1"]
    assert ids(fallback="false") == ["other-1", "plain-1"]
    assert ids(model="n") == ["other-1"]
    assert ids(deployment="pb") == ["fell-1"] and ids(deployment="pb-n") == ["other-1"]
    assert ids(deployment="pa", fallback="false") == ["plain-1"]
    assert ids(status="200", model="m") == ["fell-1", "plain-1"]

    unknown = api.get("/admin/requests", params={"fallbacks": "true"})
    assert unknown.status_code == 400
    error = unknown.json()["error"]
    assert error["code"] == "invalid_request" and error["param"] == "fallbacks"
    assert "fallback" in error["message"]  # the filters it knows are named

    row = api.get("/admin/requests/fell-1").json()
    assert row["request_id"] == "fell-1"
    assert [(t["deployment_id"], t["failure"], t["finish"]) for t in row["attempts"]] == [
        ("pa", "connect refused", None),
        ("pb", None, "stop"),
    ]
    notes = row["notes"]  # the stages' notes, as the in-memory record has them
    assert notes["context_estimate"] > 0 and notes["context_exact"] is False
    assert notes["context_tier"] == "default" and notes["resolution"] == {"rule": "explicit"}
    assert WORDS not in str(row)
    # the in-memory record names it the same
    assert httpx.get(f"{stack.url}/v1/requests/fell-1").json()["request_id"] == "fell-1"

    pa = next(d for d in api.get("/admin/fleet").json()["deployments"] if d["id"] == "pa")
    assert pa["health"]["last_error"] == "connect refused"
    assert refused - 1 <= pa["health"]["last_error_at"] <= time.time()
