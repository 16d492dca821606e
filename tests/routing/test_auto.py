"""`auto`: the documented scorer, keyword rules, heartbeat detection and stickiness."""

from __future__ import annotations

from typing import Any

import pytest

from fleetgate.routing.planner import build_plan
from fleetgate.routing.sticky import MemoryStickyTiers, ReadOnlySticky
from fleetgate.state.runtime import MemoryState
from tests.routing.fleets import config, fleet, profile

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
SCHEMA = {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}}}
IMAGE = [
    {"type": "text", "text": "what is this"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
]


def tier_of(p, f=None, sticky=None, now: float = 1000.0) -> str:
    plan = build_plan(p, f or fleet(), MemoryState(), now=now, sticky=sticky)
    return plan.headers["X-Fleetgate-Tier"]


@pytest.mark.parametrize(
    ("body", "tier"),
    [
        ({}, "simple"),
        ({"tools": TOOLS}, "default"),
        ({"response_format": SCHEMA}, "default"),
        ({"reasoning_effort": "low"}, "default"),
        ({"reasoning_effort": "high"}, "reasoning"),
        ({"tools": TOOLS, "response_format": SCHEMA}, "reasoning"),  # 2 + 2 = 4
        ({"text": " ".join(["w"] * 1000)}, "default"),  # one size point
        ({"text": " ".join(["w"] * 4000)}, "reasoning"),
    ],
)
def test_score_picks_the_tier(body: dict[str, Any], tier: str) -> None:
    text = body.pop("text", "hello there")
    assert tier_of(profile("auto", text, **body)) == tier


def test_images_count() -> None:
    p = profile("auto")
    p.body["messages"] = [{"role": "user", "content": IMAGE}]
    plan = build_plan(p, fleet(), MemoryState())
    assert plan.headers["X-Fleetgate-Tier"] == "default"
    assert plan.notes["resolution"]["signals"] == ["images"]


def test_weights_and_thresholds_are_configurable() -> None:
    f = fleet(config(auto={"weights": {"tools": 5}, "reasoning_at": 5}))
    assert tier_of(profile("auto", tools=TOOLS), f) == "reasoning"


def test_keyword_rules_win_in_order_over_the_score() -> None:
    f = fleet(
        config(
            auto={
                "keywords": [
                    {"tier": "reasoning", "keywords": ["Prove"]},
                    {"tier": "simple", "keywords": ["prove", "translate"]},
                ]
            }
        )
    )
    p = profile("auto", "please PROVE this", tools=TOOLS)
    assert tier_of(p, f) == "reasoning"
    assert tier_of(profile("auto", "translate it", tools=TOOLS), f) == "simple"
    # only the last user message counts
    p = profile("auto", "hello")
    p.body["messages"].insert(0, {"role": "user", "content": "prove it"})
    assert tier_of(p, f) == "simple"


def test_a_missing_tier_becomes_the_default_tier() -> None:
    data = config()
    del data["tiers"]["simple"]
    assert tier_of(profile("auto"), fleet(data)) == "default"


@pytest.mark.parametrize(
    ("text", "body", "heartbeat"),
    [
        ("ping", {"max_tokens": 1}, True),
        ("ping", {"max_completion_tokens": 1}, True),
        ("ping", {}, False),  # no stated output budget
        ("ping", {"max_tokens": 2}, False),
        ("are you there", {"max_tokens": 1}, False),
    ],
)
def test_heartbeat_detection(text: str, body: dict[str, Any], heartbeat: bool) -> None:
    plan = build_plan(
        profile("auto", text, reasoning_effort="high", **body), fleet(), MemoryState()
    )
    assert plan.notes["resolution"]["heartbeat"] is heartbeat
    assert plan.headers["X-Fleetgate-Tier"] == ("simple" if heartbeat else "reasoning")


def test_heartbeat_detection_is_configurable() -> None:
    f = fleet(config(auto={"heartbeat": {"max_output_tokens": 5, "max_prompt_words": 3}}))
    p = profile("auto", "are you there", max_tokens=5, reasoning_effort="high")
    assert tier_of(p, f) == "simple"
    f = fleet(config(auto={"heartbeat": {"enabled": False}}))
    assert tier_of(profile("auto", "ping", max_tokens=1, reasoning_effort="high"), f) == (
        "reasoning"
    )


CONV = {"x-fleetgate-conversation": "conv-1"}


def test_stickiness_moves_up_never_down() -> None:
    sticky = MemoryStickyTiers()
    f = fleet()
    assert tier_of(profile("auto", headers=CONV), f, sticky) == "simple"
    assert tier_of(profile("auto", headers=CONV, tools=TOOLS), f, sticky) == "default"
    # a small follow-up stays on default
    p = profile("auto", "thanks", headers=CONV)
    plan = build_plan(p, f, MemoryState(), now=1000.0, sticky=sticky)
    assert plan.headers["X-Fleetgate-Tier"] == "default"
    assert plan.notes["resolution"]["sticky"] is True
    assert tier_of(profile("auto", headers=CONV, reasoning_effort="high"), f, sticky) == (
        "reasoning"
    )
    assert tier_of(profile("auto", headers=CONV), f, sticky) == "reasoning"
    # another conversation is not affected
    assert tier_of(profile("auto", headers={"x-fleetgate-conversation": "c2"}), f, sticky) == (
        "simple"
    )


def test_user_field_is_the_key_without_the_header_and_raw_keys_are_not_stored() -> None:
    sticky = MemoryStickyTiers()
    f = fleet()
    tier_of(profile("auto", user="alice@example.com", tools=TOOLS), f, sticky)
    assert tier_of(profile("auto", user="alice@example.com"), f, sticky) == "default"
    assert tier_of(profile("auto", user="bob"), f, sticky) == "simple"
    assert all("alice" not in key for key in sticky._entries)
    f = fleet(config(auto={"stickiness": {"use_user_field": False}}))
    sticky = MemoryStickyTiers()
    tier_of(profile("auto", user="alice", tools=TOOLS), f, sticky)
    assert tier_of(profile("auto", user="alice"), f, sticky) == "simple"


def test_sticky_entries_expire_and_are_bounded() -> None:
    sticky = MemoryStickyTiers(ttl=10, max_entries=2)
    f = fleet()
    tier_of(profile("auto", headers=CONV, tools=TOOLS), f, sticky, now=0.0)
    assert tier_of(profile("auto", headers=CONV), f, sticky, now=9.0) == "default"  # refreshed
    assert tier_of(profile("auto", headers=CONV), f, sticky, now=18.0) == "default"
    assert tier_of(profile("auto", headers=CONV), f, sticky, now=40.0) == "simple"  # expired
    for i in range(5):
        tier_of(profile("auto", headers={"x-fleetgate-conversation": f"k{i}"}), f, sticky)
    assert len(sticky) == 2


def test_a_heartbeat_neither_reads_nor_changes_the_conversation_tier() -> None:
    sticky = MemoryStickyTiers()
    f = fleet()
    tier_of(profile("auto", headers=CONV, tools=TOOLS), f, sticky)
    assert tier_of(profile("auto", "ping", headers=CONV, max_tokens=1), f, sticky) == "simple"
    assert tier_of(profile("auto", headers=CONV), f, sticky) == "default"


def test_read_only_view_never_writes() -> None:
    sticky = MemoryStickyTiers()
    tier_of(profile("auto", headers=CONV, tools=TOOLS), fleet(), ReadOnlySticky(sticky))
    assert len(sticky) == 0


def test_a_new_fleet_reconfigures_the_gateway_sticky_store() -> None:
    from fleetgate.fleet import FleetHolder
    from fleetgate.pipeline.core import Pipeline

    holder = FleetHolder(fleet())
    pipeline = Pipeline(holder)
    assert pipeline.sticky.ttl == 1800.0
    holder.swap(fleet(config(auto={"stickiness": {"ttl_seconds": 60, "max_entries": 7}})))
    assert (pipeline.sticky.ttl, pipeline.sticky.max_entries) == (60.0, 7)
