"""Exact counts near a tier boundary: they override the estimate, under a budget and a cap."""

from __future__ import annotations

import threading
import time
from typing import Any

import openai

from tests.harness import Stack, wait_until
from tests.tiers import chat_calls, tiered_stack, words

# The fake engine counts whitespace-separated words, so text whose words the estimate costs
# differently makes it disagree. Both requests' estimated bands straddle the 1k window, so
# only a count can place them (the first test asserts the band).
# 1200 lone full stops: estimated about 950..1550, counted 1201 + 10 (does not fit 1k)
UNDER_ESTIMATED = [{"role": "user", "content": words(1200, ".")}]
# 80 ten-digit numbers: estimated about 720..1180, counted 81 + 10 (fits)
OVER_ESTIMATED = [{"role": "user", "content": words(80, "1234567890")}]


def _create(client: openai.OpenAI, messages: list[dict[str, Any]]) -> Any:
    return client.chat.completions.with_raw_response.create(
        model="m", messages=messages, max_tokens=10
    )


def test_exact_count_moves_an_underestimated_request_to_the_long_tier(
    stack: Stack, client_for
) -> None:
    base, long = tiered_stack(stack)
    resp = _create(client_for(stack), UNDER_ESTIMATED)
    assert resp.headers["x-fleetgate-context-estimate"] == "1211; exact"
    assert resp.headers["x-fleetgate-route"] == "m@long"
    assert resp.headers["x-fleetgate-attempts"] == "1"  # no wasted 400 from the base tier
    assert base.tokenize_calls == 1 and chat_calls(base) == 0
    tokenize = next(r for r in base.requests if r.path == "/tokenize")
    assert tokenize.body["messages"] == UNDER_ESTIMATED
    assert tokenize.body["model"] == "up-m"
    assert long.tokenize_calls == 0


def test_exact_count_keeps_an_overestimated_request_on_the_base_tier(
    stack: Stack, client_for
) -> None:
    base, long = tiered_stack(stack)
    resp = _create(client_for(stack), OVER_ESTIMATED)
    assert resp.headers["x-fleetgate-context-estimate"] == "91; exact"
    assert resp.headers["x-fleetgate-route"] == "base"
    assert resp.headers["x-fleetgate-context-tier"] == "default"
    assert chat_calls(base) == 1
    assert long.requests == []


def test_tokenize_timeout_falls_back_to_the_estimate(stack: Stack, client_for) -> None:
    base, long = tiered_stack(stack, {"refine": {"timeout_seconds": 0.3}})
    base.tokenize_delay = 5.0
    started = time.monotonic()
    resp = _create(client_for(stack), OVER_ESTIMATED)
    elapsed = time.monotonic() - started
    assert resp.headers["x-fleetgate-context-estimate"].endswith("; estimate")
    assert resp.headers["x-fleetgate-route"] == "m@long"  # the estimate said: not the base
    assert elapsed < 4.0  # bounded by the budget, not by the slow tokenizer
    assert base.tokenize_calls == 1
    assert chat_calls(long) == 1


def test_tokenize_failure_falls_back_to_the_estimate(stack: Stack, client_for) -> None:
    base, long = tiered_stack(stack)
    stack.lt.run(base.stop())  # the base engine is down: tokenize fails, so does base
    resp = _create(client_for(stack), OVER_ESTIMATED)
    assert resp.headers["x-fleetgate-context-estimate"].endswith("; estimate")
    assert resp.headers["x-fleetgate-route"] == "m@long"
    assert chat_calls(long) == 1


def test_concurrency_cap_skips_the_count_when_full(stack: Stack, client_for) -> None:
    base, long = tiered_stack(stack, {"refine": {"max_concurrency": 1, "timeout_seconds": 30}})
    base.tokenize_delay = 30.0  # the first count holds the only slot
    client = client_for(stack, timeout=60)
    results: dict[str, Any] = {}

    def first() -> None:
        results["first"] = _create(client, OVER_ESTIMATED)

    thread = threading.Thread(target=first, daemon=True)
    thread.start()
    wait_until(lambda: base.tokenize_calls == 1, 10, "first count in flight")
    second = _create(client, OVER_ESTIMATED)
    assert second.headers["x-fleetgate-context-estimate"].endswith("; estimate")
    assert base.tokenize_calls == 1  # the second request did not ask
    assert chat_calls(long) == 1  # and went where the estimate points
    base.tokenize_delay = 0.0
    stack.lt.run(base.stop())  # end the held count: the first request falls back too
    thread.join(30)
    assert results["first"].headers["x-fleetgate-context-estimate"].endswith("; estimate")


def test_no_count_far_from_any_boundary(stack: Stack, client_for) -> None:
    base, long = tiered_stack(stack)
    client = client_for(stack)
    _create(client, [{"role": "user", "content": "short"}])
    _create(client, [{"role": "user", "content": words(2000)}])  # ~1400..2300: no window inside
    assert base.tokenize_calls == 0 and long.tokenize_calls == 0


def test_guard_reject_waits_for_the_exact_count(stack: Stack, client_for) -> None:
    """Estimated above the largest window but within the band: the exact count decides."""
    base, long = tiered_stack(stack, context_guard="reject")
    # 1000 eight-digit numbers: estimated about 7300..12000 (the upper bound fits nowhere,
    # the lower one does), counted 1001 + 10: only the long tier holds it
    messages = [{"role": "user", "content": words(1000, "12345678")}]
    resp = _create(client_for(stack), messages)
    assert resp.headers["x-fleetgate-context-estimate"] == "1011; exact"
    assert resp.headers["x-fleetgate-route"] == "m@long"
    assert chat_calls(base) == 0 and chat_calls(long) == 1
