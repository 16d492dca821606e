"""How a virtual model's chain is built: availability, continue_on_default, dedup, transport."""

from __future__ import annotations

import time
from typing import Any

import pytest

from fleetgate.config.schema import CircuitConfig
from fleetgate.errors import GatewayError
from fleetgate.routing.planner import build_plan, require_route
from fleetgate.state.runtime import MemoryState
from tests.routing.fleets import config, fleet, profile


def virtual(routes: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    return {"name": "v", "routes": routes, **options}


def setup(vm: dict[str, Any], tiers: dict[str, Any] | None = None):
    data = config(virtual_models=[vm])
    if tiers is not None:
        data["tiers"] = tiers
    return fleet(data), MemoryState()


def cool_down(state: MemoryState, dep_id: str) -> None:
    state.record_rate_limit(dep_id, time.time(), 60, CircuitConfig())


def chain(plan) -> list[tuple[str, str | None, str]]:
    return [(c.deployment.id, c.key_label, c.scope) for c in plan.candidates]


def test_own_routes_are_filtered_by_availability_in_declared_order() -> None:
    f, state = setup(
        virtual(
            [
                {"deployment": "big-x"},
                {"deployment": "big-a"},
                {"deployment": "small"},
                {"deployment": "think"},
            ]
        )
    )
    cool_down(state, "small")
    plan = build_plan(profile("v"), f, state)
    assert chain(plan) == [("big-a", None, "virtual:v"), ("think", None, "virtual:v")]
    reasons = {d.deployment_id: d.reason for d in plan.dropped}
    assert reasons["big-x"].startswith("no credentials (FG_TEST_UNSET_KEY")
    assert reasons["small"].startswith("rate limited")


def test_a_model_route_stands_for_its_deployments_in_priority_order() -> None:
    data = config(virtual_models=[virtual([{"model": "big"}])])
    data["deployments"][2]["priority"] = -1  # big-b before big-a
    plan = build_plan(profile("v"), fleet(data), MemoryState())
    assert [c.deployment.id for c in plan.candidates] == ["big-b", "big-a"]
    assert any(d.deployment_id == "big-x" for d in plan.dropped)


def test_without_continue_on_default_an_empty_chain_suggests_turning_it_on() -> None:
    f, state = setup(virtual([{"deployment": "small"}]))
    cool_down(state, "small")
    plan = build_plan(profile("v"), f, state)
    assert plan.candidates == []
    with pytest.raises(GatewayError) as err:
        require_route(plan)
    assert err.value.code == "virtual_model_unavailable"
    assert err.value.status == 503
    assert "continue_on_default: true" in err.value.message
    assert "small: rate limited" in err.value.message


def test_continue_on_default_appends_the_default_tier() -> None:
    f, state = setup(virtual([{"deployment": "small"}], continue_on_default=True))
    plan = build_plan(profile("v"), f, state)
    assert chain(plan) == [
        ("small", None, "virtual:v"),
        ("big-a", None, "tier:default"),
        ("big-b", None, "tier:default"),
    ]
    assert [c.tier for c in plan.candidates] == [None, "default", "default"]
    assert {c.virtual_model for c in plan.candidates} == {"v"}


def test_default_head_is_the_first_route_with_credentials_and_rest_are_filtered() -> None:
    tiers = {
        "default": {
            "routes": [
                {"deployment": "big-x"},
                {"deployment": "big-a"},
                {"deployment": "big-b"},
                {"deployment": "think"},
            ]
        }
    }
    f, state = setup(virtual([{"deployment": "small"}], continue_on_default=True), tiers)
    cool_down(state, "small")
    cool_down(state, "big-a")  # the head: kept all the same, it is the last resort
    cool_down(state, "big-b")  # not the head: filtered
    plan = build_plan(profile("v"), f, state)
    assert [c.deployment.id for c in plan.candidates] == ["big-a", "think"]
    assert plan.candidates[0].last_resort
    dropped = {d.deployment_id for d in plan.dropped}
    assert dropped == {"small", "big-x", "big-b"}


def test_continue_on_default_with_an_empty_default_tier() -> None:
    tiers = {"default": {"routes": []}}
    f, state = setup(virtual([{"deployment": "small"}], continue_on_default=True), tiers)
    assert [c.deployment.id for c in build_plan(profile("v"), f, state).candidates] == ["small"]
    cool_down(state, "small")
    plan = build_plan(profile("v"), f, state)
    with pytest.raises(GatewayError) as err:
        require_route(plan)
    assert err.value.code == "virtual_model_unavailable"
    assert "default tier has no available route either" in err.value.message
    assert "continue_on_default: true" not in err.value.message


def test_default_tier_without_credentials_anywhere_is_empty() -> None:
    tiers = {"default": {"routes": [{"deployment": "big-x"}]}}
    f, state = setup(virtual([{"deployment": "big-x"}], continue_on_default=True), tiers)
    with pytest.raises(GatewayError) as err:
        require_route(build_plan(profile("v"), f, state))
    assert "default tier has no available route either" in err.value.message


def test_dedup_without_key_labels_keeps_the_first() -> None:
    f, state = setup(
        virtual(
            [{"deployment": "big-b"}, {"deployment": "small"}, {"deployment": "big-b"}],
            continue_on_default=True,
        )
    )
    plan = build_plan(profile("v"), f, state)
    assert chain(plan) == [
        ("big-b", None, "virtual:v"),
        ("small", None, "virtual:v"),
        ("big-a", None, "tier:default"),
    ]
    dups = [d for d in plan.dropped if d.filter == "dedup"]
    assert [d.deployment_id for d in dups] == ["big-b", "big-b"]


def test_dedup_with_key_labels_keeps_one_per_label() -> None:
    f, state = setup(
        virtual(
            [
                {"deployment": "big-b"},
                {"deployment": "big-b", "key_label": "alt", "params": {"temperature": 0.1}},
                {"deployment": "big-b", "key_label": "alt", "params": {"temperature": 0.9}},
                {"deployment": "big-b", "key_label": "gone"},
            ],
            continue_on_default=True,
        )
    )
    plan = build_plan(profile("v"), f, state)
    assert chain(plan) == [
        ("big-b", None, "virtual:v"),
        ("big-b", "alt", "virtual:v"),
        ("big-a", None, "tier:default"),
    ]
    assert plan.candidates[1].params == {"temperature": 0.1}  # the first one's parameters
    reasons = [(d.deployment_id, d.filter, d.reason) for d in plan.dropped]
    assert (
        "big-b",
        "availability",
        "no credentials (FG_TEST_UNSET_ALT for key label 'gone' is not set)",
    ) in reasons
    assert sum(1 for r in reasons if r[1] == "dedup") == 2  # the 2nd alt, and default's big-b


@pytest.mark.parametrize(
    ("mode", "stream", "kept"),
    [
        ("any", False, True),
        ("any", True, True),
        ("stream_only", True, True),
        ("stream_only", False, False),
        ("non_stream_only", False, True),
        ("non_stream_only", True, False),
    ],
)
def test_response_mode_filters_the_whole_chain(mode: str, stream: bool, kept: bool) -> None:
    f, state = setup(
        virtual([{"deployment": "small"}], response_mode=mode, continue_on_default=True)
    )
    plan = build_plan(profile("v", stream=stream), f, state)
    if kept:
        assert [c.deployment.id for c in plan.candidates] == ["small", "big-a", "big-b"]
        return
    assert plan.candidates == []
    assert plan.emptied_by == "transport"
    assert {d.deployment_id for d in plan.dropped if d.filter == "transport"} == {
        "small",
        "big-a",
        "big-b",
    }
    with pytest.raises(GatewayError) as err:
        require_route(plan)
    assert err.value.status == 400
    assert err.value.param == "stream"
    assert f"stream: {'true' if mode == 'stream_only' else 'false'}" in err.value.message


def test_route_params_layer_over_deployment_params() -> None:
    data = config(
        virtual_models=[
            virtual(
                [
                    {"deployment": "small", "params": {"temperature": 0.2, "extra_body": {"b": 2}}},
                ],
                continue_on_default=True,
            )
        ]
    )
    data["deployments"][0]["params"] = {"top_p": 0.5, "extra_body": {"a": 1, "b": 1}}
    data["deployments"][1]["params"] = {"max_tokens": 64}
    plan = build_plan(profile("v"), fleet(data), MemoryState())
    assert plan.candidates[0].params == {
        "top_p": 0.5,
        "temperature": 0.2,
        "extra_body": {"a": 1, "b": 2},
    }
    assert plan.candidates[1].params == {"max_tokens": 64}
    assert plan.candidates[2].params is None
