"""Virtual models, tiers and `auto` through the real server, with fake upstreams."""

from __future__ import annotations

from typing import Any

import aiohttp
import openai
import orjson
import pytest

from fleetgate.testing import Fault
from tests.harness import Stack, deployment, provider, wait_until

HELLO = [{"role": "user", "content": "hello there"}]


def fleet(stack: Stack) -> dict[str, Any]:
    engines = {n: stack.engine(n) for n in "abcd"}
    return {
        "providers": [
            provider("pa", engines["a"]),
            provider("pb", engines["b"], api_key="sk-main", keys={"alt": "sk-alt"}),
            provider("pc", engines["c"]),
            provider("pd", engines["d"]),
            provider("pn", engines["d"], api_key="${FG_TEST_UNSET_KEY}"),
        ],
        "deployments": [
            deployment("alpha", "pa", upstream_model="up-a", context_window=8192),
            deployment("beta", "pb", upstream_model="up-b", context_window=32768),
            deployment("gamma", "pc", upstream_model="up-c", context_window=65536),
            deployment("delta", "pd", upstream_model="up-d", context_window=4096),
            deployment("nokey", "pn", upstream_model="up-n", context_window=4096),
        ],
        "tiers": {
            "simple": {"routes": [{"deployment": "pd"}]},
            "default": {
                "routes": [
                    {"deployment": "pc", "params": {"temperature": 0.7}},
                    {"deployment": "pd"},
                ]
            },
            "reasoning": {"routes": [{"deployment": "pc", "params": {"reasoning_effort": "high"}}]},
        },
        "virtual_models": [
            {
                "name": "Assistant",
                "continue_on_default": True,
                "routes": [
                    {
                        "deployment": "pa",
                        "params": {
                            "temperature": 0.1,
                            "max_tokens": 50,
                            "extra_body": {"top_k": 5},
                        },
                    },
                    {
                        "deployment": "pb",
                        "key_label": "alt",
                        "params": {"temperature": 0.3, "reasoning_effort": "low"},
                    },
                ],
            },
            {"name": "fast-only", "response_mode": "stream_only", "routes": [{"deployment": "pd"}]},
            {"name": "lonely", "routes": [{"deployment": "pn"}]},
            {
                "name": "lonely-default",
                "continue_on_default": True,
                "routes": [{"deployment": "pn"}],
            },
            {"name": "retired", "enabled": False, "routes": [{"deployment": "pa"}]},
        ],
        "auto": {},
    }


@pytest.fixture
def gw(stack: Stack) -> Stack:
    stack.start_gateway(fleet(stack))
    return stack


def record(stack: Stack, request_id: str) -> dict[str, Any]:
    async def fetch() -> dict[str, Any] | None:
        async with (
            aiohttp.ClientSession() as s,
            s.get(f"{stack.url}/v1/requests/{request_id}") as r,
        ):
            return await r.json() if r.status == 200 else None

    found: list[dict[str, Any]] = []
    wait_until(lambda: bool(found.append(stack.lt.run(fetch())) or found[-1]), 5, "record")
    return found[-1]


def post(stack: Stack, path: str, body: dict[str, Any], headers: dict[str, str] | None = None):
    async def go() -> tuple[int, dict[str, str], Any]:
        async with (
            aiohttp.ClientSession() as s,
            s.post(stack.url + path, data=orjson.dumps(body), headers=headers or {}) as r,
        ):
            return r.status, dict(r.headers), await r.json(content_type=None)

    return stack.lt.run(go())


def test_per_route_params_reach_the_upstream_and_the_name_does_not(gw: Stack, client_for) -> None:
    client = client_for(gw)
    a, b = gw.engines["a"], gw.engines["b"]
    resp = client.chat.completions.with_raw_response.create(
        model="assistant", messages=HELLO, max_tokens=200, temperature=1.0
    )
    assert resp.parse().model == "assistant"  # the name the client sent, in its spelling
    sent = a.requests[-1].body
    assert sent["model"] == "up-a"
    assert (sent["temperature"], sent["max_tokens"], sent["top_k"]) == (0.1, 50, 5)
    assert resp.headers["x-fleetgate-reason"] == "virtual-model"
    assert resp.headers["x-fleetgate-virtual-model"] == "Assistant"
    assert resp.headers["x-fleetgate-fallback-count"] == "0"
    assert "x-fleetgate-tier" not in resp.headers

    a.fail_next(Fault("status", 503))
    resp = client.chat.completions.with_raw_response.create(
        model="Assistant", messages=HELLO, max_tokens=200, temperature=1.0
    )
    assert resp.parse().model == "Assistant"
    assert resp.headers["x-fleetgate-route"] == "pb"
    assert resp.headers["x-fleetgate-fallback-count"] == "1"
    assert a.requests[-1].body["temperature"] == 0.1  # the failed hop sent its own params
    sent = b.requests[-1].body
    assert sent["model"] == "up-b"
    assert (sent["temperature"], sent["reasoning_effort"], sent["max_tokens"]) == (0.3, "low", 200)
    assert "top_k" not in sent
    assert b.requests[-1].headers["Authorization"] == "Bearer sk-alt"

    rec = record(gw, resp.headers["x-request-id"])
    assert rec["resolution"] == "virtual-model"
    first, second = rec["attempts"]
    assert (first["scope"], first["virtual_model"], first["tier"]) == (
        "virtual:Assistant",
        "Assistant",
        None,
    )
    assert first["params"] == {"temperature": 0.1, "max_tokens": 50, "extra_body": {"top_k": 5}}
    assert (second["key_label"], second["params"]) == (
        "alt",
        {"temperature": 0.3, "reasoning_effort": "low"},
    )
    for engine in gw.engines.values():
        for req in engine.requests:
            assert b"assistant" not in orjson.dumps(req.body).lower()


def test_streaming_falls_back_into_the_default_part(gw: Stack, client_for) -> None:
    client = client_for(gw)
    gw.engines["a"].fail_next(Fault("status", 503))
    gw.engines["b"].fail_next(Fault("break_stream", after_chunks=0))
    with client.chat.completions.with_streaming_response.create(
        model="Assistant", messages=HELLO, stream=True
    ) as resp:
        assert resp.headers["x-fleetgate-route"] == "pc"
        assert resp.headers["x-fleetgate-fallback-count"] == "2"
        assert resp.headers["x-fleetgate-tier"] == "default"
        assert resp.headers["x-fleetgate-virtual-model"] == "Assistant"
        chunks = list(resp.parse())
    assert chunks and all(c.model == "Assistant" for c in chunks)
    sent = gw.engines["c"].requests[-1].body
    assert (sent["model"], sent["temperature"], sent["stream"]) == ("up-c", 0.7, True)
    rec = record(gw, resp.headers["x-request-id"])
    assert [(a["scope"], a["tier"]) for a in rec["attempts"]] == [
        ("virtual:Assistant", None),
        ("virtual:Assistant", None),
        ("tier:default", "default"),
    ]


def test_an_exhausted_chain_says_so(gw: Stack, client_for) -> None:
    for name in "abcd":
        gw.engines[name].fail_next(Fault("status", 503))
    with pytest.raises(openai.APIStatusError) as err:
        client_for(gw).chat.completions.create(model="Assistant", messages=HELLO)
    headers = err.value.response.headers
    assert err.value.status_code == 502
    assert headers["x-fleetgate-fallback-exhausted"] == "true"
    assert headers["x-fleetgate-fallback-count"] == "3"
    assert headers["x-fleetgate-virtual-model"] == "Assistant"
    assert [len(gw.engines[n].requests) for n in "abcd"] == [1, 1, 1, 1]


def test_an_empty_chain_never_falls_through(gw: Stack, client_for) -> None:
    client = client_for(gw)
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(model="lonely", messages=HELLO)
    assert err.value.status_code == 503
    body = err.value.body
    assert body["code"] == "virtual_model_unavailable"
    assert "continue_on_default: true" in body["message"]
    assert "pn: no credentials (FG_TEST_UNSET_KEY is not set)" in body["message"]
    # continue_on_default: the default tier carries the request
    resp = client.chat.completions.with_raw_response.create(model="lonely-default", messages=HELLO)
    assert resp.headers["x-fleetgate-route"] == "pc"
    assert resp.headers["x-fleetgate-tier"] == "default"
    assert all(len(e.requests) == (1 if n == "c" else 0) for n, e in gw.engines.items())


def test_response_mode(gw: Stack, client_for) -> None:
    client = client_for(gw)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="fast-only", messages=HELLO)
    assert err.value.body["param"] == "stream"
    chunks = list(client.chat.completions.create(model="fast-only", messages=HELLO, stream=True))
    assert chunks and chunks[0].model == "fast-only"
    assert gw.engines["d"].requests[-1].body["model"] == "up-d"


def test_models_lists_enabled_virtuals_with_their_largest_window(gw: Stack, client_for) -> None:
    models = {m.id: m for m in client_for(gw).models.list().data}
    assert models["Assistant"].context_length == 32768  # type: ignore[attr-defined]
    assert models["fast-only"].context_length == 4096  # type: ignore[attr-defined]
    assert "retired" not in models
    assert "alpha" in models


def test_header_tier_and_auto_over_http(gw: Stack, client_for) -> None:
    client = client_for(gw)
    resp = client.chat.completions.with_raw_response.create(
        model="alpha", messages=HELLO, extra_headers={"X-Fleetgate-Tier": "reasoning"}
    )
    assert resp.parse().model == "alpha"
    assert resp.headers["x-fleetgate-reason"] == "header-tier"
    assert resp.headers["x-fleetgate-tier"] == "reasoning"
    assert gw.engines["c"].requests[-1].body["reasoning_effort"] == "high"
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model="alpha", messages=HELLO, extra_headers={"X-Fleetgate-Tier": "turbo"}
        )
    assert err.value.body["code"] == "tier_not_found"

    conv = {"X-Fleetgate-Conversation": "c-42"}
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    resp = client.chat.completions.with_raw_response.create(
        model="auto", messages=HELLO, tools=tools, extra_headers=conv
    )
    assert resp.headers["x-fleetgate-reason"] == "auto"
    assert resp.headers["x-fleetgate-tier"] == "default"
    assert resp.parse().model == "auto"
    assert gw.engines["c"].requests[-1].body["model"] == "up-c"
    # the follow-up is small but stays on the conversation's tier
    resp = client.chat.completions.with_raw_response.create(
        model="auto", messages=HELLO, extra_headers=conv
    )
    assert resp.headers["x-fleetgate-tier"] == "default"
    resp = client.chat.completions.with_raw_response.create(model="auto", messages=HELLO)
    assert resp.headers["x-fleetgate-tier"] == "simple"
    # a heartbeat with a tier header goes straight to simple
    resp = client.chat.completions.with_raw_response.create(
        model="auto",
        messages=[{"role": "user", "content": "ping"}],
        max_tokens=1,
        extra_headers={"X-Fleetgate-Tier": "reasoning", **conv},
    )
    assert resp.headers["x-fleetgate-tier"] == "simple"
    assert resp.headers["x-fleetgate-route"] == "pd"


def test_explain_shows_the_resolution(gw: Stack) -> None:
    status, _, plan = post(gw, "/v1/routing/explain", {"model": "assistant", "messages": HELLO})
    assert status == 200
    assert plan["resolution"] == "virtual-model"
    assert [(c["deployment"], c["scope"]) for c in plan["candidates"]] == [
        ("pa", "virtual:Assistant"),
        ("pb", "virtual:Assistant"),
        ("pc", "tier:default"),
        ("pd", "tier:default"),
    ]
    assert plan["candidates"][1]["key_label"] == "alt"
    assert plan["notes"]["resolution"]["continue_on_default"] is True
    # no header tier unless the request to explain carries one
    _, _, plan = post(gw, "/v1/routing/explain", {"model": "alpha", "messages": HELLO})
    assert plan["resolution"] == "explicit"
    _, _, plan = post(
        gw,
        "/v1/routing/explain",
        {"model": "alpha", "messages": HELLO},
        {"X-Fleetgate-Tier": "simple"},
    )
    assert plan["resolution"] == "header-tier"
    assert [c["deployment"] for c in plan["candidates"]] == ["pd"]
    # explaining an auto request does not make a conversation sticky
    conv = {"X-Fleetgate-Conversation": "c-explain"}
    _, _, plan = post(
        gw,
        "/v1/routing/explain",
        {"model": "auto", "messages": HELLO, "reasoning_effort": "high"},
        conv,
    )
    assert plan["notes"]["resolution"]["score"] == 4
    assert plan["headers"]["X-Fleetgate-Tier"] == "reasoning"
    _, _, plan = post(gw, "/v1/routing/explain", {"model": "auto", "messages": HELLO}, conv)
    assert plan["headers"]["X-Fleetgate-Tier"] == "simple"
    _, _, plan = post(gw, "/v1/routing/explain", {"model": "lonely", "messages": HELLO})
    assert plan["error"]["code"] == "virtual_model_unavailable"
    assert gw.engines["a"].requests == []


def test_a_deployments_own_params_apply_in_every_scope(stack: Stack, client_for) -> None:
    c, d = stack.engine("c"), stack.engine("d")
    own = {"temperature": 0.4, "extra_body": {"dep_c_flag": True, "top_k": 3}}
    stack.start_gateway(
        {
            "providers": [provider("pc", c), provider("pd", d)],
            "deployments": [
                deployment("m-gamma", "pc", id="dep-c", upstream_model="up-c", params=own),
                deployment("m-delta", "pd", id="dep-d"),
            ],
            "tiers": {
                "default": {
                    "routes": [{"deployment": "dep-c", "params": {"extra_body": {"top_k": 9}}}]
                }
            },
            "virtual_models": [
                {"name": "vm", "routes": [{"deployment": "dep-c", "params": {"temperature": 0.9}}]}
            ],
        }
    )
    client = client_for(stack)
    tier = {"X-Fleetgate-Tier": "default"}
    sent: dict[str, dict[str, Any]] = {}
    for name, model, headers in [
        ("explicit", "m-gamma", None),
        ("deployment-id", "dep-c", None),
        ("virtual", "vm", None),
        ("tier", "m-delta", tier),
    ]:
        resp = client.chat.completions.with_raw_response.create(
            model=model, messages=HELLO, temperature=1.0, extra_headers=headers
        )
        assert resp.headers["x-fleetgate-route"] == "dep-c"
        sent[name] = c.requests[-1].body
        assert sent[name]["model"] == "up-c"
        assert sent[name]["dep_c_flag"] is True, name  # the deployment's own, in every scope
    assert [sent[n]["temperature"] for n in sent] == [0.4, 0.4, 0.9, 0.4]
    assert [sent[n]["top_k"] for n in sent] == [3, 3, 3, 9]  # extra_body merges key by key
    assert d.requests == []

    for model in ("m-gamma", "dep-c"):
        status, _, plan = post(stack, "/v1/routing/explain", {"model": model, "messages": HELLO})
        assert status == 200
        (candidate,) = plan["candidates"]
        assert (candidate["scope"], candidate["params"]) == ("deployment", own)
    resp = client.chat.completions.with_raw_response.create(model="m-gamma", messages=HELLO)
    (attempt,) = record(stack, resp.headers["x-request-id"])["attempts"]
    assert (attempt["scope"], attempt["params"]) == ("deployment", own)


def test_models_lists_a_shadowed_name_once_as_the_virtual(stack: Stack, client_for) -> None:
    a, b, c = stack.engine("a"), stack.engine("b"), stack.engine("c")
    stack.start_gateway(
        {
            "providers": [provider("pa", a), provider("pb", b), provider("pc", c)],
            "deployments": [
                deployment("m-beta", "pa", context_window=131072),
                deployment("m-small", "pb", context_window=16384),
                deployment("m-mid", "pc", context_window=65536),
            ],
            "virtual_models": [
                {
                    "name": "M-Beta",
                    "allow_shadowing": True,
                    "routes": [{"deployment": "pb"}, {"model": "m-mid"}],
                }
            ],
        }
    )
    client = client_for(stack)
    listed = client.models.list().data
    ids = [m.id for m in listed]
    assert sorted(i.lower() for i in ids) == ["m-beta", "m-mid", "m-small"]  # each name once
    (entry,) = [m for m in listed if m.id.lower() == "m-beta"]
    assert entry.id == "M-Beta"
    assert entry.context_length == 65536  # type: ignore[attr-defined]  # its routes' largest
    # the name reaches the virtual model, which is what the catalog says it is
    resp = client.chat.completions.with_raw_response.create(model="m-beta", messages=HELLO)
    assert resp.headers["x-fleetgate-virtual-model"] == "M-Beta"
    assert resp.headers["x-fleetgate-route"] == "pb"
    assert a.requests == []


def test_an_unavailable_virtual_model_says_how_it_was_routed(stack: Stack, client_for) -> None:
    a = stack.engine("a")
    stack.start_gateway(
        {
            "providers": [provider("pa", a)],
            "deployments": [deployment("alpha", "pa")],
            "virtual_models": [{"name": "Solo", "routes": [{"deployment": "pa"}]}],
        }
    )
    client = client_for(stack)
    a.fail_next(Fault("status", 429, retry_after=60))
    with pytest.raises(openai.RateLimitError) as exhausted:
        client.chat.completions.create(model="solo", messages=HELLO)
    assert exhausted.value.response.headers["x-fleetgate-fallback-exhausted"] == "true"
    # the only route now cools down: the chain is empty before anything is sent
    with pytest.raises(openai.APIStatusError) as empty:
        client.chat.completions.create(model="solo", messages=HELLO)
    assert (empty.value.status_code, empty.value.body["code"]) == (503, "virtual_model_unavailable")
    for err in (exhausted.value, empty.value):
        assert err.response.headers["x-fleetgate-reason"] == "virtual-model"
        assert err.response.headers["x-fleetgate-virtual-model"] == "Solo"
    assert len(a.requests) == 1
