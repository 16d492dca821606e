"""Text with runs of one repeated character (separator lines, blank lines) on the real
llama.cpp engine: the tokenizer makes each run a token or a few, so the estimate, which
costs every character, is far over. It must never be evidence that such a request fits
nowhere: `context_guard: reject` counts it and routes it, a silent worker keeps it, and an
honest prompt count is no suspected truncation."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from fleetgate.context.truncation import judge
from fleetgate.testing.llama import ALIAS
from tests.context.chats import prompt_tokens
from tests.engines import TO_THE_LIMIT, LlamaFactory, llama_provider
from tests.harness import Stack, wait_for_own_fits

# a build log: 120 short lines under 80-character rules; about 1,100 prompt tokens on
# Qwen2, estimated at over 5,000 (every `=` costed)
LOG = "".join(f"step {i}: ok\n" + "=" * 80 + "\n" for i in range(120))
PROSE = "The quick brown fox jumps over the lazy dog. " * 600  # about 6,000 tokens


def _tiers(llama: LlamaFactory, guard: str, **provider: Any) -> dict[str, Any]:
    """Model `tiny` on a 1024 and a 2048 engine. The counts are what these tests are about:
    each has a budget (`refine.timeout_seconds`) that a loaded machine does not run out of
    (at the default 2 s, one that did left the estimate standing)."""
    return {
        "routing": {"context": {"refine": {"timeout_seconds": 30}}},
        "providers": [
            llama_provider("small", llama(n_ctx=1024), discovery=False, **provider),
            llama_provider("big", llama(n_ctx=2048), discovery=False, **provider),
        ],
        "deployments": [
            {
                "id": n,
                "model": "tiny",
                "provider": n,
                "upstream_model": ALIAS,
                "context_window": w,
                "params": TO_THE_LIMIT,
            }
            for n, w in (("small", 1024), ("big", 2048))
        ],
        "models": [{"id": "tiny", "context_guard": guard}],
    }


def _engine_calls(stack: Stack) -> int:
    metrics = httpx.get(stack.url + "/metrics", timeout=5).text
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in metrics.splitlines()
        if line.startswith("fleetgate_attempts_total{")
    )


@pytest.mark.parametrize(
    ("guard", "provider"),
    [("reject", {}), ("allow", {"truncates": "silently"})],
    ids=["guard-reject", "silent-workers"],
)
def test_separator_lines_are_counted_and_served_not_refused(
    stack: Stack, client_for: Any, llama: LlamaFactory, guard: str, provider: dict[str, Any]
) -> None:
    gateway = stack.start_gateway(_tiers(llama, guard, **provider))
    # both deployments on their own fit first: a request that came while one was still on
    # the family's table would be placed by that table's band, whose upper bound (over
    # 3,000) the header shows
    wait_for_own_fits(gateway, ("small", "big"), 30)
    client = client_for(stack, timeout=60)
    messages: Any = [{"role": "user", "content": LOG}]
    resp = client.chat.completions.with_raw_response.create(
        model="tiny", messages=messages, max_tokens=50
    )
    body = resp.parse()
    truth = prompt_tokens(llama(n_ctx=2048), "chat.completions", {"messages": messages})
    assert 1024 < truth + 50 < 2048  # fits the big tier only
    assert resp.headers["x-fleetgate-route"] == "big"
    # counted, or placed by the learned estimate where it fits (uncounted, or the count
    # out of its budget: the estimate stands): never refused
    tokens, source = resp.headers["x-fleetgate-context-estimate"].split("; ")
    record = httpx.get(f"{stack.url}/v1/requests/{resp.headers['x-request-id']}").json()
    if source == "exact":
        assert int(tokens) == truth + 50
    else:
        assert record["notes"].get("context_refine") in (None, "timeout")
        assert 1024 < int(tokens) <= 2048
    assert body.usage is not None and body.usage.completion_tokens == 50
    # what really fits nowhere is still refused, before any upstream call
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": PROSE}], max_tokens=50
        )
    assert refused.value.code == "context_too_large"
    assert _engine_calls(stack) == 1


def test_an_honest_count_of_separator_lines_is_no_suspected_truncation(
    llama: LlamaFactory,
) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": LOG}]}
    truth = prompt_tokens(llama(n_ctx=2048), "chat.completions", body)
    assert judge(body, "ollama.chat", "ollama", 4096, truth, 10, "stop") is None
    # a prompt the worker did cut is still suspected
    cut = judge(body, "ollama.chat", "ollama", 4096, 60, 10, "stop")
    assert cut is not None and cut.note == "truncation_suspected"


def test_a_lower_bound_over_every_window_is_counted_before_a_refusal(
    stack: Stack, client_for: Any, llama: LlamaFactory
) -> None:
    """A long word said again and again is two tokens each on Qwen2 and estimated at
    nearly four: even the band's lower bound is over the largest window, though the request
    fits it. A lower bound is a quantile, not evidence, while an engine can count: the
    guard counts first, and serves what the count shows fits. (On the family's prior: a
    fingerprint of the engine costs this text within the windows' reach.)"""
    config = _tiers(llama, "reject")
    config["routing"]["context"]["fingerprint"] = False
    stack.start_gateway(config)
    client = client_for(stack, timeout=60)
    messages: Any = [{"role": "user", "content": "internationalization " * 900}]
    truth = prompt_tokens(llama(n_ctx=2048), "chat.completions", {"messages": messages})
    assert 1024 < truth + 50 < 2048  # fits the big tier only
    resp = client.chat.completions.with_raw_response.create(
        model="tiny", messages=messages, max_tokens=50
    )
    assert resp.headers["x-fleetgate-route"] == "big"
    assert resp.headers["x-fleetgate-context-estimate"] == f"{truth + 50}; exact"
    record = httpx.get(f"{stack.url}/v1/requests/{resp.headers['x-request-id']}").json()
    assert record["notes"]["context_estimated"] > 2048 / 0.81  # its lower bound fits nowhere
