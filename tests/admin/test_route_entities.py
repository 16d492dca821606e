"""Admin CRUD of virtual models, tiers and a model's `long_context` block (merge semantics)."""

from __future__ import annotations

import httpx

from tests.admin.helpers import admin, options, two_tier_fleet
from tests.harness import Stack, deployment, provider, wait_until

MSG = [{"role": "user", "content": "hi"}]


def _chat(stack: Stack, model: str, **headers: str) -> httpx.Response:
    return httpx.post(
        stack.url + "/v1/chat/completions",
        json={"model": model, "messages": MSG},
        headers=headers,
        timeout=10,
    )


def test_patch_keeps_a_models_long_tier(stack: Stack, db_url: str) -> None:
    a, b = stack.engine("a"), stack.engine("b")
    gw = stack.start_gateway(
        {
            "providers": [provider("pa", a)],
            "deployments": [deployment("m", "pa")],
            "models": [
                {
                    "id": "m",
                    "long_context": {
                        "inference_url": b.url + "/v1",
                        "max_context_tokens": 100_000,
                        "base_max_context_tokens": 4096,
                    },
                }
            ],
        },
        options(db_url),
    )
    assert gw.pipeline.holder.fleet.deployments["m@long"].context_window == 100_000
    api = admin(stack)
    resp = api.patch("/admin/models/m", json={"description": "coder"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["long_context"]["max_context_tokens"] == 100_000
    fleet = gw.pipeline.holder.fleet
    assert fleet.config.models[0].description == "coder"
    assert fleet.deployments["m@long"].context_window == 100_000  # the long tier survives
    assert fleet.deployments["m@long"].tier == "long"
    # a nested PATCH changes one field of the block and keeps the rest
    api.patch("/admin/models/m", json={"long_context": {"max_context_tokens": 200_000}})
    assert gw.pipeline.holder.fleet.deployments["m@long"].context_window == 200_000
    assert gw.pipeline.holder.fleet.deployments["pa"].context_window == 4096
    live = {d["id"]: d for d in api.get("/admin/fleet").json()["deployments"]}
    long_window = live["m@long"]["context_window"]
    assert long_window["effective"] == 200_000 and long_window["source"] == "config"
    assert long_window["config_field"] == "long_context.max_context_tokens"
    assert live["pa"]["context_window"]["config_field"] == "long_context.base_max_context_tokens"
    # an invalid block is refused whole; the long tier keeps serving
    resp = api.patch("/admin/models/m", json={"long_context": {"max_context_tokens": 10}})
    assert resp.status_code == 422
    assert gw.pipeline.holder.fleet.deployments["m@long"].context_window == 200_000
    # removing the block (null) removes the long tier
    assert api.patch("/admin/models/m", json={"long_context": None}).is_success
    assert "m@long" not in gw.pipeline.holder.fleet.deployments


def test_virtual_models_and_tiers(stack: Stack, db_url: str) -> None:
    gw = stack.start_gateway(two_tier_fleet(stack), options(db_url))
    api = admin(stack)
    resp = api.post(
        "/admin/virtual_models",
        json={"name": "Chat", "routes": [{"deployment": "pb"}, {"deployment": "pa"}]},
    )
    assert resp.status_code == 201, resp.text
    ok = _chat(stack, "chat")
    assert ok.status_code == 200 and ok.headers["x-fleetgate-route"] == "pb"
    assert ok.json()["model"] == "chat"

    # a tier is a map entry in the config; here it is an entity with a name
    resp = api.post("/admin/tiers", json={"name": "simple", "routes": [{"deployment": "pa"}]})
    assert resp.status_code == 201, resp.text
    assert api.get("/admin/tiers/simple").json() == {
        "name": "simple",
        "routes": [{"deployment": "pa"}],
    }
    assert "simple" in gw.pipeline.holder.fleet.config.tiers
    # PUT replaces the whole entry; the path names it
    resp = api.put(
        "/admin/tiers/simple", json={"routes": [{"deployment": "pa"}], "description": "d"}
    )
    assert resp.status_code == 200, resp.text
    assert gw.pipeline.holder.fleet.config.tiers["simple"].description == "d"
    # a virtual model naming a deployment that does not exist is refused whole
    resp = api.patch("/admin/virtual_models/Chat", json={"routes": [{"deployment": "zz"}]})
    assert resp.status_code == 422
    assert _chat(stack, "chat").headers["x-fleetgate-route"] == "pb"

    # the deployment (and its provider) a virtual model or tier uses cannot go
    resp = api.delete("/admin/deployments/pa")
    assert resp.status_code == 409
    assert resp.json()["error"]["users"] == [
        {"kind": "virtual_models", "id": "Chat"},
        {"kind": "tiers", "id": "simple"},
    ]
    resp = api.delete("/admin/providers/pb")
    assert {"kind": "virtual_models", "id": "Chat"} in resp.json()["error"]["users"]
    assert api.delete("/admin/tiers/simple").status_code == 204
    assert api.patch(
        "/admin/virtual_models/Chat", json={"routes": [{"deployment": "pb"}]}
    ).is_success
    assert api.delete("/admin/deployments/pa").status_code == 204

    # the request log names the virtual model
    _chat(stack, "chat", **{"x-request-id": "vm-1"})
    wait_until(lambda: api.get("/admin/requests/vm-1").status_code == 200, 10, "logged")
    row = api.get("/admin/requests/vm-1").json()
    assert row["virtual_model"] == "Chat"
    assert row["attempts"][0]["virtual_model"] == "Chat"
