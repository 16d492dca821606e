"""The one precedence function, case by case (planning only; nothing is sent)."""

from __future__ import annotations

import pytest

from fleetgate.errors import GatewayError
from fleetgate.routing.planner import build_plan
from fleetgate.state.runtime import MemoryState
from tests.routing.fleets import config, fleet, profile

TIER = "x-fleetgate-tier"
HEARTBEAT = {"text": "ping", "max_tokens": 1}


def plan_for(p, f=None):
    return build_plan(p, f or fleet(), MemoryState())


def ids(plan) -> list[str]:
    return [c.deployment.id for c in plan.candidates]


@pytest.mark.parametrize("name", ["Chat-Main", "chat-main", "CHAT-MAIN"])
def test_virtual_matches_case_insensitively(name: str) -> None:
    plan = plan_for(profile(name))
    assert plan.resolution == "virtual-model"
    assert ids(plan) == ["big-b", "small"]
    assert plan.headers["X-Fleetgate-Virtual-Model"] == "Chat-Main"
    assert plan.headers["X-Fleetgate-Reason"] == "virtual-model"
    assert {c.scope for c in plan.candidates} == {"virtual:Chat-Main"}


def test_virtual_name_gets_no_other_normalisation() -> None:
    with pytest.raises(GatewayError) as err:
        plan_for(profile("chat_main"))
    assert err.value.code == "model_not_found"


def test_virtual_wins_over_a_header_tier() -> None:
    plan = plan_for(profile("chat-main", headers={TIER: "reasoning"}))
    assert plan.resolution == "virtual-model"
    assert ids(plan) == ["big-b", "small"]


def test_header_tier_applies_to_an_explicit_model() -> None:
    plan = plan_for(profile("big", headers={TIER: "reasoning"}))
    assert plan.resolution == "header-tier"
    assert ids(plan) == ["think", "big-b"]
    routing = {k: v for k, v in plan.headers.items() if "Context" not in k}
    assert routing == {"X-Fleetgate-Reason": "header-tier", "X-Fleetgate-Tier": "reasoning"}
    assert {c.scope for c in plan.candidates} == {"tier:reasoning"}


def test_header_tier_applies_to_auto_and_beats_the_scorer() -> None:
    long_prompt = " ".join(["word"] * 5000)  # the scorer alone would pick reasoning
    plan = plan_for(profile("auto", long_prompt, headers={TIER: "simple"}))
    assert plan.resolution == "header-tier"
    assert ids(plan) == ["small"]


def test_header_tier_name_is_matched_case_insensitively_when_not_exact() -> None:
    assert ids(plan_for(profile("big", headers={TIER: "Reasoning"}))) == ["think", "big-b"]


def test_unknown_header_tier_is_a_clear_400() -> None:
    with pytest.raises(GatewayError) as err:
        plan_for(profile("big", headers={TIER: "turbo"}))
    assert err.value.code == "tier_not_found"
    assert err.value.status == 400
    assert "default, reasoning, simple" in err.value.message


def test_heartbeat_ignores_the_header_tier_for_an_explicit_model() -> None:
    plan = plan_for(profile("big", headers={TIER: "reasoning"}, **HEARTBEAT))
    assert plan.resolution == "explicit"
    assert set(ids(plan)) == {"big-a", "big-b"}  # big-x has no credentials
    assert plan.notes["resolution"]["tier_header_ignored"] == "heartbeat"


def test_heartbeat_with_a_tier_header_goes_to_simple_under_auto() -> None:
    plan = plan_for(profile("auto", headers={TIER: "reasoning"}, **HEARTBEAT))
    assert plan.resolution == "auto"
    assert ids(plan) == ["small"]
    assert plan.notes["resolution"]["heartbeat"] is True
    assert plan.headers["X-Fleetgate-Tier"] == "simple"


def test_auto_picks_a_tier() -> None:
    plan = plan_for(profile("auto"))
    assert plan.resolution == "auto"
    routing = {k: v for k, v in plan.headers.items() if "Context" not in k}
    assert routing == {"X-Fleetgate-Reason": "auto", "X-Fleetgate-Tier": "simple"}


def test_auto_is_an_ordinary_name_when_not_configured() -> None:
    with pytest.raises(GatewayError) as err:
        plan_for(profile("auto"), fleet(config(auto=None)))
    assert err.value.code == "model_not_found"
    assert "picks a tier" not in err.value.message


def test_real_model_and_deployment_ids() -> None:
    plan = plan_for(profile("big"))
    assert plan.resolution == "explicit"
    assert plan.headers["X-Fleetgate-Reason"] == "explicit"
    assert {c.scope for c in plan.candidates} == {"deployment"}
    plan = plan_for(profile("think"))
    assert ids(plan) == ["think"]
    plan = plan_for(profile("big-a"))
    assert plan.resolution == "deployment"
    assert ids(plan) == ["big-a"]


def test_unknown_name_says_how_to_find_names() -> None:
    with pytest.raises(GatewayError) as err:
        plan_for(profile("nope"))
    assert err.value.code == "model_not_found"
    assert err.value.status == 404
    message = err.value.message
    assert "GET /v1/models" in message
    assert "X-Fleetgate-Tier" in message
    assert "'auto'" in message


def _shadowing(enabled: bool) -> dict:
    virtual = {
        "name": "BIG",
        "enabled": enabled,
        "allow_shadowing": True,
        "routes": [{"deployment": "think"}],
    }
    return config(virtual_models=[virtual])


def test_enabled_virtual_shadows_a_real_model_when_allowed() -> None:
    plan = plan_for(profile("big"), fleet(_shadowing(True)))
    assert plan.resolution == "virtual-model"
    assert ids(plan) == ["think"]


def test_disabled_virtual_releases_the_native_id() -> None:
    f = fleet(_shadowing(False))
    plan = plan_for(profile("big"), f)
    assert plan.resolution == "explicit"
    assert set(ids(plan)) == {"big-a", "big-b"}
    assert f.virtual_models == {}


def test_declared_order_is_never_resorted() -> None:
    data = config()
    for dep in data["deployments"]:
        dep["priority"] = {"small": -5, "big-b": 5}.get(dep["id"], 0)
    f = fleet(data)
    assert ids(plan_for(profile("chat-main"), f)) == ["big-b", "small"]
    assert ids(plan_for(profile("x", headers={TIER: "reasoning"}), f)) == ["think", "big-b"]
    assert ids(plan_for(profile("big"), f)) == ["big-a", "big-b"]  # the real model: sorted
