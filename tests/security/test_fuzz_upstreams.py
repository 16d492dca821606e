"""Keep it true from the other side: hypothesis-made upstream answers, over real HTTP.

Whatever an upstream answers (any status, odd headers, bodies shaped like an answer, an
error or a stream with arbitrary values in them, or no JSON at all), each client protocol
gets a normal answer or a clean error in its own shape, and never a 500 of the gateway's
own making (`internal_error`). Bounded: EXAMPLES answers per client endpoint.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests.harness import (
    Stack,
    anthropic_provider,
    deployment,
    ollama_provider,
    provider,
    wait_until,
)
from tests.security.servers import Scripted
from tests.security.shapes import clean_error, fuzzing, json_values

EXAMPLES = 100  # upstream answers per client endpoint and upstream kind
MSG = [{"role": "user", "content": "hi"}]
REQUESTS: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "m", "messages": MSG, "max_tokens": 5},
    "/v1/chat/completions#stream": {"model": "m", "messages": MSG, "stream": True},
    "/v1/messages": {"model": "m", "max_tokens": 5, "messages": MSG},
    "/v1/messages#stream": {"model": "m", "max_tokens": 5, "messages": MSG, "stream": True},
    "/v1/responses": {"model": "m", "input": "hi", "max_output_tokens": 5},
    "/api/chat": {"model": "m", "messages": MSG, "stream": False},
    "/api/chat#stream": {"model": "m", "messages": MSG},
}

counts = json_values | st.integers(-(2**63), 2**63 - 1) | st.sampled_from([-1, 0, 2**31, 2**63 - 1])
usage = st.fixed_dictionaries(
    {},
    optional={
        "prompt_tokens": counts,
        "completion_tokens": counts,
        "input_tokens": counts,
        "output_tokens": counts,
        "cache_read_input_tokens": counts,
    },
)
choice = st.fixed_dictionaries(
    {},
    optional={
        "index": json_values,
        "message": st.fixed_dictionaries(
            {}, optional={"role": json_values, "content": json_values, "tool_calls": json_values}
        )
        | json_values,
        "delta": st.fixed_dictionaries({}, optional={"content": json_values}) | json_values,
        "finish_reason": st.sampled_from(["stop", "length", "tool_calls", ""]) | json_values,
    },
)
answer = st.fixed_dictionaries(
    {},
    optional={
        "id": json_values,
        "object": st.sampled_from(["chat.completion", "chat.completion.chunk"]) | json_values,
        "model": st.sampled_from(["up", "m", ""]) | json_values,
        "choices": st.lists(choice, max_size=2) | json_values,
        "usage": usage | json_values,
        "timings": st.fixed_dictionaries({}, optional={"prompt_n": counts, "predicted_n": counts}),
        # Anthropic's Messages and Ollama's answers, for the upstreams of those kinds
        "type": st.sampled_from(["message", "error", "message_start", "content_block_delta"])
        | json_values,
        "content": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "type": st.sampled_from(["text", "tool_use", "thinking"]) | json_values,
                    "text": json_values,
                    "input": json_values,
                    "name": json_values,
                },
            )
            | json_values,
            max_size=2,
        )
        | json_values,
        "stop_reason": st.sampled_from(["end_turn", "max_tokens", "tool_use"]) | json_values,
        "message": st.fixed_dictionaries(
            {}, optional={"role": json_values, "content": json_values, "tool_calls": json_values}
        )
        | json_values,
        "done": json_values,
        "done_reason": json_values,
        "prompt_eval_count": counts,
        "eval_count": counts,
        # what discovery reads: llama.cpp's /props, the windows in /v1/models
        "n_ctx": counts,
        "total_slots": counts,
        "default_generation_settings": st.fixed_dictionaries({}, optional={"n_ctx": counts}),
        "data": st.lists(
            st.fixed_dictionaries(
                {"id": st.sampled_from(["up", "other"])},
                optional={"max_model_len": counts, "context_length": counts},
            ),
            max_size=2,
        ),
        "error": st.fixed_dictionaries(
            {},
            optional={
                "message": json_values,
                "type": st.sampled_from(["exceed_context_size_error", "x"]) | json_values,
                "code": st.sampled_from(["context_length_exceeded"]) | json_values,
                "n_ctx": counts,
                "n_prompt_tokens": counts,
            },
        )
        | json_values,
    },
)
payload = answer.map(orjson.dumps) | json_values.map(orjson.dumps) | st.binary(max_size=40)
stream = st.lists(payload, max_size=4).map(
    lambda events: (
        b"".join(b"data: " + e.replace(b"\n", b" ") + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    )
)
header_values = st.sampled_from(
    ["inf", "nan", "-5", "1e999", "0", "2", "Fri, 31 Dec 9999 23:59:59 GMT", "http://[::1",
     "http://127.0.0.1:99999/x", "//h/x", "", "\t", "gzip", "br", "chunked"]
) | st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=20)  # fmt: skip
upstream_answers = st.tuples(
    st.sampled_from(
        [
            200,
            200,
            200,
            201,
            204,
            301,
            302,
            400,
            401,
            404,
            408,
            413,
            422,
            429,
            500,
            502,
            503,
            529,
            599,
        ]
    ),
    st.fixed_dictionaries(
        {},
        optional={
            "Retry-After": header_values,
            "Location": header_values,
            "Content-Type": st.sampled_from(
                ["application/json", "text/event-stream", "text/plain", "application/x-ndjson"]
            )
            | header_values,
        },
    ),
    payload | stream,
)


def upstream_of(kind: str, up: Scripted) -> dict[str, Any]:
    if kind == "ollama":
        return ollama_provider("p", up)
    if kind == "anthropic":
        return anthropic_provider("p", up)
    if kind == "llamacpp":  # discovery asks it /props, /v1/models and its metrics too
        return provider("p", up, kind="llamacpp", discovery=True)
    return provider("p", up)


@pytest.fixture(params=["vllm", "anthropic", "ollama", "llamacpp"])
def upstream(stack: Stack, request: pytest.FixtureRequest) -> Iterator[Scripted]:
    up = Scripted()
    stack.lt.run(up.start())
    # a circuit that never opens for long: every example reaches the upstream
    circuit = {"failure_threshold": 1_000_000, "timeout_threshold": 1_000_000,
               "cooldown_seconds": 0.001, "rate_limit_cooldown_seconds": 0.001,
               "max_cooldown_seconds": 0.001}  # fmt: skip
    stack.start_gateway(
        {
            "routing": {"circuit": circuit},
            "providers": [upstream_of(request.param, up)],
            "deployments": [deployment("m", "p", upstream_model="up", context_window=8192)],
        }
    )
    yield up
    stack.lt.run(up.stop())


@pytest.mark.parametrize("endpoint", sorted(REQUESTS))
def test_every_client_protocol_survives_any_upstream_answer(
    stack: Stack, upstream: Scripted, endpoint: str
) -> None:
    path = endpoint.split("#")[0]
    client = httpx.Client(base_url=stack.url, timeout=20)

    json = {"Content-Type": "application/json"}

    @given(said=upstream_answers)
    # answers that once ended in a 500, or reached the client as they were
    @example(said=(400, json, b'{"error": {}}'))  # no message: relayed as the client's error
    @example(said=(200, json, b'{"choices": true}'))  # a translation read choices[0] of it
    @example(said=(200, json, b"[1, 2]"))  # relayed as an answer
    @example(said=(302, {"Location": "http://[::1"}, b""))
    @example(said=(503, {"Retry-After": "inf"}, b""))
    @fuzzing(EXAMPLES)
    def one(said: tuple[int, dict[str, str], bytes]) -> None:
        upstream.answer = said
        resp = client.post(path, json=REQUESTS[endpoint])
        if resp.status_code < 400:
            if not REQUESTS[endpoint].get("stream", path == "/api/chat"):  # a whole answer
                assert isinstance(orjson.loads(resp.content), dict), (said, resp.content)
            return
        body = orjson.loads(resp.content) if resp.content else None
        assert clean_error(path, body), (said, resp.status_code, resp.content)
        err = body.get("error") if isinstance(body, dict) else None
        code = err.get("code") if isinstance(err, dict) else None
        assert resp.status_code != 500 and code != "internal_error", (said, resp.content)

    one()


@pytest.mark.parametrize("upstream", ["llamacpp"], indirect=True)
def test_discovery_survives_any_answer_to_its_probes(stack: Stack, upstream: Scripted) -> None:
    """The same answers to discovery's probes (`/props`, `/v1/models`, the metrics): every
    round ends, and a window it publishes is a positive number of tokens or none."""
    gw = stack.gateway
    assert gw is not None

    json = {"Content-Type": "application/json"}

    @given(said=upstream_answers)
    # fewer tokens than slots: each slot's share rounds down to nothing
    @example(said=(200, json, b'{"default_generation_settings": {"n_ctx": 3}, "total_slots": 8}'))
    @fuzzing(EXAMPLES, shrink=False)
    def one(said: tuple[int, dict[str, str], bytes]) -> None:
        upstream.answer = said
        before = gw.pipeline.discovery.refreshes
        stack.lt.loop.call_soon_threadsafe(gw.pipeline.discovery.request_refresh, "p")
        wait_until(lambda: gw.pipeline.discovery.refreshes > before, 10, "a discovery round")
        resp = httpx.get(stack.url + "/v1/fleet/windows", timeout=5)
        assert resp.status_code == 200, resp.text
        for window in resp.json()["data"]:
            assert window["tokens"] is None or window["tokens"] > 0, (said, window)

    one()
