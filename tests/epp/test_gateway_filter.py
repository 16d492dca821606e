"""A gateway's own ext_proc filter in front of the picker: one filter, no observe filter,
and the response sent to the pick's own call, as GIE gateways and llm-d's router configure
Envoy (the response body in full-duplex mode, trailers sent). The answer reaches the client
unchanged and with its cadence, and its evidence reaches the picker on that call."""

from __future__ import annotations

import itertools
import time
from typing import Any

import openai
import pytest

from fleetgate.epp.envoy_config import PICK_FILTER
from fleetgate.epp.protocol import DESTINATION, LB_NAMESPACE, SERVED
from fleetgate.testing.fake_engine import Fault
from tests.epp.bootstraps import gateway_filter, http_filters
from tests.epp.stack import EppStack
from tests.harness import Stack, client_requests, deployment, provider, wait_until


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=20)


def _records(stack: Stack) -> list[Any]:
    assert stack.gateway is not None
    return list(stack.gateway.pipeline.recent._records.values())


@pytest.mark.parametrize(
    ("mode", "request_mode"),
    [
        ("FULL_DUPLEX_STREAMED", "FULL_DUPLEX_STREAMED"),
        ("STREAMED", "FULL_DUPLEX_STREAMED"),
        ("BUFFERED", "FULL_DUPLEX_STREAMED"),
        ("FULL_DUPLEX_STREAMED", "BUFFERED"),
    ],
)
def test_an_answer_shown_on_the_pick_s_call_is_passed_on_and_recorded(
    stack: Stack, epp: EppStack, mode: str, request_mode: str
):
    a = stack.engine("a")
    config = {"providers": [provider("a", a)], "deployments": [deployment("m", "a")]}
    envoy = epp.start(config, edit=gateway_filter(mode, request_body_mode=request_mode))
    client = _client(envoy.url)
    answers = [
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
        for text in ("one", "two", "three")
    ]
    # the body came back through the picker unchanged: the engine's own answer
    assert all(answer.system_fingerprint == "fake-a" for answer in answers)
    assert all(answer.choices[0].message.content for answer in answers)
    wait_until(lambda: len(_records(stack)) == 3, 5, "three requests recorded")
    for record in _records(stack):
        assert record.status == 200 and record.deployment_id == "a"
        assert record.notes["endpoint"] == f"127.0.0.1:{a.port}"
        attempt = record.attempts[-1]
        assert attempt.prompt_tokens and attempt.completion_tokens  # read from the body
        assert attempt.finish == "stop"
    gateway = stack.gateway
    assert gateway is not None and epp.picker is not None
    # each request's in-flight count ended with its answer; no pick waits to be claimed
    assert gateway.pipeline.state.health("a").inflight == 0
    assert not epp.picker.picker._pending


def test_a_stream_shown_on_the_pick_s_call_keeps_its_cadence(stack: Stack, epp: EppStack):
    a = stack.engine("a", tokens_per_second=20, reply_words=12)
    config = {"providers": [provider("a", a)], "deployments": [deployment("m", "a")]}
    envoy = epp.start(config, edit=gateway_filter("FULL_DUPLEX_STREAMED"))
    stream = _client(envoy.url).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    arrivals, usage, text = [], None, []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.monotonic())
            text.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            usage = chunk.usage
    assert len(arrivals) >= 10 and usage is not None
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    # each chunk went to the picker and straight back: none held back and bunched
    assert sorted(gaps)[len(gaps) // 2] > 0.03, gaps
    assert arrivals[-1] - arrivals[0] > 0.4
    wait_until(lambda: len(_records(stack)) == 1, 5, "the stream recorded")
    record = _records(stack)[0]
    assert record.stream and record.status == 200 and record.deployment_id == "a"
    attempt = record.attempts[-1]
    assert attempt.ttft is not None and attempt.ttft < record.latency
    assert attempt.completion_tokens == usage.completion_tokens
    gateway = stack.gateway
    assert gateway is not None
    assert gateway.pipeline.state.health("a").ttft_ema is not None
    assert gateway.pipeline.state.health("a").inflight == 0


def test_an_error_shown_on_the_pick_s_call_counts_against_its_endpoint(stack: Stack, epp: EppStack):
    a = stack.engine("a")
    config = {"providers": [provider("a", a)], "deployments": [deployment("m", "a")]}
    envoy = epp.start(config, edit=gateway_filter("FULL_DUPLEX_STREAMED"))
    a.fail_next(Fault("status", status=503))
    with pytest.raises(openai.InternalServerError):
        _client(envoy.url).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
    wait_until(lambda: len(_records(stack)) == 1, 5, "the failure recorded")
    record = _records(stack)[0]
    assert record.status == 503
    assert record.attempts[-1].error_class is not None
    gateway = stack.gateway
    assert gateway is not None
    assert gateway.pipeline.state.health("a").failures == 1
    assert gateway.pipeline.state.health("a").inflight == 0


def test_a_client_that_leaves_before_the_answer_charges_no_endpoint(stack: Stack, epp: EppStack):
    a = stack.engine("a")
    config = {"providers": [provider("a", a)], "deployments": [deployment("m", "a")]}
    envoy = epp.start(config, edit=gateway_filter("FULL_DUPLEX_STREAMED"))
    a.fail_next(Fault("hang"))
    gateway = stack.gateway
    assert gateway is not None
    client = openai.OpenAI(base_url=envoy.url + "/v1", api_key="unused", max_retries=0, timeout=0.5)
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    # Envoy ends the picker's call with the request: the pick's in-flight count ends, and
    # an endpoint that only had no time to answer is not charged a failure
    wait_until(lambda: gateway.pipeline.state.health("a").inflight == 0, 5, "in flight ended")
    assert gateway.pipeline.state.health("a").failures == 0
    assert _records(stack) == []


def _reports_served(doc: dict[str, Any]) -> None:
    """The data plane reports the endpoint that served as GIE's protocol says: in the
    `envoy.lb` metadata it forwards with the response (a header the router sets from the
    upstream's address, moved into that metadata and taken off the answer)."""
    gateway_filter("FULL_DUPLEX_STREAMED")(doc)
    filters = http_filters(doc)
    (pick,) = [f for f in filters if f["name"] == PICK_FILTER]
    namespaces = pick["typed_config"]["metadata_options"]["forwarding_namespaces"]["untyped"]
    namespaces.append(LB_NAMESPACE)
    mover = {
        "name": "envoy.filters.http.header_to_metadata",
        "typed_config": {
            "@type": "type.googleapis.com/"
            "envoy.extensions.filters.http.header_to_metadata.v3.Config",
            "response_rules": [
                {
                    "header": "x-test-served",
                    "on_header_present": {"metadata_namespace": LB_NAMESPACE, "key": SERVED},
                    "remove": True,
                }
            ],
        },
    }
    filters.insert(filters.index(pick) + 1, mover)  # on the way back it runs first
    for route in _routes(doc):
        route["response_headers_to_add"] = [
            {"header": {"key": "x-test-served", "value": "%UPSTREAM_REMOTE_ADDRESS%"}}
        ]


def _routes(doc: Any) -> list[dict[str, Any]]:
    if isinstance(doc, dict):
        found = [doc] if "match" in doc and "route" in doc else []
        return found + [r for value in doc.values() for r in _routes(value)]
    if isinstance(doc, list):
        return [r for value in doc for r in _routes(value)]
    return []


def test_the_endpoint_the_data_plane_reports_in_its_metadata_is_the_one_recorded(
    stack: Stack, epp: EppStack
):
    a, b = stack.engine("a"), stack.engine("b")
    config = {
        "providers": [provider("a", a), provider("b", b)],
        "deployments": [deployment("m", "a", priority=0), deployment("m", "b", priority=1)],
        "models": [{"id": "m", "provider": {"order": ["a", "b"]}}],
    }
    envoy = epp.start(config, edit=_reports_served)
    a.fail_next(Fault("status", status=503))
    answer = _client(envoy.url).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hello"}]
    )
    assert answer.system_fingerprint == "fake-b"  # Envoy went on down the list
    wait_until(lambda: len(_records(stack)) == 1, 5, "the request recorded")
    record = _records(stack)[0]
    # b served, as the data plane said: a is charged its failure, b its success
    assert record.deployment_id == "b"
    assert record.notes["endpoint"] == f"127.0.0.1:{b.port}"
    assert [x.deployment_id for x in record.attempts] == ["a", "b"]
    gateway = stack.gateway
    assert gateway is not None
    assert gateway.pipeline.state.health("a").failures == 1
    assert gateway.pipeline.state.health("b").successes == 1


def _original_destination(doc: dict[str, Any]) -> None:
    """The endpoints' cluster as llm-d's router chart writes it: ORIGINAL_DST on the
    `x-gateway-destination-endpoint` header, which takes one address."""
    clusters = doc["static_resources"]["clusters"]
    (at,) = [i for i, c in enumerate(clusters) if c["name"] == "fleetgate_endpoints"]
    clusters[at] = {
        "name": "fleetgate_endpoints",
        "type": "ORIGINAL_DST",
        "lb_policy": "CLUSTER_PROVIDED",
        "connect_timeout": "5s",
        "original_dst_lb_config": {"use_http_header": True, "http_header_name": DESTINATION},
    }


def test_a_data_plane_that_reads_one_address_is_named_one(stack: Stack, epp: EppStack):
    """A list of fallbacks is not an address: such a data plane answers 503 to every pick
    that names two. `--endpoints 1` names the plan's first alone, and it serves."""
    a, b = stack.engine("a"), stack.engine("b")
    config = {
        "providers": [provider("a", a), provider("b", b)],
        "deployments": [deployment("m", "a", priority=0), deployment("m", "b", priority=1)],
        "models": [{"id": "m", "provider": {"order": ["a", "b"]}}],
    }
    envoy = epp.start(config, edit=_original_destination, endpoints=1)
    client = _client(envoy.url)
    for text in ("one", "two"):
        answer = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": text}]
        )
        assert answer.system_fingerprint == "fake-a"
    assert len(client_requests(a)) == 2 and not client_requests(b)
    wait_until(lambda: len(_records(stack)) == 2, 5, "both requests recorded")
    assert {r.notes["endpoint"] for r in _records(stack)} == {f"127.0.0.1:{a.port}"}


def test_an_answer_through_the_pick_s_call_names_the_client_s_model(stack: Stack, epp: EppStack):
    """The deployment names another model upstream: the engine answers with that name, and
    the client reads its own, whole answer and stream alike, as through the proxy."""
    a = stack.engine("a", reply_words=30)
    config = {
        "providers": [provider("a", a)],
        "deployments": [deployment("m", "a", upstream_model="org/served-name-of-m")],
    }
    envoy = epp.start(config, edit=gateway_filter("FULL_DUPLEX_STREAMED"))
    client = _client(envoy.url)
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    answer = raw.parse()
    assert client_requests(a)[0].body["model"] == "org/served-name-of-m"
    assert answer.model == "m" and answer.choices[0].message.content
    assert b"org/served-name-of-m" not in raw.http_response.content
    stream = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert len(chunks) > 5 and {c.model for c in chunks} == {"m"}
    assert chunks[-1].usage is not None
    wait_until(lambda: len(_records(stack)) == 2, 5, "both recorded")
    assert all(r.attempts[-1].prompt_tokens for r in _records(stack))


@pytest.mark.parametrize("headers", ["SEND", "SKIP"])
def test_a_gateway_that_sends_no_response_body_leaks_no_in_flight_count(
    stack: Stack, epp: EppStack, headers: str
):
    """A gateway's filter that sends the picker the response's headers only, or nothing of
    the response: the pick's in-flight count still ends with the request (the call lives
    as long as it), and the headers, when they come, are the request's record."""
    a = stack.engine("a")
    config = {"providers": [provider("a", a)], "deployments": [deployment("m", "a")]}
    envoy = epp.start(config, edit=gateway_filter("NONE", response_header_mode=headers))
    client = _client(envoy.url)
    for text in ("one", "two", "three"):
        answer = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": text}]
        )
        assert answer.system_fingerprint == "fake-a"
    gateway = stack.gateway
    assert gateway is not None and epp.picker is not None
    wait_until(lambda: gateway.pipeline.state.health("a").inflight == 0, 5, "in flight ended")
    assert not epp.picker.picker._pending  # nothing waits for an observe call
    if headers == "SEND":
        wait_until(lambda: len(_records(stack)) == 3, 5, "three requests recorded")
        assert {r.status for r in _records(stack)} == {200}
        assert gateway.pipeline.state.health("a").successes == 3
