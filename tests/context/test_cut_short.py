"""Answers a window cut short, on the real llama.cpp engine: flagged on every protocol, whole
or streamed, counted, recorded, and the window they show is learned."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import ollama
import pytest

from fleetgate.context.truncation import cut_short, judge
from fleetgate.testing.llama import ALIAS
from tests.engines import TO_THE_LIMIT, LlamaFactory, llama_provider, misstated_tiers
from tests.harness import Stack, deployment, wait_until

LONG = "hello " * 300  # about 330 prompt tokens with the template: fits 512, not with 400 more


def record(stack: Stack, request_id: str) -> dict[str, Any]:
    url = f"{stack.url}/v1/requests/{request_id}"
    wait_until(lambda: httpx.get(url, timeout=5).status_code == 200, 5, "record written")
    body: dict[str, Any] = httpx.get(url, timeout=5).json()
    return body


@pytest.fixture
def on_512(stack: Stack, llama: LlamaFactory) -> Stack:
    stack.start_gateway(
        {
            "providers": [llama_provider("cpp", llama(n_ctx=512))],
            "deployments": [
                deployment(
                    "tiny", "cpp", upstream_model=ALIAS, context_window=512, params=TO_THE_LIMIT
                )
            ],
        }
    )
    return stack


def test_a_cut_short_answer_is_flagged_recorded_and_counted(on_512: Stack, client_for) -> None:
    client = client_for(on_512, timeout=60)
    messages = [{"role": "user", "content": LONG}]
    resp = client.chat.completions.with_raw_response.create(
        model="tiny", messages=messages, max_tokens=400
    )
    body = resp.parse()
    assert body.choices[0].finish_reason == "length"
    assert body.usage is not None
    prompt, completion = body.usage.prompt_tokens, body.usage.completion_tokens
    assert prompt + completion == 512 and completion < 400
    assert resp.headers["x-fleetgate-truncated"] == (
        f"prompt={prompt}; completion={completion}; window=512"
    )
    notes = record(on_512, resp.headers["x-request-id"])["notes"]
    assert notes["context_cut_short"] == {"prompt": prompt, "completion": completion, "window": 512}
    # the client's own limit is no cut, even on a long prompt
    own = client.chat.completions.with_raw_response.create(
        model="tiny", messages=messages, max_tokens=5
    )
    assert own.parse().choices[0].finish_reason == "length"
    assert "x-fleetgate-truncated" not in own.headers
    assert "context_cut_short" not in record(on_512, own.headers["x-request-id"])["notes"]
    metrics = httpx.get(on_512.url + "/metrics", timeout=5).text
    assert 'fleetgate_cut_short_total{deployment="cpp"} 1.0' in metrics


def _drained(streaming: Any) -> str:
    """Read a streamed answer to its end; its request id."""
    with streaming as resp:
        for _ in resp.iter_lines():
            pass
        return str(resp.headers["x-request-id"])


def _openai_stream(stack: Stack, client_for: Any, usage: bool) -> str:
    extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if usage else {}
    return _drained(
        client_for(stack, timeout=60).chat.completions.with_streaming_response.create(
            model="tiny",
            messages=[{"role": "user", "content": LONG}],
            max_tokens=400,
            stream=True,
            **extra,
        )
    )


def _anthropic_stream(stack: Stack, client_for: Any, usage: bool) -> str:
    client = anthropic.Anthropic(base_url=stack.url, api_key="x", max_retries=0, timeout=60)
    return _drained(
        client.messages.with_streaming_response.create(
            model="tiny",
            max_tokens=400,
            messages=[{"role": "user", "content": LONG}],
            stream=True,
        )
    )


def _responses_stream(stack: Stack, client_for: Any, usage: bool) -> str:
    return _drained(
        client_for(stack, timeout=60).responses.with_streaming_response.create(
            model="tiny", input=LONG, max_output_tokens=400, stream=True
        )
    )


def _ollama_stream(stack: Stack, client_for: Any, usage: bool) -> str:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": LONG}],
        "options": {"num_predict": 400},
    }
    return _drained(httpx.stream("POST", stack.url + "/api/chat", json=body, timeout=60))


@pytest.mark.parametrize(
    ("send", "usage"),
    [
        (_openai_stream, True),
        (_openai_stream, False),  # no usage chunk: llama.cpp's `timings` tell
        (_anthropic_stream, True),  # native Messages: input tokens are the cache reads too
        (_responses_stream, True),
        (_ollama_stream, True),
    ],
    ids=["chat-usage", "chat-no-usage", "messages", "responses", "ollama"],
)
def test_a_cut_short_stream_is_recorded_and_counted(
    on_512: Stack, client_for: Any, send: Any, usage: bool
) -> None:
    request_id = send(on_512, client_for, usage)
    notes = record(on_512, request_id)["notes"]
    cut = notes["context_cut_short"]
    assert cut["window"] == 512 and cut["prompt"] + cut["completion"] == 512
    assert 300 < cut["prompt"] < 400
    metrics = httpx.get(on_512.url + "/metrics", timeout=5).text
    assert 'fleetgate_cut_short_total{deployment="cpp"} 1.0' in metrics


def test_an_anthropic_answer_counts_its_cache_reads_as_prompt(on_512: Stack) -> None:
    client = anthropic.Anthropic(base_url=on_512.url, api_key="x", max_retries=0, timeout=60)
    messages: list[Any] = [{"role": "user", "content": LONG}]
    client.messages.create(model="tiny", max_tokens=4, messages=messages)  # cached now
    resp = client.messages.with_raw_response.create(model="tiny", max_tokens=400, messages=messages)
    usage = resp.parse().usage
    assert (usage.cache_read_input_tokens or 0) > 300  # what llama.cpp reports as cached
    prompt = usage.input_tokens + (usage.cache_read_input_tokens or 0)
    assert resp.headers["x-fleetgate-truncated"] == (
        f"prompt={prompt}; completion={usage.output_tokens}; window=512"
    )


def test_an_ollama_client_sees_the_cut_too(on_512: Stack) -> None:
    client = ollama.Client(host=on_512.url, timeout=60)
    answer = client.chat(
        model="tiny", messages=[{"role": "user", "content": LONG}], options={"num_predict": 400}
    )
    assert answer.done_reason == "length"
    assert (answer.prompt_eval_count or 0) + (answer.eval_count or 0) == 512


def test_the_window_a_cut_shows_is_learned_and_routes_the_next_request(
    stack: Stack, client_for, llama: LlamaFactory
) -> None:
    stack.start_gateway(misstated_tiers(llama))
    client = client_for(stack, timeout=60)
    messages = [{"role": "user", "content": LONG}]
    first = client.chat.completions.with_raw_response.create(
        model="tiny", messages=messages, max_tokens=400
    )
    # small's cut answer was set aside for big's whole one (tests/context/test_cut_retry.py)
    assert (first.headers["x-fleetgate-route"], first.headers["x-fleetgate-attempts"]) == (
        "big",
        "2",
    )
    windows = httpx.get(stack.url + "/v1/fleet/windows", timeout=5).json()["data"]
    small = next(w for w in windows if w["deployment"] == "small")
    assert (small["tokens"], small["source"]) == (512, "cut_short")
    again = client.chat.completions.with_raw_response.create(
        model="tiny", messages=messages, max_tokens=400
    )
    assert (again.headers["x-fleetgate-route"], again.headers["x-fleetgate-attempts"]) == (
        "big",
        "1",
    )
    assert "x-fleetgate-truncated" not in again.headers
    assert again.parse().choices[0].finish_reason == "length"  # its own limit
    assert again.parse().usage.completion_tokens == 400  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("prompt", "completion", "stop", "window", "requested", "kind", "cut"),
    [
        (330, 182, "length", 512, 400, "llamacpp", 512),  # the window stopped it
        (330, 182, None, 512, 400, "llamacpp", 512),  # no stop reason (Responses)
        (330, 182, "stop", 512, 400, "llamacpp", None),  # a natural end
        (312, 200, "length", 512, 200, "llamacpp", None),  # the client's own limit, at 512
        (330, 182, "length", 512, None, "openai", 512),  # no limit: generated to the window
        (330, 182, "length", 4096, 400, "llamacpp", 512),  # a window smaller than thought
        (330, 182, "length", 4096, 400, "openai", None),  # a hosted API may cap its output
        (330, 182, "length", None, None, "vllm", None),  # nothing to judge by
        (None, 182, "length", 512, 400, "llamacpp", None),  # no usage
    ],
)
def test_cut_short_rule(
    prompt: int | None,
    completion: int,
    stop: str | None,
    window: int | None,
    requested: int | None,
    kind: str,
    cut: int | None,
) -> None:
    found = cut_short(prompt, completion, stop, window, requested, kind)
    assert (found.window if found else None) == cut


def test_a_prompt_count_below_the_prompts_lower_bound_teaches_no_window() -> None:
    body = {"messages": [{"role": "user", "content": LONG}], "max_tokens": 400}
    learned = judge(body, "chat.completions", "llamacpp", 4096, 330, 182, "length")
    assert learned is not None and learned.window == 512
    # 1 prompt token for 1,500 bytes of text: a count that cannot be right
    assert judge(body, "chat.completions", "llamacpp", 4096, 1, 182, "length") is None
    # at the known window it is still a cut
    assert judge(body, "chat.completions", "llamacpp", 183, 1, 182, "length") is not None
