"""The endpoints that work for a client without being proxied have their SERVER span too:
a token count (with its count's span, the parent its engine call names) and a routing
explanation, children of the client's trace; on a real OTLP/gRPC receiver."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import pytest

from tests.harness import Stack, deployment, provider
from tests.telemetry.receivers import GrpcReceiver, attributes
from tests.telemetry.test_traces import (
    CANARY,
    CLIENT_SPAN,
    CLIENT_TRACE,
    INTERNAL,
    SERVER,
    spans_of,
    telemetry,
    traceparent,
)


@pytest.fixture
def receiver() -> Iterator[GrpcReceiver]:
    got = GrpcReceiver()
    yield got
    got.close()


def start(stack: Stack, receiver: GrpcReceiver) -> None:
    engine = stack.engine("a")
    stack.start_gateway(
        {
            "providers": [provider("pa", engine)],
            "deployments": [deployment("m", "pa", upstream_model="up")],
            "telemetry": telemetry(receiver.endpoint, "grpc"),
        }
    )


def test_a_token_count_is_a_server_span_whose_count_the_engine_joins(
    stack: Stack, receiver: GrpcReceiver
) -> None:
    start(stack, receiver)
    client = anthropic.Anthropic(
        base_url=stack.url,
        api_key="x",
        max_retries=0,
        timeout=10,
        default_headers={"traceparent": traceparent(), "tracestate": "vendor=abc"},
    )
    counted = client.messages.count_tokens(
        model="m", messages=[{"role": "user", "content": f"how many tokens in {CANARY}"}]
    )
    assert counted.input_tokens > 0
    spans = spans_of(receiver, CLIENT_TRACE, 2)
    (server,) = [s for s in spans.values() if s.kind == SERVER]
    assert server.name == "POST /v1/messages/count_tokens"
    assert server.parent_span_id.hex() == CLIENT_SPAN
    assert server.trace_state == "vendor=abc"
    attrs = attributes(server.attributes)
    assert attrs["http.response.status_code"] == 200
    assert attrs["fleetgate.deployment"] == "pa"
    assert attrs["fleetgate.context.tokens"] == counted.input_tokens
    assert attrs["fleetgate.context.source"] == "exact"
    (count,) = [s for s in spans.values() if s.kind == INTERNAL]
    assert count.name == "fleetgate.count_tokens"
    assert count.parent_span_id == server.span_id
    assert server.start_time_unix_nano <= count.start_time_unix_nano
    assert count.end_time_unix_nano <= server.end_time_unix_nano
    (tokenize,) = [r for r in stack.engines["a"].requests if r.path == "/tokenize"]
    assert tokenize.headers["traceparent"] == f"00-{CLIENT_TRACE}-{count.span_id.hex()}-01"
    with receiver.lock:
        assert all(CANARY.encode() not in body for body in receiver.raw)


def test_a_routing_explanation_is_a_server_span_and_a_refusal_says_why(
    stack: Stack, receiver: GrpcReceiver
) -> None:
    start(stack, receiver)
    headers = {"traceparent": traceparent()}
    body = {"model": "m", "messages": [{"role": "user", "content": CANARY}]}
    url = f"{stack.url}/v1/routing/explain"
    assert httpx.post(url, json=body, headers=headers, timeout=10).status_code == 200
    (server,) = spans_of(receiver, CLIENT_TRACE, 1).values()
    assert server.kind == SERVER
    assert server.name == "POST /v1/routing/explain"
    assert server.parent_span_id.hex() == CLIENT_SPAN
    attrs = attributes(server.attributes)
    assert attrs["http.response.status_code"] == 200
    assert attrs["fleetgate.requested_model"] == "m"

    other = "55555555555555555555555555555555"
    unknown = {"traceparent": traceparent(other)}
    resp = httpx.post(url, content=b"{not json", headers=unknown, timeout=10)
    assert resp.status_code == 400
    (refused,) = spans_of(receiver, other, 1).values()
    attrs = attributes(refused.attributes)
    assert attrs["http.response.status_code"] == 400
    assert attrs["error.type"] == resp.json()["error"]["code"]
    assert refused.status.code == 0  # a client's error is no server error
