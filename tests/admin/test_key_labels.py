"""Key labels pinned by routes: renames carry the pins along; a pinned label cannot go."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from fleetgate.testing import Fault
from tests.admin.helpers import admin, options
from tests.harness import Stack, deployment, provider

MSG = [{"role": "user", "content": "hi"}]


def pinned_fleet(stack: Stack) -> dict[str, Any]:
    a, b = stack.engine("a"), stack.engine("b")
    return {
        "providers": [
            provider("pa", a, api_key="sk-main-a", keys={"team-b": "sk-team-b", "spare": "sk-x"}),
            provider("pb", b, api_key="sk-main-b", keys={"team-b": "${FG_TEST_TEAM_B}"}),
        ],
        "deployments": [deployment("m", "pa"), deployment("m", "pb", priority=1)],
        "virtual_models": [
            {
                "name": "support-bot",
                "routes": [
                    {"deployment": "pa", "key_label": "team-b"},
                    {"deployment": "pb", "key_label": "team-b"},
                ],
            }
        ],
        "tiers": {
            "simple": {"routes": [{"model": "m"}, {"deployment": "pa", "key_label": "team-b"}]}
        },
    }


def _labels(api: httpx.Client) -> dict[str, list[str | None]]:
    vm = api.get("/admin/virtual_models/support-bot").json()
    tier = api.get("/admin/tiers/simple").json()
    return {
        "support-bot": [r.get("key_label") for r in vm["routes"]],
        "simple": [r.get("key_label") for r in tier["routes"]],
    }


def _chat(stack: Stack, model: str) -> httpx.Response:
    resp = httpx.post(
        stack.url + "/v1/chat/completions", json={"model": model, "messages": MSG}, timeout=10
    )
    assert resp.status_code == 200, resp.text
    return resp


def test_a_rename_moves_the_pins_in_the_same_change(
    stack: Stack, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FG_TEST_TEAM_B", "sk-env-team-b")
    gw = stack.start_gateway(pinned_fleet(stack), options(db_url))
    a, b = stack.engines["a"], stack.engines["b"]
    api = admin(stack)
    version = gw.pipeline.holder.fleet.version

    # GET, rename the label, PUT it back: the literal credential shows as *** and stays
    shown = api.get("/admin/providers/pa").json()
    assert shown["keys"] == {"team-b": "***", "spare": "***"}
    shown["keys"] = {"team-c": shown["keys"]["team-b"], "spare": "***"}
    resp = api.put("/admin/providers/pa", json=shown)
    assert resp.status_code == 200, resp.text
    assert resp.json()["keys"] == {"team-c": "***", "spare": "***"}
    # only the routes that reach pa follow; pb's own team-b is another credential
    assert _labels(api) == {"support-bot": ["team-c", "team-b"], "simple": [None, "team-c"]}
    assert gw.pipeline.holder.fleet.version == version + 1  # one atomic change
    _chat(stack, "support-bot")
    assert a.requests[-1].headers["Authorization"] == "Bearer sk-team-b"  # not "***"

    (entry, *_) = api.get("/admin/config/history").json()["data"]
    assert entry["version"] == version + 1
    assert {(c["kind"], c["id"], c["action"]) for c in entry["changes"]} == {
        ("providers", "pa", "changed"),
        ("virtual_models", "support-bot", "changed"),
        ("tiers", "simple", "changed"),
    }
    (event,) = entry["events"]
    assert (event["type"], event["provider"], event["from"], event["to"]) == (
        "key_label_renamed",
        "pa",
        "team-b",
        "team-c",
    )
    assert event["routes"] == [
        {"kind": "virtual_models", "id": "support-bot", "route": 0},
        {"kind": "tiers", "id": "simple", "route": 1},
    ]
    assert "renamed to 'team-c'" in entry["summary"]
    assert "sk-team-b" not in str(entry)

    # a PATCH renames too (env reference kept as written); the fallback hop uses it
    resp = api.patch(
        "/admin/providers/pb", json={"keys": {"team-b": None, "team-x": "${FG_TEST_TEAM_B}"}}
    )
    assert resp.status_code == 200, resp.text
    assert _labels(api)["support-bot"] == ["team-c", "team-x"]
    a.fail_next(Fault("status", status=503))
    resp = _chat(stack, "support-bot")
    assert resp.headers["x-fleetgate-route"] == "pb"
    assert b.requests[-1].headers["Authorization"] == "Bearer sk-env-team-b"
    history = api.get("/admin/config/history", params={"limit": 2}).json()["data"]
    assert [h["version"] for h in history] == [version + 2, version + 1]
    assert history[0]["events"][0]["routes"] == [
        {"kind": "virtual_models", "id": "support-bot", "route": 1}
    ]


def test_a_pinned_label_cannot_be_deleted(stack: Stack, db_url: str) -> None:
    gw = stack.start_gateway(pinned_fleet(stack), options(db_url))
    api = admin(stack)
    version = gw.pipeline.holder.fleet.version
    for edit in (
        {"keys": {"team-b": None}},  # removed
        {"keys": {"team-b": None, "team-c": "sk-other"}},  # another credential: not a rename
    ):
        resp = api.patch("/admin/providers/pa", json=edit)
        assert resp.status_code == 409, resp.text
        err = resp.json()["error"]
        assert err["code"] == "in_use"
        assert err["routes"] == [
            {"kind": "virtual_models", "id": "support-bot", "route": 0},
            {"kind": "tiers", "id": "simple", "route": 1},
        ]
        assert err["users"] == [
            {"kind": "virtual_models", "id": "support-bot"},
            {"kind": "tiers", "id": "simple"},
        ]
        assert "virtual_models/support-bot (route 0)" in err["message"]
    # a PUT without the label is the same deletion
    body = {k: v for k, v in api.get("/admin/providers/pa").json().items() if k != "keys"}
    assert api.put("/admin/providers/pa", json=body).status_code == 409
    assert gw.pipeline.holder.fleet.version == version  # nothing changed, nothing in the history
    history = api.get("/admin/config/history").json()["data"]
    assert [h["version"] for h in history] == [1]
    assert history[0]["events"] == [{"type": "seeded", "message": "seeded from the config file"}]
    assert ("providers", "pa", "added") in {
        (c["kind"], c["id"], c["action"]) for c in history[0]["changes"]
    }
    assert api.get("/admin/providers/pa").json()["keys"] == {"team-b": "***", "spare": "***"}
    # a label no route pins goes as before
    assert api.patch("/admin/providers/pa", json={"keys": {"spare": None}}).status_code == 200
    assert api.get("/admin/providers/pa").json()["keys"] == {"team-b": "***"}
    assert _labels(api)["support-bot"] == ["team-b", "team-b"]


def test_keys_that_are_not_a_map_are_refused_whole(stack: Stack, db_url: str) -> None:
    gw = stack.start_gateway(pinned_fleet(stack), options(db_url))
    api = admin(stack)
    version = gw.pipeline.holder.fleet.version
    for keys in ("team-b", ["team-b"], 7):
        resp = api.patch("/admin/providers/pa", json={"keys": keys})
        assert resp.status_code in (400, 422), resp.text
    assert gw.pipeline.holder.fleet.version == version
