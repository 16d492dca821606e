"""Capability-aware routing: needs vs supported parameters, the effective pool, 429s in the pool."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from fleetgate.ingress.needs import derive_needs
from fleetgate.testing import Fault
from tests.harness import Stack, deployment, provider, wait_until

MSG = [{"role": "user", "content": "hello"}]
NO_STRICT = ["tools", "tool_choice", "response_format", "max_tokens", "temperature"]
STRICT_SCHEMA = {
    "type": "json_schema",
    "json_schema": {"name": "answer", "strict": True, "schema": {"type": "object"}},
}


def record(stack: Stack, request_id: str) -> dict[str, Any]:
    url = f"{stack.url}/v1/requests/{request_id}"
    wait_until(lambda: httpx.get(url).status_code == 200, 5, "record flushed")
    return httpx.get(url).json()


def four_hosts(stack: Stack) -> list[Any]:
    """p1..p4 serve `m`; only p3 supports strict structured outputs; the model allows all 4."""
    engines = [stack.engine(f"e{i}") for i in range(1, 5)]
    stack.start_gateway(
        {
            "providers": [provider(f"p{i}", e) for i, e in enumerate(engines, 1)],
            "deployments": [
                deployment(
                    "m",
                    f"p{i}",
                    priority=i,
                    quantization="fp8" if i == 3 else "bf16",
                    **({} if i == 3 else {"supported_parameters": NO_STRICT}),
                )
                for i in range(1, 5)
            ],
            "models": [{"id": "m", "provider": {"only": ["p1", "p2", "p3", "p4"]}}],
        }
    )
    return engines


def test_strict_schema_routes_to_the_one_capable_host_then_429_is_all_routes_rate_limited(
    stack: Stack, client_for
):
    e1, e2, e3, e4 = four_hosts(stack)
    client = client_for(stack)
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=MSG, response_format=STRICT_SCHEMA
    )
    assert raw.headers["x-fleetgate-route"] == "p3"
    assert raw.headers["x-fleetgate-provider"] == "p3"
    assert raw.headers["x-fleetgate-effective-pool"] == "1/4"
    assert [len(e.requests) for e in (e1, e2, e3, e4)] == [0, 0, 1, 0]
    rec = record(stack, raw.headers["x-request-id"])
    assert rec["notes"]["effective_pool"] == {
        "eligible": 1,
        "pool": 4,
        "needs": ["response_format", "structured_outputs"],
    }
    assert {d["deployment"]: d["reason"] for d in rec["dropped"]}["p1"] == (
        "lacks structured_outputs"
    )
    attempt = rec["attempts"][0]
    assert (attempt["deployment_id"], attempt["provider_id"], attempt["quantization"]) == (
        "p3",
        "p3",
        "fp8",
    )
    assert attempt["preferences"]["only"] == ["p1", "p2", "p3", "p4"]

    # the one capable host rate limits: a clear 429 with a retry time, no hang, no fallback
    # to a host that would silently ignore the schema
    e3.fail_next(Fault("status", status=429, retry_after=30))
    with pytest.raises(openai.RateLimitError) as err:
        client.chat.completions.create(model="m", messages=MSG, response_format=STRICT_SCHEMA)
    assert err.value.body["code"] == "all_routes_rate_limited"
    assert 1 <= int(err.value.response.headers["retry-after"]) <= 30
    assert err.value.response.headers["x-fleetgate-effective-pool"] == "1/4"
    assert [len(e.requests) for e in (e1, e2, e3, e4)] == [0, 0, 2, 0]

    # while it cools down, the next such request is told the same at once (not no_route)
    with pytest.raises(openai.RateLimitError) as err:
        client.chat.completions.create(model="m", messages=MSG, response_format=STRICT_SCHEMA)
    assert err.value.body["code"] == "all_routes_rate_limited"
    assert "retry in" in err.value.body["message"]
    assert 1 <= int(err.value.response.headers["retry-after"]) <= 30
    assert len(e3.requests) == 2

    # a plain request still has the other three hosts
    raw = client.chat.completions.with_raw_response.create(model="m", messages=MSG)
    assert raw.headers["x-fleetgate-route"] == "p1"
    assert "x-fleetgate-effective-pool" not in raw.headers


def test_429_moves_to_the_next_eligible_host_and_cools_the_first_down(stack: Stack, client_for):
    a, b = stack.engine("a"), stack.engine("b")
    stack.start_gateway(
        {
            "providers": [provider("pa", a), provider("pb", b)],
            "deployments": [deployment("m", "pa"), deployment("m", "pb", priority=1)],
        }
    )
    a.fail_next(Fault("status", status=429, retry_after=30))
    client = client_for(stack)
    raw = client.chat.completions.with_raw_response.create(model="m", messages=MSG)
    assert raw.headers["x-fleetgate-route"] == "pb"
    assert raw.headers["x-fleetgate-attempts"] == "2"
    raw = client.chat.completions.with_raw_response.create(model="m", messages=MSG)
    assert raw.headers["x-fleetgate-route"] == "pb"
    assert len(a.requests) == 1  # cooling down: not asked again


def test_every_host_cooling_down_answers_429_with_the_soonest_retry(stack: Stack, client_for):
    a, b = stack.engine("a"), stack.engine("b")
    stack.start_gateway(
        {
            "providers": [provider("pa", a), provider("pb", b)],
            "deployments": [deployment("m", "pa"), deployment("m", "pb")],
        }
    )
    a.fail_next(Fault("status", status=429, retry_after=100))
    b.fail_next(Fault("status", status=429, retry_after=20))
    client = client_for(stack)
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="m", messages=MSG)
    with pytest.raises(openai.RateLimitError) as err:
        client.chat.completions.create(model="m", messages=MSG)
    assert err.value.body["code"] == "all_routes_rate_limited"
    assert 15 <= int(err.value.response.headers["retry-after"]) <= 20
    assert len(a.requests) == len(b.requests) == 1


def test_open_circuit_is_still_no_route(stack: Stack, client_for):
    a = stack.engine("a")
    stack.start_gateway(
        {
            "providers": [provider("pa", a)],
            "deployments": [deployment("m", "pa")],
            "routing": {"circuit": {"failure_threshold": 1}},
        }
    )
    a.fail_next(Fault("status", status=500))
    client = client_for(stack)
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=MSG)
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(model="m", messages=MSG)
    assert err.value.status_code == 503
    assert err.value.body["code"] == "no_route"


def test_a_need_no_host_supports_is_a_400_naming_it(stack: Stack, client_for):
    a, b = stack.engine("a"), stack.engine("b")
    stack.start_gateway(
        {
            "providers": [provider("pa", a), provider("pb", b)],
            "deployments": [
                deployment("m", "pa", supported_parameters=["max_tokens"]),
                deployment("m", "pb", supported_parameters=["max_tokens"]),
            ],
        }
    )
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    with pytest.raises(openai.BadRequestError) as err:
        client_for(stack).chat.completions.create(model="m", messages=MSG, tools=tools)
    assert err.value.body["code"] == "unsupported_parameters"
    assert "tools" in err.value.body["message"]
    assert err.value.response.headers["x-fleetgate-effective-pool"] == "0/2"
    assert not a.requests and not b.requests


def test_image_input_goes_to_the_deployment_declaring_the_modality(stack: Stack, client_for):
    a, b = stack.engine("a"), stack.engine("b")
    stack.start_gateway(
        {
            "providers": [provider("pa", a), provider("pb", b)],
            "deployments": [
                deployment("m", "pa"),
                deployment("m", "pb", priority=1, modalities=["text", "image"]),
            ],
        }
    )
    content = [
        {"type": "text", "text": "what is it"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
    ]
    raw = client_for(stack).chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": content}]
    )
    assert raw.headers["x-fleetgate-route"] == "pb"
    assert raw.headers["x-fleetgate-effective-pool"] == "1/2"


def test_unsupported_sampling_knob_is_dropped_for_that_host_and_recorded(stack: Stack, client_for):
    a = stack.engine("a")
    stack.start_gateway(
        {
            "providers": [provider("pa", a)],
            "deployments": [
                deployment("m", "pa", supported_parameters=["temperature", "max_tokens"])
            ],
        }
    )
    client = client_for(stack)
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=MSG, seed=7, temperature=0.5, top_p=0.9
    )
    sent = a.requests[-1].body
    assert "seed" not in sent and "top_p" not in sent
    assert sent["temperature"] == 0.5
    rec = record(stack, raw.headers["x-request-id"])
    assert rec["attempts"][0]["dropped_params"] == ["seed", "top_p"]

    # with require_parameters, the same request has no host
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model="m", messages=MSG, seed=7, extra_body={"provider": {"require_parameters": True}}
        )
    assert err.value.body["code"] == "unsupported_parameters"
    assert "seed" in err.value.body["message"]
    assert len(a.requests) == 1


def test_knobs_pass_through_when_only_the_kinds_default_list_applies(stack: Stack, client_for):
    a = stack.engine("a")
    stack.start_gateway({"providers": [provider("pa", a)], "deployments": [deployment("m", "pa")]})
    client = client_for(stack)
    # `top_a` is not in vllm's default list, but the list is a guess: the knob is kept
    client.chat.completions.create(model="m", messages=MSG, extra_body={"top_a": 0.1})
    assert a.requests[-1].body["top_a"] == 0.1
    # ...unless the request asks for every parameter to be honoured
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model="m",
            messages=MSG,
            extra_body={"top_a": 0.1, "provider": {"require_parameters": True}},
        )
    assert "lacks: top_a" in err.value.body["message"]


def test_needs_derived_from_the_body():
    assert derive_needs({"messages": MSG}) == frozenset()
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert derive_needs({"tools": tools, "tool_choice": "none"}) == {"tools", "tool_choice"}
    assert derive_needs({"tools": tools, "tool_choice": "auto"}) == {"tools"}
    assert derive_needs({"tools": []}) == frozenset()
    assert derive_needs({"max_tokens": 5, "max_completion_tokens": 5}) == frozenset()
    assert derive_needs({"response_format": {"type": "json_object"}}) == {"response_format"}
    loose = {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}
    assert derive_needs({"response_format": loose}) == {"response_format"}
    assert derive_needs({"response_format": STRICT_SCHEMA}) == {
        "response_format",
        "structured_outputs",
    }
    assert derive_needs({"logprobs": True, "top_logprobs": 2}) == {"logprobs", "top_logprobs"}
    assert derive_needs({"logprobs": False}) == frozenset()
    assert derive_needs({"seed": 1, "stop": ["x"], "reasoning_effort": "low"}) == {
        "seed",
        "stop",
        "reasoning",
    }
    assert derive_needs({"stop": []}) == frozenset()
    audio = {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
    assert derive_needs({"messages": [{"role": "user", "content": [audio]}]}) == {"audio_input"}


def test_a_virtual_models_chain_is_filtered_by_capability_and_keeps_its_order(
    stack: Stack, client_for
):
    a, b, c = stack.engine("a"), stack.engine("b"), stack.engine("c")
    stack.start_gateway(
        {
            "providers": [provider("pa", a), provider("pb", b), provider("pc", c)],
            "deployments": [
                deployment("m", "pa", supported_parameters=NO_STRICT),
                deployment("m", "pb", price={"input": 9}),
                deployment("m", "pc", price={"input": 1}),
            ],
            "virtual_models": [
                {"name": "v", "routes": [{"deployment": d} for d in ("pa", "pb", "pc")]}
            ],
        }
    )
    client = client_for(stack)
    raw = client.chat.completions.with_raw_response.create(
        model="v",
        messages=MSG,
        response_format=STRICT_SCHEMA,
        extra_body={"provider": {"sort": "price"}},
    )
    assert raw.headers["x-fleetgate-route"] == "pb"  # declared order wins over sort
    assert "x-fleetgate-effective-pool" not in raw.headers  # 2 of 3 remain
    raw = client.chat.completions.with_raw_response.create(
        model="v",
        messages=MSG,
        response_format=STRICT_SCHEMA,
        extra_body={"provider": {"ignore": ["pc"]}},
    )
    assert raw.headers["x-fleetgate-route"] == "pb"
    assert raw.headers["x-fleetgate-effective-pool"] == "1/2"
    assert not a.requests


ONE_OF_FOUR = (
    "only 1 of 4 allowed deployments supports response_format json_schema (strict) — p3 — and it is"
)


def test_a_429_in_a_pool_narrowed_by_capability_says_why(stack: Stack, client_for):
    e1, e2, e3, e4 = four_hosts(stack)
    client = client_for(stack)
    # the one capable host answers 429: the exhausted chain says the pool was one host
    e3.fail_next(Fault("status", status=429, retry_after=30))
    with pytest.raises(openai.RateLimitError) as err:
        client.chat.completions.create(model="m", messages=MSG, response_format=STRICT_SCHEMA)
    message = err.value.body["message"]
    assert f"{ONE_OF_FOUR} rate limited; retry in " in message, message
    wait = int(err.value.response.headers["retry-after"])
    assert f"retry in {wait}s" in message
    # while it cools down, the request is refused before anything is sent, saying the same
    with pytest.raises(openai.RateLimitError) as err:
        client.chat.completions.create(model="m", messages=MSG, response_format=STRICT_SCHEMA)
    message = err.value.body["message"]
    assert f"{ONE_OF_FOUR} rate limited; retry in " in message, message
    assert f"retry in {err.value.response.headers['retry-after']}s" in message
    assert [len(e.requests) for e in (e1, e2, e3, e4)] == [0, 0, 1, 0]
    # a request the whole pool can serve is not told about a narrowing it did not have
    e1.fail_next(Fault("status", status=429, retry_after=30))
    e2.fail_next(Fault("status", status=429, retry_after=30))
    e4.fail_next(Fault("status", status=429, retry_after=30))
    with pytest.raises(openai.RateLimitError) as err:
        client.chat.completions.create(model="m", messages=MSG)
    assert "Every eligible deployment of 'm'" in err.value.body["message"]
    assert "allowed deployments" not in err.value.body["message"]


def test_no_route_in_a_pool_narrowed_by_capability_says_why(stack: Stack, client_for):
    engines = [stack.engine(f"e{i}") for i in range(1, 6)]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}
    stack.start_gateway(
        {
            "providers": [provider(f"p{i}", e) for i, e in enumerate(engines, 1)],
            "deployments": [
                deployment("m", "p1", supported_parameters=["max_tokens"]),  # no tools
                deployment("m", "p2", modalities=["text", "image"]),
                deployment("m", "p3", modalities=["text", "image"]),
                deployment("m", "p4"),  # no image input
                deployment("m", "p5"),  # outside the allowlist: not counted
            ],
            "models": [{"id": "m", "provider": {"ignore": ["p5"]}}],
            "routing": {"circuit": {"failure_threshold": 1}},
        }
    )
    client = client_for(stack)
    body: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "what"}, image]}],
        "tools": tools,
    }
    for engine in engines[1:3]:
        engine.fail_next(Fault("status", status=500))
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(**body)
    assert [len(e.requests) for e in engines] == [0, 1, 1, 0, 0]
    # both capable hosts have an open circuit: no_route, naming the two and the needs
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(**body)
    assert (err.value.status_code, err.value.body["code"]) == (503, "no_route")
    message = err.value.body["message"]
    assert (
        "only 2 of 4 allowed deployments support image input and tools — p2, p3 — "
        "and both are unavailable"
    ) in message, message
    assert "p2: circuit open" in message and "p1: lacks image_input, tools" in message
    # a plain request still reaches the hosts the narrowing had set aside
    raw = client.chat.completions.with_raw_response.create(model="m", messages=MSG)
    # (p1 and p4 are tied for it: prompt-cache affinity picks one, docs/balancing.md)
    assert raw.headers["x-fleetgate-route"] in {"p1", "p4"}


def test_a_virtual_model_whose_routes_are_narrowed_by_capability_says_why(stack: Stack, client_for):
    engines = [stack.engine(f"e{i}") for i in range(1, 5)]
    stack.start_gateway(
        {
            "providers": [provider(f"p{i}", e) for i, e in enumerate(engines, 1)],
            "deployments": [
                deployment("m", "p1", supported_parameters=["max_tokens"]),  # no tools
                deployment("m", "p2"),
                deployment("m", "p3"),
                deployment("m", "p4", supported_parameters=["max_tokens"]),
            ],
            "virtual_models": [
                {"name": "v", "routes": [{"deployment": d} for d in ("p1", "p2", "p3", "p4")]}
            ],
            "routing": {"circuit": {"failure_threshold": 1}},
        }
    )
    client = client_for(stack)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    for engine in engines[1:3]:
        engine.fail_next(Fault("status", status=500))
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="v", messages=MSG, tools=tools)
    assert [len(e.requests) for e in engines] == [0, 1, 1, 0]
    # both routes that take tools have an open circuit: the error names the narrowing
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(model="v", messages=MSG, tools=tools)
    assert err.value.body["code"] == "virtual_model_unavailable"
    message = err.value.body["message"]
    assert (
        "only 2 of 4 allowed deployments support tools — p2, p3 — and both are unavailable"
    ) in message, message
    assert "p1: lacks tools" in message and "continue_on_default" in message
    assert err.value.response.headers["x-fleetgate-virtual-model"] == "v"
    # without the narrowing (a plain request), the hosts it had set aside serve
    raw = client.chat.completions.with_raw_response.create(model="v", messages=MSG)
    assert raw.headers["x-fleetgate-route"] == "p1"
