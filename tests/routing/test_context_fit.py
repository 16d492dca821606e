"""Best-fit tier placement through the real gateway, with 1k and 10k fake engines."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import openai
import orjson
import pytest

from fleetgate.config.schema import ContextConfig
from fleetgate.context.need import estimate_need
from fleetgate.fleet import build_fleet
from fleetgate.ingress.openai import parse_openai
from fleetgate.routing.planner import build_plan
from fleetgate.state.runtime import MemoryState
from tests.harness import Stack, deployment, fleet_config, provider, wait_until
from tests.tiers import LONG_WINDOW, chat_calls, tiered_stack, words

SMALL = [{"role": "user", "content": "hello there"}]
OVERSIZE = [{"role": "user", "content": words(2000)}]  # ~3000 estimated, 2001 counted


def test_small_requests_stay_on_base_with_zero_long_traffic(stack: Stack, client_for) -> None:
    base, long = tiered_stack(stack)
    client = client_for(stack)
    for _ in range(6):
        resp = client.chat.completions.with_raw_response.create(
            model="m", messages=SMALL, max_tokens=16
        )
        assert resp.headers["x-fleetgate-route"] == "base"
        assert resp.headers["x-fleetgate-context-tier"] == "default"
        assert resp.headers["x-fleetgate-context-estimate"].endswith("; estimate")
        assert resp.parse().model == "m"
    assert chat_calls(base) == 6
    assert long.requests == []  # not even a tokenize call: nothing was near a boundary
    assert base.tokenize_calls == 0


def test_oversize_request_goes_to_the_long_tier(stack: Stack, client_for) -> None:
    base, long = tiered_stack(stack)
    resp = client_for(stack).chat.completions.with_raw_response.create(
        model="m", messages=OVERSIZE, max_tokens=16
    )
    assert resp.headers["x-fleetgate-route"] == "m@long"
    assert resp.headers["x-fleetgate-context-tier"] == "long"
    assert resp.headers["x-fleetgate-attempts"] == "1"
    assert base.requests == []
    assert long.requests[-1].body["model"] == "up-m"
    estimate = int(resp.headers["x-fleetgate-context-estimate"].split(";")[0])
    assert estimate > 2000
    record = _record(stack, resp.headers["x-request-id"])
    assert record["notes"]["context_tier"] == "long"
    assert record["notes"]["provider_ctx"] == {"base": 1000, "m@long": LONG_WINDOW}
    assert record["notes"]["context_estimate"] == estimate

    def metrics() -> str:
        with urllib.request.urlopen(stack.url + "/metrics") as resp:
            return resp.read().decode()

    wait_until(lambda: 'context_tier="long"' in metrics(), 5, "metrics written")
    attempt = next(line for line in metrics().splitlines() if 'deployment="m@long"' in line)
    assert f'provider_ctx="{LONG_WINDOW}"' in attempt


def test_streaming_selects_the_tier_too(stack: Stack, client_for) -> None:
    base, long = tiered_stack(stack)
    client = client_for(stack)
    with client.chat.completions.with_streaming_response.create(
        model="m", messages=OVERSIZE, max_tokens=4, stream=True
    ) as resp:
        assert resp.headers["x-fleetgate-context-tier"] == "long"
        text = "".join(resp.iter_lines())
    assert "long says:" in text
    with client.chat.completions.with_streaming_response.create(
        model="m", messages=SMALL, max_tokens=4, stream=True
    ) as resp:
        assert resp.headers["x-fleetgate-context-tier"] == "default"
        text = "".join(resp.iter_lines())
    assert "base says:" in text
    assert chat_calls(base) == 1 and chat_calls(long) == 1


def test_catalog_shows_the_model_once_with_its_largest_window(stack: Stack) -> None:
    tiered_stack(stack)
    with urllib.request.urlopen(stack.url + "/v1/models") as resp:
        data = orjson.loads(resp.read())["data"]
    assert [(m["id"], m["context_length"]) for m in data] == [("m", LONG_WINDOW)]


@pytest.mark.parametrize("refine", [True, False], ids=["counted", "no-count"])
def test_guard_reject_refuses_before_any_upstream_call(
    stack: Stack, client_for, refine: bool
) -> None:
    base, long = tiered_stack(stack, {"refine": {"enabled": refine}}, context_guard="reject")
    huge = [{"role": "user", "content": words(20000)}]
    with pytest.raises(openai.BadRequestError) as info:
        client_for(stack).chat.completions.create(model="m", messages=huge, max_tokens=16)
    err = info.value.body
    assert isinstance(err, dict) and err["code"] == "context_too_large"
    assert f"({LONG_WINDOW} tokens)" in err["message"]
    assert chat_calls(base) == 0 and chat_calls(long) == 0
    if refine:  # beyond doubt (more words than the window holds): no count is asked
        assert base.requests == [] and long.requests == []
        # the family's estimate is over the windows, its words are not: the count decides
        # (the fake engine counts 9,982 words and a token a message: 9,987 + 16 > 10,000)
        near = [
            {"role": "user", "content": words(LONG_WINDOW - 22)},
            *({"role": r, "content": "a"} for r in ("assistant", "user", "assistant", "user")),
        ]
        with pytest.raises(openai.BadRequestError) as info:
            client_for(stack).chat.completions.create(model="m", messages=near, max_tokens=16)
        assert "(counted exactly: " in info.value.message
        assert chat_calls(base) == 0 and chat_calls(long) == 0
        return
    # none may count: the lower bound is, and the message states the upper bound on the
    # largest deployment
    fleet = stack.gateway.pipeline.holder.fleet
    body = {"messages": huge, "max_tokens": 16}
    deps = list(fleet.models["m"].deployments)
    estimate, _ = estimate_need(
        body, "chat.completions", ContextConfig(default_output_reserve=64), deps, None
    )
    assert f"about {estimate.total} tokens" in err["message"]
    assert base.requests == [] and long.requests == []


def test_guard_allow_sends_what_fits_nowhere_to_the_biggest_window_first(
    stack: Stack, client_for
) -> None:
    base, long = tiered_stack(stack)
    huge = [{"role": "user", "content": words(20000)}]  # even its lower bound fits nowhere
    with pytest.raises(openai.BadRequestError):
        client_for(stack).chat.completions.create(model="m", messages=huge, max_tokens=16)
    assert chat_calls(long) == 1
    assert base.requests == []  # the 10k tier said too long; the 1k tier is not larger


def test_single_window_model_routes_as_before_without_tokenize(stack: Stack, client_for) -> None:
    a = stack.engine("a", context_window=1000)
    b = stack.engine("b", context_window=1000)
    stack.start_gateway(
        {
            "routing": {"context": {"default_output_reserve": 64}},
            "providers": [provider("pa", a), provider("pb", b)],
            "deployments": [
                deployment("m", "pa", context_window=1000, priority=1),
                deployment("m", "pb", context_window=1000),
            ],
        }
    )
    client = client_for(stack)
    # an estimate right at the window (0.7-1.3 x): a tiered model would count exactly here
    near = [{"role": "user", "content": words(700, "abc")}]
    for messages in (SMALL, near, OVERSIZE):
        plan = _post(stack, "/v1/routing/explain", {"model": "m", "messages": messages})
        assert [c["deployment"] for c in plan["candidates"]] == ["pb", "pa"]  # priority order
    for messages in (SMALL, near):
        resp = client.chat.completions.with_raw_response.create(
            model="m", messages=messages, max_tokens=8
        )
        assert resp.headers["x-fleetgate-route"] == "pb"
    assert a.tokenize_calls == 0 and b.tokenize_calls == 0
    assert chat_calls(a) == 0


def test_best_fit_order_with_unknown_windows() -> None:
    """Fitting (smallest first) → unknown → too small (biggest first); ties keep order."""
    config = fleet_config(
        {
            "routing": {"context": {"margin_percent": 0, "message_overhead": 0}},
            "providers": [
                {"id": p, "base_url": f"http://{p}.invalid/v1"} for p in ("p1", "p2", "p3", "p4")
            ],
            "deployments": [
                {"id": "w500", "model": "m", "provider": "p1", "context_window": 500},
                {"id": "unknown", "model": "m", "provider": "p2"},
                {"id": "w10k", "model": "m", "provider": "p3", "context_window": 10000},
                {"id": "w1k", "model": "m", "provider": "p4", "context_window": 1000},
            ],
        }
    )
    fleet = build_fleet(config)

    def order(n_words: int) -> list[str]:
        body = {"model": "m", "prompt": words(n_words), "max_tokens": 1}
        profile = parse_openai("completions", orjson.dumps(body))
        plan = build_plan(profile, fleet, MemoryState())
        return [c.deployment.id for c in plan.candidates]

    # a word costs about one token (generic family); the band is 0.7..1.15 x that
    assert order(600) == ["w1k", "w10k", "unknown", "w500"]
    assert order(300) == ["w500", "w1k", "w10k", "unknown"]
    assert order(20000) == ["unknown", "w10k", "w1k", "w500"]


def test_holding_the_request_ranks_first_then_priority_then_capacity() -> None:
    config = fleet_config(
        {
            "routing": {"context": {"margin_percent": 0, "message_overhead": 0}},
            "providers": [{"id": p, "base_url": f"http://{p}.invalid/v1"} for p in ("p1", "p2")],
            "deployments": [
                {"id": "w1k", "model": "m", "provider": "p1", "context_window": 1000},
                {
                    "id": "w2k-later",
                    "model": "m",
                    "provider": "p2",
                    "context_window": 2000,
                    "priority": -1,
                },
            ],
        }
    )
    fleet = build_fleet(config)

    def order(n_words: int) -> list[str]:
        body = {"model": "m", "prompt": words(n_words), "max_tokens": 1}
        plan = build_plan(parse_openai("completions", orjson.dumps(body)), fleet, MemoryState())
        return [c.deployment.id for c in plan.candidates]

    # both hold the request: the operator's priority decides before the window
    assert order(500) == ["w2k-later", "w1k"]
    assert order(1500) == ["w2k-later", "w1k"]  # only the 2k fits
    # among equal windows the operator's priority decides
    config2 = config.model_copy(
        update={
            "deployments": [
                config.deployments[0].model_copy(update={"context_window": 2000}),
                config.deployments[1],
            ]
        }
    )
    fleet = build_fleet(config2)
    assert order(500) == ["w2k-later", "w1k"]


def test_priority_beats_best_fit_among_deployments_that_hold_the_request(
    stack: Stack, client_for
) -> None:
    """A short tier (1k), a long one (4k) and a priced fallback (4k) preferred by priority:
    the fallback first while it holds the request; a request only the 4k windows hold never
    goes to the short tier first; a request nothing holds goes biggest first."""
    short, long, hosted = (stack.engine(n, context_window=w) for n, w in SIZES)
    stack.start_gateway(
        {
            "routing": {"context": {"margin_percent": 0, "message_overhead": 0}},
            "providers": [provider(e.name, e) for e in (short, long, hosted)],
            "deployments": [
                deployment("m", "short", context_window=1024, priority=9),
                deployment("m", "long", context_window=4096),
                deployment("m", "hosted", context_window=4096, priority=-1, price=PRICE),
            ],
        }
    )
    client = client_for(stack)

    def plan(n_words: int, **extra: Any) -> dict[str, Any]:
        body = {"model": "m", "prompt": words(n_words), "max_tokens": 1, **extra}
        return _post(stack, "/v1/routing/explain", body)

    def order(p: dict[str, Any]) -> list[tuple[str, str | None]]:
        return [(c["deployment"], c["ranked_by"]) for c in p["candidates"]]

    assert order(plan(100)) == [("hosted", "priority"), ("long", "priority"), ("short", None)]
    resp = client.completions.with_raw_response.create(model="m", prompt=words(100), max_tokens=1)
    assert resp.headers["x-fleetgate-route"] == "hosted"
    # 2000 words hold only in the 4k windows: the short tier is last, whatever its priority
    assert order(plan(2000)) == [("hosted", "priority"), ("long", "fit"), ("short", None)]
    # nothing holds 6000 words: the biggest windows first, priority among them
    assert order(plan(6000)) == [("hosted", "priority"), ("long", "priority"), ("short", None)]
    # a request's own `sort` ranks after the window, as before
    sorted_plan = plan(100, provider={"sort": "price"})
    assert order(sorted_plan) == [("short", "window"), ("long", "sort"), ("hosted", None)]


SIZES = (("short", 1024), ("long", 4096), ("hosted", 4096))
PRICE = {"input": 1, "output": 2}


def test_one_priority_routes_by_window_as_before(stack: Stack) -> None:
    short, long = stack.engine("short", context_window=1024), stack.engine("long")
    stack.start_gateway(
        {
            "routing": {"context": {"margin_percent": 0, "message_overhead": 0}},
            "providers": [provider("long", long), provider("short", short)],
            "deployments": [
                deployment("m", "long", context_window=4096),
                deployment("m", "short", context_window=1024),
            ],
        }
    )
    body = {"model": "m", "prompt": words(100), "max_tokens": 1}
    plan = _post(stack, "/v1/routing/explain", body)
    assert [(c["deployment"], c["ranked_by"]) for c in plan["candidates"]] == [
        ("short", "window"),
        ("long", None),
    ]


def _post(stack: Stack, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        stack.url + path, data=orjson.dumps(body), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request) as resp:
        return orjson.loads(resp.read())


def _record(stack: Stack, request_id: str) -> dict[str, Any]:
    def fetch() -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"{stack.url}/v1/requests/{request_id}") as resp:
                return orjson.loads(resp.read())
        except urllib.error.HTTPError:
            return None

    wait_until(lambda: fetch() is not None, 5, "request record written")
    record = fetch()
    assert record is not None
    return record
