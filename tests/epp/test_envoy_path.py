"""Through the real Envoy, started with `fleetgate envoy-config`'s output, with fleetgate as
its endpoint picker: the official SDKs see the proxy's routing and refusals, while Envoy
carries every byte."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from fleetgate.epp.protocol import BODY_MODES
from fleetgate.testing.fake_engine import Fault
from tests.epp.stack import EppStack
from tests.harness import Stack, client_requests, deployment, provider, wait_until

LONG = "word " * 6000  # ~6000 tokens: more than the small window holds


def _tiers(stack: Stack) -> dict[str, Any]:
    small = stack.engine("small", context_window=4096)
    long = stack.engine("long", context_window=32768)
    return {
        "providers": [provider("small", small), provider("long", long)],
        "deployments": [
            deployment("m", "small", context_window=4096),
            deployment("m", "long", context_window=32768),
        ],
    }


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=20)


def _records(stack: Stack) -> list[Any]:
    assert stack.gateway is not None
    return list(stack.gateway.pipeline.recent._records.values())


@pytest.mark.parametrize("mode", BODY_MODES)
def test_long_prompt_lands_on_the_long_window_and_short_on_the_small(
    stack: Stack, epp: EppStack, mode: str
):
    envoy = epp.start(_tiers(stack), body_mode=mode)
    client = _client(envoy.url)
    short = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    long = client.chat.completions.create(model="m", messages=[{"role": "user", "content": LONG}])
    # the engines answered, not the gateway: their fingerprints say which one
    assert short.system_fingerprint == "fake-small"
    assert long.system_fingerprint == "fake-long"
    assert len(client_requests(stack.engines["small"])) == 1
    assert len(client_requests(stack.engines["long"])) == 1
    # the body reached the engine whole (full duplex: it went through the picker)
    assert client_requests(stack.engines["long"])[0].body["messages"][0]["content"] == LONG


@pytest.mark.parametrize("status", [503, 429])
def test_the_next_endpoint_serves_when_the_first_fails(stack: Stack, epp: EppStack, status: int):
    a, b = stack.engine("a"), stack.engine("b")
    config = {
        "providers": [provider("a", a), provider("b", b)],
        "deployments": [deployment("m", "a", priority=0), deployment("m", "b", priority=1)],
        "models": [{"id": "m", "provider": {"order": ["a", "b"]}}],
    }
    envoy = epp.start(config)
    a.fail_next(Fault("status", status=status))
    answer = _client(envoy.url).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hello"}]
    )
    assert answer.system_fingerprint == "fake-b"
    assert len(client_requests(a)) == 1 and len(client_requests(b)) == 1  # Envoy went on to b
    gateway = stack.gateway
    assert gateway is not None
    wait_until(lambda: gateway.pipeline.state.health("a").failures == 1, 5, "a's failure charged")
    assert gateway.pipeline.state.health("b").successes == 1
    wait_until(lambda: len(_records(stack)) == 1, 5, "the request recorded")
    record = _records(stack)[0]
    assert record.deployment_id == "b"
    assert [x.deployment_id for x in record.attempts] == ["a", "b"]


def test_the_next_endpoint_serves_when_the_first_refuses_connections(stack: Stack, epp: EppStack):
    a, b = stack.engine("a"), stack.engine("b")
    config = {
        "providers": [provider("a", a), provider("b", b)],
        "deployments": [deployment("m", "a"), deployment("m", "b")],
        "models": [{"id": "m", "provider": {"order": ["a", "b"]}}],
    }
    envoy = epp.start(config)
    stack.lt.run(a.stop())  # its port now refuses connections
    answer = _client(envoy.url).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hello"}]
    )
    assert answer.system_fingerprint == "fake-b"
    gateway = stack.gateway
    assert gateway is not None
    wait_until(lambda: gateway.pipeline.state.health("a").failures == 1, 5, "a's failure charged")


def test_unknown_model_is_a_404_in_the_openai_shape(stack: Stack, epp: EppStack):
    envoy = epp.start(_tiers(stack))
    with pytest.raises(openai.NotFoundError) as caught:
        _client(envoy.url).chat.completions.create(
            model="nope", messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.status_code == 404
    assert caught.value.code == "model_not_found"
    assert not client_requests(stack.engines["small"]) and not client_requests(
        stack.engines["long"]
    )


def test_unknown_model_is_a_404_in_the_anthropic_shape(stack: Stack, epp: EppStack):
    envoy = epp.start(_tiers(stack))
    client = anthropic.Anthropic(base_url=envoy.url, api_key="unused", max_retries=0)
    with pytest.raises(anthropic.NotFoundError) as caught:
        client.messages.create(
            model="nope", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.status_code == 404
    assert caught.value.body["type"] == "error"  # type: ignore[index]
    assert caught.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]


REFUSED = [
    # (path, body, headers): what the proxy refuses before any upstream call
    ("/v1/chat/completions", b'{"model": "m", "messages": [', {}),  # not JSON
    ("/v1/chat/completions", b'{"model": "m"}', {}),  # no messages
    ("/v1/chat/completions", b'{"model": "nope", "messages": []}', {}),  # unknown model
    ("/v1/messages", b'{"model": "nope", "max_tokens": 4, "messages": []}', {}),
    # more than the largest window, with the guard on: context_too_large
    (
        "/v1/chat/completions",
        orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "word " * 40000}]}),
        {},
    ),
    ("/v1/chat/completions", b'{"model": "m", "messages": []}', {"x-fleetgate-tier": "z"}),
]


@pytest.mark.parametrize("mode", BODY_MODES)
def test_refusals_match_the_proxy_s_status_code_and_shape(stack: Stack, epp: EppStack, mode: str):
    """The picker's refusals are the proxy's: same status, same body (request id aside)."""
    config = _tiers(stack)
    config["models"] = [{"id": "m", "context_guard": "reject"}]
    envoy = epp.start(config, body_mode=mode)
    for path, body, headers in REFUSED:
        sent = {"content-type": "application/json", **headers}
        picked = httpx.post(envoy.url + path, content=body, headers=sent)
        proxied = httpx.post(stack.url + path, content=body, headers=sent)
        assert picked.status_code == proxied.status_code, (path, body, picked.text)
        assert picked.status_code >= 400, (path, body)
        assert picked.json() == proxied.json(), (path, body)
        assert picked.headers.get("retry-after") == proxied.headers.get("retry-after")
    sent_on = [
        r for e in stack.engines.values() for r in client_requests(e) if r.path != "/tokenize"
    ]
    assert not sent_on  # refused by the picker: nothing reached an engine


def test_the_anthropic_sdk_through_envoy(stack: Stack, epp: EppStack):
    envoy = epp.start(_tiers(stack))
    client = anthropic.Anthropic(base_url=envoy.url, api_key="unused", max_retries=0)
    message = client.messages.create(
        model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
    )
    assert message.content[0].type == "text"
    assert client_requests(stack.engines["small"])[0].path == "/v1/messages"


@pytest.mark.parametrize("mode", BODY_MODES)
def test_the_upstream_model_name_is_written_into_the_body(stack: Stack, epp: EppStack, mode: str):
    a = stack.engine("a")
    config = {
        "providers": [provider("a", a)],
        "deployments": [deployment("m", "a", upstream_model="org/served-name-of-m")],
    }
    envoy = epp.start(config, body_mode=mode)
    answer = _client(envoy.url).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    assert answer.choices[0].message.content
    sent = client_requests(a)[0]
    assert sent.body["model"] == "org/served-name-of-m"
    if mode == "BUFFERED":  # the length Envoy sent is the rewritten body's
        assert int(sent.headers["Content-Length"]) == len(orjson.dumps(sent.body))
    else:  # a full-duplex body leaves Envoy chunked, whatever its length
        assert sent.headers["Transfer-Encoding"] == "chunked"
    # the client's credentials to the gateway are not the engine's business
    assert "Authorization" not in sent.headers


def _small_windows(doc: dict[str, Any]) -> None:
    """Envoy's HTTP/2 windows toward the picker at the protocol's smallest default (64 KiB):
    a large answer must wait for Envoy's window updates."""
    for cluster in doc["static_resources"]["clusters"]:
        if cluster["name"] == "fleetgate_epp":
            options = cluster["typed_extension_protocol_options"]
            h2 = next(iter(options.values()))["explicit_http_config"]["http2_protocol_options"]
            h2["initial_stream_window_size"] = 65535
            h2["initial_connection_window_size"] = 65535


@pytest.mark.parametrize("mode", BODY_MODES)
def test_a_large_body_crosses_the_picker_whole(stack: Stack, epp: EppStack, mode: str):
    """A 400 KB prompt goes to the picker in many frames and comes back rewritten, larger
    than Envoy's window: the engine gets every byte."""
    a = stack.engine("a", context_window=1_000_000)
    config = {
        "providers": [provider("a", a)],
        "deployments": [
            deployment("m", "a", upstream_model="org/served-name-of-m", context_window=1_000_000)
        ],
        "server": {"max_body_bytes": 4 * 1024 * 1024},
    }
    envoy = epp.start(config, body_mode=mode, edit=_small_windows)
    prompt = "".join(f"w{i} " for i in range(80_000))  # about 470 KB
    answer = _client(envoy.url).chat.completions.create(
        model="m", messages=[{"role": "user", "content": prompt}]
    )
    assert answer.choices[0].message.content
    sent = client_requests(a)[0]
    assert sent.body["model"] == "org/served-name-of-m"
    assert sent.body["messages"][0]["content"] == prompt


def test_a_stream_arrives_chunk_by_chunk_with_its_cadence(stack: Stack, epp: EppStack):
    a = stack.engine("a", tokens_per_second=20, reply_words=12)
    config = {"providers": [provider("a", a)], "deployments": [deployment("m", "a")]}
    envoy = epp.start(config)
    stream = _client(envoy.url).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    arrivals = []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.monotonic())
    assert len(arrivals) >= 10
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    # paced at 20 tokens a second: the chunks came on their own, not held back and bunched
    # (a busy machine may bunch a pair now and then)
    assert sorted(gaps)[len(gaps) // 2] > 0.03, gaps
    assert sum(gap > 0.02 for gap in gaps) >= 0.8 * len(gaps), gaps
    assert arrivals[-1] - arrivals[0] > 0.4
    gateway = stack.gateway
    assert gateway is not None
    wait_until(lambda: gateway.pipeline.state.health("a").ttft_ema is not None, 5, "TTFT learned")
    wait_until(lambda: len(_records(stack)) == 1, 5, "the stream recorded")
    record = _records(stack)[0]
    assert record.stream and record.status == 200 and record.deployment_id == "a"
    assert record.attempts[0].ttft is not None and record.attempts[0].ttft < record.latency


def test_killing_the_picker_fails_requests_closed_with_503(stack: Stack, epp: EppStack):
    """failure_mode_allow is false: with no picker, Envoy answers 503 at once, and never
    sends a request blind to an endpoint that may not serve its model."""
    envoy = epp.start(_tiers(stack))
    client = _client(envoy.url)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    epp.stop_picker()
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 503
    assert (
        len(client_requests(stack.engines["small"])) + len(client_requests(stack.engines["long"]))
        == 1
    )


def _subset_from_header(doc: dict[str, Any]) -> None:
    """A filter before the picker that turns `x-test-subset` into the subset hint, as a
    GIE data plane that narrows the candidates would set it."""
    hcm = doc["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    hint = {
        "name": "envoy.filters.http.header_to_metadata",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.header_to_metadata"
            ".v3.Config",
            "request_rules": [
                {
                    "header": "x-test-subset",
                    "on_header_present": {
                        "metadata_namespace": "envoy.lb.subset_hint",
                        "key": "x-gateway-destination-endpoint-subset",
                        "type": "STRING",
                    },
                }
            ],
        },
    }
    hcm["typed_config"]["http_filters"].insert(0, hint)


def test_the_subset_hint_narrows_the_pick(stack: Stack, epp: EppStack):
    engines = [stack.engine(n) for n in ("r1", "r2", "r3")]
    config = {
        "providers": [provider(e.name, e) for e in engines],
        "deployments": [deployment("m", e.name) for e in engines],
    }
    envoy = epp.start(config, edit=_subset_from_header)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    only = f"127.0.0.1:{engines[2].port}"
    for _ in range(3):
        resp = httpx.post(
            envoy.url + "/v1/chat/completions", json=body, headers={"x-test-subset": only}
        )
        assert resp.status_code == 200
        assert resp.json()["system_fingerprint"] == "fake-r3"
    outside = httpx.post(
        envoy.url + "/v1/chat/completions", json=body, headers={"x-test-subset": "10.9.9.9:80"}
    )
    assert outside.status_code == 503
    assert outside.json()["error"]["code"] == "no_route"
    assert len(client_requests(engines[0])) + len(client_requests(engines[1])) == 0


def test_a_worker_at_its_limit_is_a_429_with_retry_after(stack: Stack, epp: EppStack):
    """The picker holds no queue: a worker at its `concurrency_limit` takes nothing more,
    and with every candidate so, the client gets the proxy's `gateway_queue_full`."""
    slow = stack.engine("slow", latency=3.0)
    config = {
        "providers": [provider("slow", slow, concurrency_limit=1)],
        "deployments": [deployment("m", "slow")],
    }
    envoy = epp.start(config)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    first = threading.Thread(
        target=lambda: httpx.post(envoy.url + "/v1/chat/completions", json=body, timeout=10)
    )
    first.start()
    gateway = stack.gateway
    assert gateway is not None
    wait_until(
        lambda: gateway.pipeline.state.health("slow").inflight == 1, 5, "the first in flight"
    )
    second = httpx.post(envoy.url + "/v1/chat/completions", json=body, timeout=10)
    assert second.status_code == 429
    assert second.json()["error"]["code"] == "gateway_queue_full"
    assert int(second.headers["retry-after"]) >= 1
    first.join(10)
    assert len(client_requests(slow)) == 1
