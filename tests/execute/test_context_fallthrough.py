"""A context-length 400 falls through only to a strictly larger window, without cooldown."""

from __future__ import annotations

import openai
import pytest

from fleetgate.testing import Fault
from tests.harness import Stack, deployment, provider
from tests.tiers import LONG_WINDOW, chat_calls, tiered_config, tiered_stack, words

SMALL = [{"role": "user", "content": "hello there"}]
OVERSIZE = [{"role": "user", "content": words(2000)}]  # estimated ~3000: long tier first


def test_context_400_falls_through_to_the_larger_sibling(stack: Stack, client_for) -> None:
    base, long = tiered_stack(stack)
    base.fail_next(Fault("context_error"))  # the base engine disagrees with the estimate
    resp = client_for(stack).chat.completions.with_raw_response.create(
        model="m", messages=SMALL, max_tokens=16
    )
    assert resp.headers["x-fleetgate-route"] == "m@long"
    assert resp.headers["x-fleetgate-attempts"] == "2"
    assert resp.headers["x-fleetgate-context-tier"] == "long"
    assert chat_calls(base) == 1 and chat_calls(long) == 1
    # a context error is the request's fault, not the deployment's: no cooldown
    assert stack.gateway is not None
    health = stack.gateway.pipeline.state.health("base")
    assert health.consecutive_failures == 0 and health.open_until == 0
    again = client_for(stack).chat.completions.with_raw_response.create(
        model="m", messages=SMALL, max_tokens=16
    )
    assert again.headers["x-fleetgate-route"] == "base"


@pytest.mark.parametrize("style", ["vllm", "sglang", "llamacpp", "openai"])
def test_in_stream_context_error_falls_through(stack: Stack, client_for, style: str) -> None:
    base = stack.engine("base", context_window=1000, error_style=style)
    long = stack.engine("long", context_window=LONG_WINDOW)
    stack.start_gateway(tiered_config(base, long))
    base.fail_next(Fault("stream_error_event"))  # HTTP 200, then an error as the first event
    with client_for(stack).chat.completions.with_streaming_response.create(
        model="m", messages=SMALL, max_tokens=4, stream=True
    ) as resp:
        assert resp.headers["x-fleetgate-route"] == "m@long"
        assert resp.headers["x-fleetgate-context-tier"] == "long"
        text = "".join(resp.iter_lines())
    assert "long says:" in text
    assert "error" not in text


def test_without_a_larger_sibling_the_400_returns_at_once(stack: Stack, client_for) -> None:
    a = stack.engine("a", context_window=1000)
    b = stack.engine("b", context_window=1000)
    stack.start_gateway(
        {
            "providers": [provider("pa", a), provider("pb", b)],
            "deployments": [
                deployment("m", "pa", context_window=1000),
                deployment("m", "pb", context_window=1000),
            ],
        }
    )
    with pytest.raises(openai.BadRequestError) as info:
        client_for(stack).chat.completions.create(model="m", messages=OVERSIZE, max_tokens=16)
    assert "maximum context length is 1000 tokens" in str(info.value)
    assert info.value.response.headers["x-fleetgate-attempts"] == "1"
    assert chat_calls(a) + chat_calls(b) == 1  # the equal-window sibling was not tried
    assert stack.gateway is not None
    for dep in ("pa", "pb"):
        assert stack.gateway.pipeline.state.health(dep).consecutive_failures == 0


def test_larger_tier_503_then_base_400_gives_the_retryable_error(stack: Stack, client_for) -> None:
    base, long = tiered_stack(stack)
    long.set_fault(Fault("status", status=503))
    with pytest.raises(openai.APIStatusError) as info:
        client_for(stack).chat.completions.create(model="m", messages=OVERSIZE, max_tokens=16)
    # long first (best fit), 503; then base (overflow), whose context-length 400 must not
    # hide that the request can succeed later
    assert info.value.status_code == 502
    body = info.value.body
    assert isinstance(body, dict) and body["code"] == "upstream_error"
    assert chat_calls(long) == 1 and chat_calls(base) == 1


def test_base_400_then_larger_tier_503_gives_the_retryable_error(stack: Stack, client_for) -> None:
    base, long = tiered_stack(stack)
    base.fail_next(Fault("context_error"))
    long.set_fault(Fault("status", status=503))
    with pytest.raises(openai.APIStatusError) as info:
        client_for(stack).chat.completions.create(model="m", messages=SMALL, max_tokens=16)
    assert info.value.status_code == 502
    assert chat_calls(base) == 1 and chat_calls(long) == 1


def test_other_400s_still_return_at_once(stack: Stack, client_for) -> None:
    base, long = tiered_stack(stack)
    base.fail_next(Fault("bad_request"))
    with pytest.raises(openai.BadRequestError):
        client_for(stack).chat.completions.create(model="m", messages=SMALL, max_tokens=16)
    assert long.requests == []
