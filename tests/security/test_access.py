"""Defect 4: request records were public, and one key could make its own record the one
shown for a victim's request id. With auth on, a key now sees its own records only (the
admin key sees all), client-sent request ids are scoped per key, the window refresh is
admin-only, the windows view needs a key, explain answers only for models the key may use,
and /metrics can be put behind its own key."""

from __future__ import annotations

import httpx

from tests.admin.helpers import ADMIN_KEY, admin, options
from tests.harness import Stack, deployment, provider, wait_until

MSG = [{"role": "user", "content": "hi"}]
METRICS_KEY = "metrics-secret-for-tests"


def _start(stack: Stack, sqlite_url: str, **server: str) -> tuple[str, str, str, str]:
    engine = stack.engine("a")
    stack.start_gateway(
        {
            "auth": {"enabled": True},
            "server": server,
            "providers": [provider("pa", engine)],
            "deployments": [deployment("m", "pa"), deployment("n", "pa", id="pa-n")],
        },
        options(sqlite_url),
    )
    api = admin(stack)
    alice = api.post("/admin/keys", json={"name": "alice", "allowed_models": ["m"]}).json()
    mallory = api.post("/admin/keys", json={"name": "mallory"}).json()
    return alice["key"], alice["id"], mallory["key"], mallory["id"]


def _get(stack: Stack, path: str, key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.get(stack.url + path, headers=headers, timeout=5)


def test_records_are_scoped_per_key(stack: Stack, sqlite_url: str) -> None:
    alice, alice_id, mallory, mallory_id = _start(stack, sqlite_url)

    def chat(key: str, model: str, rid: str) -> None:
        resp = httpx.post(
            stack.url + "/v1/chat/completions",
            json={"model": model, "messages": MSG},
            headers={"Authorization": f"Bearer {key}", "X-Request-Id": rid},
            timeout=10,
        )
        assert resp.is_success and resp.headers["x-request-id"] == rid

    chat(alice, "m", "victim-1")
    chat(mallory, "n", "victim-1")  # the victim's id, sent by another key, afterwards
    chat(mallory, "n", "mallory-only")
    gw = stack.gateway
    assert gw is not None
    wait_until(lambda: gw.pipeline.recorder.buffered == 0, 5, "records flushed")

    assert _get(stack, "/v1/requests/victim-1").status_code == 401
    own = _get(stack, "/v1/requests/victim-1", alice).json()
    assert own["client_key_id"] == alice_id and own["requested_model"] == "m"
    other = _get(stack, "/v1/requests/victim-1", mallory).json()
    assert other["client_key_id"] == mallory_id and other["requested_model"] == "n"
    assert _get(stack, "/v1/requests/mallory-only", alice).status_code == 404
    newest = _get(stack, "/v1/requests/victim-1", ADMIN_KEY).json()
    assert newest["client_key_id"] == mallory_id  # the admin sees every key's records
    assert _get(stack, "/v1/requests/mallory-only", ADMIN_KEY).status_code == 200


def test_windows_and_explain_need_the_right_key(stack: Stack, sqlite_url: str) -> None:
    alice, _, _, _ = _start(stack, sqlite_url)

    assert _get(stack, "/v1/fleet/windows").status_code == 401
    assert _get(stack, "/v1/fleet/windows", alice).status_code == 200
    refresh = stack.url + "/v1/fleet/windows/refresh"
    assert httpx.post(refresh).status_code == 401
    denied = httpx.post(refresh, headers={"Authorization": f"Bearer {alice}"})
    assert denied.status_code == 401 and denied.json()["error"]["code"] == "invalid_admin_key"
    probed = httpx.post(refresh, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert probed.is_success and [w["deployment"] for w in probed.json()["data"]] == ["pa", "pa-n"]

    def explain(model: str, key: str | None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.post(
            stack.url + "/v1/routing/explain",
            json={"model": model, "messages": MSG},
            headers=headers,
        )

    assert explain("m", None).status_code == 401
    assert explain("m", alice).status_code == 200
    other = explain("n", alice)
    assert other.status_code == 403 and other.json()["error"]["code"] == "model_not_allowed"
    assert explain("n", ADMIN_KEY).status_code == 200


def test_metrics_behind_their_own_key(stack: Stack, sqlite_url: str) -> None:
    alice, _, _, _ = _start(stack, sqlite_url, metrics_key=METRICS_KEY)
    scrape = _get(stack, "/metrics")
    assert scrape.status_code == 401
    assert scrape.json()["error"]["code"] == "invalid_metrics_key"
    assert _get(stack, "/metrics", alice).status_code == 401  # a client key is not enough
    assert "fleetgate_requests" in _get(stack, "/metrics", METRICS_KEY).text
    assert _get(stack, "/metrics", ADMIN_KEY).status_code == 200


def test_refresh_is_admin_only_even_with_auth_off(stack: Stack, sqlite_url: str) -> None:
    engine = stack.engine("a")
    stack.start_gateway(
        {"providers": [provider("pa", engine)], "deployments": [deployment("m", "pa")]}
    )
    resp = httpx.post(stack.url + "/v1/fleet/windows/refresh")  # no admin key is configured
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "admin_disabled"
    assert _get(stack, "/v1/fleet/windows").status_code == 200  # auth off: open
    wrong = httpx.post(stack.url + "/v1/fleet/windows", json={})
    assert wrong.status_code == 405 and wrong.headers["allow"] == "GET"
