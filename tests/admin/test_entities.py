"""Admin CRUD: merge semantics, whole-fleet validation, 409 on delete-in-use, persistence."""

from __future__ import annotations

import logging

import pytest

from tests.admin.helpers import admin, options, two_tier_fleet
from tests.harness import Stack, wait_until


def test_admin_key_is_required(stack: Stack, db_url: str) -> None:
    stack.start_gateway(two_tier_fleet(stack), options(db_url))
    assert admin(stack, "wrong").get("/admin/providers").json()["error"]["code"] == (
        "invalid_admin_key"
    )
    resp = admin(stack, "").get("/admin/fleet")
    assert resp.status_code == 401
    assert admin(stack).get("/admin/openapi.json").json()["paths"]["/admin/deployments"]
    unknown = admin(stack).get("/admin/nothing-here")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"


def test_crud_patch_merge_and_atomic_rejection(stack: Stack, db_url: str, client_for) -> None:
    gw = stack.start_gateway(two_tier_fleet(stack), options(db_url))
    api = admin(stack)
    deps = api.get("/admin/deployments").json()["data"]
    assert [d["id"] for d in deps] == ["pa", "pb"]
    version = gw.pipeline.holder.fleet.version

    # a PATCH of one field keeps every other field of the row
    resp = api.patch("/admin/deployments/pb", json={"priority": -5})
    assert resp.status_code == 200, resp.text
    assert resp.json() == {
        "id": "pb",
        "model": "m",
        "provider": "pb",
        "upstream_model": "up-b",
        "context_window": 100_000,
        "priority": -5,
    }
    fleet = gw.pipeline.holder.fleet
    assert fleet.version == version + 1
    assert fleet.deployments["pb"].context_window == 100_000  # the long tier survives
    assert fleet.deployments["pb"].priority == -5

    # a nested PATCH merges into the nested block; null removes a field
    api.patch("/admin/deployments/pa", json={"price": {"input": 2.0}})
    api.patch("/admin/deployments/pa", json={"price": {"output": 3.0}, "upstream_model": None})
    pa = api.get("/admin/deployments/pa").json()
    assert pa["price"] == {"input": 2.0, "output": 3.0}
    assert "upstream_model" not in pa
    assert gw.pipeline.holder.fleet.deployments["pa"].upstream_model == "m"

    # an invalid PATCH is refused with the reason, and nothing changes
    before = gw.pipeline.holder.fleet
    resp = api.patch("/admin/deployments/pa", json={"provider": "nowhere"})
    assert resp.status_code == 422
    err = resp.json()["error"]
    assert err["code"] == "invalid_config"
    assert "unknown provider 'nowhere'" in err["message"]
    assert gw.pipeline.holder.fleet is before
    assert api.get("/admin/deployments/pa").json()["provider"] == "pa"
    resp = api.patch("/admin/deployments/pa", json={"context_window": -1})
    assert resp.status_code == 422
    assert "positive" in resp.json()["error"]["message"]

    # create a provider and a deployment on it; requests route there at once
    c = stack.engine("c")
    resp = api.post(
        "/admin/providers",
        json={"id": "pc", "kind": "vllm", "base_url": c.url + "/v1", "api_key": "sk-lit"},
    )
    assert resp.status_code == 201, resp.text
    assert resp.json()["api_key"] == "***"  # literal credentials never come back
    masked = api.patch(
        "/admin/providers/pc",
        json={"keys": {"team": "sk-team", "env": "${TEAM_KEY}"}, "headers": {"X-Auth": "s"}},
    ).json()
    assert masked["keys"] == {"team": "***", "env": "${TEAM_KEY}"}
    assert masked["headers"] == {"X-Auth": "***"}
    assert "sk-team" not in api.get("/admin/providers").text
    assert api.post("/admin/providers", json={"id": "pc", "base_url": c.url}).status_code == 409
    resp = api.post("/admin/deployments", json={"model": "n", "provider": "pc"})
    assert resp.status_code == 201
    assert resp.json()["id"] == "pc/n"
    out = client_for(stack).chat.completions.create(
        model="n", messages=[{"role": "user", "content": "hi"}]
    )
    assert out.model == "n"
    assert c.requests[-1].body["model"] == "n"

    # deleting a provider that a deployment uses: 409 listing the users
    resp = api.delete("/admin/providers/pc")
    assert resp.status_code == 409
    assert resp.json()["error"]["users"] == [{"kind": "deployments", "id": "pc/n"}]
    assert api.delete("/admin/deployments/pc/n").status_code == 204
    assert api.delete("/admin/providers/pc").status_code == 204
    assert "pc" not in gw.pipeline.holder.fleet.providers
    assert api.get("/admin/providers/pc").status_code == 404


def test_changes_persist_across_restart_and_yaml_only_seeds(
    stack: Stack, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = two_tier_fleet(stack)
    stack.start_gateway(config, options(db_url))
    api = admin(stack)
    assert api.patch("/admin/deployments/pb", json={"context_window": 200_000}).is_success
    assert api.delete("/admin/models/m").status_code == 204
    stack.stop_gateway()

    # restart with the same YAML: unchanged since it seeded the store, so the runtime edits
    # stay (and the log says which)
    with caplog.at_level(logging.INFO, logger="fleetgate.control"):
        gw = stack.start_gateway(config, options(db_url))
    assert "the fleet file is unchanged since it was last applied" in caplog.text
    assert "changed deployments/pb; removed models/m" in caplog.text
    wait_until(lambda: gw.pipeline.ready, 10, "ready")
    assert gw.pipeline.holder.fleet.deployments["pb"].context_window == 200_000
    api = admin(stack)
    assert api.get("/admin/models").json()["data"] == []
    live = api.get("/admin/fleet").json()
    pb = next(d for d in live["deployments"] if d["id"] == "pb")
    window = pb["context_window"]
    assert window["effective"] == 200_000 and window["source"] == "config"
    assert window["config_field"] == "deployment.context_window"
    assert pb["health"]["circuit"] == "closed"
    assert pb["inflight"] == 0
