"""OpenTelemetry export, checked on the real wire: a gRPC and an HTTP/protobuf OTLP receiver
on loopback, fake engines upstream, requests through the openai SDK."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from fleetgate.testing import Fault
from tests.harness import Stack, deployment, provider, wait_until
from tests.telemetry.receivers import GrpcReceiver, HttpReceiver, Received, attributes
from tests.tiers import BASE_WINDOW, LONG_WINDOW, tiered_config

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
CANARY = "CANARY-zq81-prompt-text"
SECRET = "sk-CANARY-provider-secret-7731"
SERVER, CLIENT, INTERNAL = 2, 3, 1


@pytest.fixture
def grpc_receiver() -> Iterator[GrpcReceiver]:
    receiver = GrpcReceiver()
    yield receiver
    receiver.close()


@pytest.fixture
def http_receiver(stack: Stack) -> Iterator[HttpReceiver]:
    receiver = HttpReceiver()
    stack.lt.run(receiver.start())
    yield receiver
    stack.lt.run(receiver.stop())


def telemetry(endpoint: str, protocol: str, **extra: Any) -> dict[str, Any]:
    return {
        "otlp": {"endpoint": endpoint, "protocol": protocol},
        "export_interval_seconds": 0.05,
        **extra,
    }


def fallback_fleet(stack: Stack, telemetry_block: dict[str, Any] | None) -> None:
    a, b = stack.engine("a"), stack.engine("b")
    config: dict[str, Any] = {
        "providers": [provider("pa", a, api_key=SECRET), provider("pb", b)],
        "deployments": [
            deployment("m", "pa", priority=0, upstream_model="up"),
            deployment("m", "pb", priority=1, upstream_model="up"),
        ],
    }
    if telemetry_block is not None:
        config["telemetry"] = telemetry_block
    stack.start_gateway(config)


def chat(
    stack: Stack, stream: bool = False, headers: dict[str, str] | None = None
) -> httpx.Response:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": f"say something about {CANARY}"}],
        "max_tokens": 5,
        "temperature": 0.25,
        "top_p": 0.5,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return httpx.post(f"{stack.url}/v1/chat/completions", json=body, headers=headers, timeout=10)


def traceparent(trace: str = CLIENT_TRACE, span: str = CLIENT_SPAN, flags: str = "01") -> str:
    return f"00-{trace}-{span}-{flags}"


def spans_of(receiver: Received, trace_id: str, count: int) -> dict[str, Any]:
    wait_until(lambda: len(receiver.spans(trace_id)) >= count, 10, f"{count} spans exported")
    return {s.span_id.hex(): s for s in receiver.spans(trace_id)}


@pytest.mark.parametrize("wire", ["grpc", "http/protobuf"])
def test_a_fallback_is_a_server_span_a_routing_span_and_two_client_spans(
    stack: Stack, grpc_receiver: GrpcReceiver, http_receiver: HttpReceiver, wire: str
) -> None:
    receiver: Received = grpc_receiver if wire == "grpc" else http_receiver
    fallback_fleet(stack, telemetry(receiver.endpoint, wire))
    stack.engines["a"].fail_next(Fault("status", status=503))
    resp = chat(stack, headers={"traceparent": traceparent(), "tracestate": "vendor=abc"})
    assert resp.status_code == 200
    assert resp.headers["x-fleetgate-attempts"] == "2"

    spans = spans_of(receiver, CLIENT_TRACE, 4)
    by_kind: dict[int, list[Any]] = {}
    for span in spans.values():
        by_kind.setdefault(span.kind, []).append(span)
    (server,) = by_kind[SERVER]
    assert server.name == "POST /v1/chat/completions"
    assert server.parent_span_id.hex() == CLIENT_SPAN  # the client's trace, joined
    assert server.trace_state == "vendor=abc"
    server_attrs = attributes(server.attributes)
    assert server_attrs["http.response.status_code"] == 200
    assert server_attrs["fleetgate.deployment"] == "pb"
    assert server_attrs["fleetgate.attempts"] == 2

    (routing,) = [s for s in by_kind[INTERNAL] if s.name == "fleetgate.route"]
    assert routing.parent_span_id == server.span_id
    route_attrs = attributes(routing.attributes)
    assert route_attrs["fleetgate.candidates.kept"] == ["pa", "pb"]
    assert route_attrs["fleetgate.resolution"] == "explicit"
    assert route_attrs["fleetgate.context.source"] == "estimate"
    assert server.start_time_unix_nano <= routing.start_time_unix_nano
    assert routing.end_time_unix_nano <= server.end_time_unix_nano

    first, second = sorted(by_kind[CLIENT], key=lambda s: s.start_time_unix_nano)
    for span in (first, second):
        assert span.name == "chat up"
        assert span.parent_span_id == server.span_id
        assert server.start_time_unix_nano <= span.start_time_unix_nano
        assert span.end_time_unix_nano <= server.end_time_unix_nano
        attrs = attributes(span.attributes)
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.provider.name"] == "vllm"
        assert attrs["gen_ai.request.model"] == "up"
        assert attrs["gen_ai.request.max_tokens"] == 5
        assert attrs["gen_ai.request.temperature"] == 0.25
        assert attrs["gen_ai.request.top_p"] == 0.5
        assert attrs["server.address"] == "127.0.0.1"
    a1, a2 = attributes(first.attributes), attributes(second.attributes)
    assert a1["fleetgate.deployment"] == "pa" and a1["fleetgate.attempt.index"] == 0
    assert a1["error.type"] == "server_error" and a1["http.response.status_code"] == 503
    assert first.status.code == 2  # ERROR
    assert a1["server.port"] == int(stack.engines["a"].url.rsplit(":", 1)[1])
    assert a2["fleetgate.deployment"] == "pb" and a2["fleetgate.attempt.index"] == 1
    assert a2["fleetgate.fallback.reason"] == "server_error"
    assert "error.type" not in a2
    assert a2["gen_ai.response.model"] == "up"
    assert a2["gen_ai.response.id"] == resp.json()["id"]
    assert a2["gen_ai.response.finish_reasons"] == ["length"]
    assert a2["gen_ai.usage.input_tokens"] == resp.json()["usage"]["prompt_tokens"]
    assert a2["gen_ai.usage.output_tokens"] == 5
    assert a2["fleetgate.cut_short"] is False

    # each upstream got the `traceparent` of its own attempt's span
    (got_a,) = stack.engines["a"].requests
    (got_b,) = stack.engines["b"].requests
    assert got_a.headers["traceparent"] == f"00-{CLIENT_TRACE}-{first.span_id.hex()}-01"
    assert got_b.headers["traceparent"] == f"00-{CLIENT_TRACE}-{second.span_id.hex()}-01"
    assert got_b.headers["tracestate"] == "vendor=abc"
    assert receiver.resources()[0]["service.name"] == "fleetgate"


def test_a_stream_has_its_time_to_first_chunk_and_no_text_is_exported(
    stack: Stack, http_receiver: HttpReceiver
) -> None:
    fallback_fleet(stack, telemetry(http_receiver.endpoint, "http/protobuf"))
    stack.engines["a"].fail_next(Fault("status", status=500))
    plain = chat(stack)
    streamed = chat(stack, stream=True)
    assert plain.status_code == streamed.status_code == 200
    answer = plain.json()["choices"][0]["message"]["content"]
    wait_until(lambda: len(http_receiver.spans()) >= 7, 10, "both requests' spans")
    clients = [s for s in http_receiver.spans() if s.kind == CLIENT]
    streamed_span = next(
        s for s in clients if attributes(s.attributes).get("gen_ai.request.stream") is True
    )
    attrs = attributes(streamed_span.attributes)
    assert 0 < attrs["gen_ai.response.time_to_first_chunk"] < 5
    assert attrs["gen_ai.usage.output_tokens"] == 5
    assert attrs["gen_ai.response.id"].startswith("chatcmpl")
    # neither prompt, nor completion, nor a credential, in any byte sent
    for body in http_receiver.raw:
        assert CANARY.encode() not in body
        assert answer.encode() not in body
        assert SECRET.encode() not in body
        assert b"says:" not in body


def test_a_new_trace_is_started_without_a_client_traceparent(
    stack: Stack, grpc_receiver: GrpcReceiver
) -> None:
    fallback_fleet(stack, telemetry(grpc_receiver.endpoint, "grpc"))
    assert chat(stack).status_code == 200
    wait_until(lambda: len(grpc_receiver.spans()) >= 3, 10, "spans exported")
    (server,) = [s for s in grpc_receiver.spans() if s.kind == SERVER]
    assert server.parent_span_id == b""  # a root
    (client,) = [s for s in grpc_receiver.spans() if s.kind == CLIENT]
    (got,) = stack.engines["a"].requests
    trace = server.trace_id.hex()
    assert got.headers["traceparent"] == f"00-{trace}-{client.span_id.hex()}-01"


def test_an_unsampled_client_trace_is_propagated_and_not_exported(
    stack: Stack, grpc_receiver: GrpcReceiver
) -> None:
    fallback_fleet(stack, telemetry(grpc_receiver.endpoint, "grpc"))
    unsampled = "11111111111111111111111111111111"
    assert chat(stack, headers={"traceparent": traceparent(unsampled, flags="00")}).is_success
    sampled = "22222222222222222222222222222222"
    assert chat(stack, headers={"traceparent": traceparent(sampled)}).is_success
    spans_of(grpc_receiver, sampled, 3)  # the later request's spans are there …
    assert grpc_receiver.spans(unsampled) == []  # … the unsampled one's never were
    first = stack.engines["a"].requests[0]
    assert first.headers["traceparent"].startswith(f"00-{unsampled}-")
    assert first.headers["traceparent"].endswith("-00")


def test_sample_ratio_zero_keeps_no_new_trace(stack: Stack, grpc_receiver: GrpcReceiver) -> None:
    fallback_fleet(stack, telemetry(grpc_receiver.endpoint, "grpc", sample_ratio=0.0))
    for _ in range(3):
        assert chat(stack).is_success
    kept = "33333333333333333333333333333333"
    assert chat(stack, headers={"traceparent": traceparent(kept)}).is_success  # parent-based
    spans_of(grpc_receiver, kept, 3)
    assert {s.trace_id.hex() for s in grpc_receiver.spans()} == {kept}


def test_genai_metrics_go_over_otlp_and_to_metrics(
    stack: Stack, grpc_receiver: GrpcReceiver
) -> None:
    block = telemetry(grpc_receiver.endpoint, "grpc", metrics_interval_seconds=0.2)
    fallback_fleet(stack, block)
    stack.engines["a"].fail_next(Fault("status", status=503))
    assert chat(stack).is_success
    assert chat(stack, stream=True).is_success
    names = {
        "gen_ai.client.operation.duration",
        "gen_ai.client.token.usage",
        "gen_ai.client.operation.time_to_first_chunk",
    }
    wait_until(lambda: names <= grpc_receiver.metric_names(), 10, "GenAI metrics exported")

    def durations() -> dict[tuple[str, str | None], Any]:
        with grpc_receiver.lock:
            last = grpc_receiver.metrics[-1]
        (metric,) = [
            m
            for m in last.resource_metrics[0].scope_metrics[0].metrics
            if m.name == "gen_ai.client.operation.duration"
        ]
        points = {}
        for p in metric.histogram.data_points:
            attrs = attributes(p.attributes)
            points[(attrs["fleetgate.deployment"], attrs.get("error.type"))] = p
        return points

    # cumulative: a later export holds both requests' three attempts
    wait_until(lambda: sum(p.count for p in durations().values()) == 3, 10, "all attempts")
    points = durations()
    assert points[("pa", "server_error")].count == 1
    assert points[("pb", None)].count == 1  # the first request's fallback
    assert points[("pa", None)].count == 1  # the stream: `pa` served again
    assert list(points[("pb", None)].explicit_bounds)[:2] == [0.01, 0.02]
    assert len(points[("pb", None)].bucket_counts) == 15
    with grpc_receiver.lock:
        last = grpc_receiver.metrics[-1]
    metrics = {m.name: m for m in last.resource_metrics[0].scope_metrics[0].metrics}
    tokens = metrics["gen_ai.client.token.usage"].histogram.data_points
    output = [p for p in tokens if attributes(p.attributes)["gen_ai.token.type"] == "output"]
    assert sum(p.sum for p in output) == 10
    scrape = httpx.get(f"{stack.url}/metrics").text
    assert 'gen_ai_client_operation_duration_seconds_count{error_type="server_error"' in scrape
    assert "gen_ai_client_token_usage_bucket" in scrape
    assert "gen_ai_client_operation_time_to_first_chunk_seconds_count" in scrape


def test_telemetry_off_sends_nothing_and_no_traceparent(
    stack: Stack, grpc_receiver: GrpcReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    fallback_fleet(stack, None)
    assert stack.gateway is not None and stack.gateway.pipeline.telemetry is None
    assert chat(stack, headers={"traceparent": traceparent()}).is_success
    (got,) = stack.engines["a"].requests
    assert "traceparent" not in got.headers
    stack.stop_gateway()  # a last flush would send anything there was
    assert grpc_receiver.raw == []


def test_the_endpoint_may_come_from_the_environment(
    stack: Stack, grpc_receiver: GrpcReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", grpc_receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-team-key=abc%20def")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "edge-gateway")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    fallback_fleet(stack, None)
    assert chat(stack).is_success
    wait_until(lambda: len(grpc_receiver.spans()) >= 3, 10, "spans exported")
    assert grpc_receiver.resources()[0]["service.name"] == "edge-gateway"
    assert grpc_receiver.headers[0]["x-team-key"] == "abc def"


def test_an_exact_count_has_its_span_under_routing(
    stack: Stack, grpc_receiver: GrpcReceiver
) -> None:
    base = stack.engine("base", context_window=BASE_WINDOW)
    long = stack.engine("long", context_window=LONG_WINDOW)
    config = tiered_config(base, long)
    config["telemetry"] = telemetry(grpc_receiver.endpoint, "grpc")
    stack.start_gateway(config)
    # 1200 lone full stops: the estimate straddles the 1k window, so the engine counts them
    body = {"model": "m", "messages": [{"role": "user", "content": " ".join(["."] * 1200)}]}
    resp = httpx.post(
        f"{stack.url}/v1/chat/completions",
        json={**body, "max_tokens": 10},
        headers={"traceparent": traceparent()},
        timeout=10,
    )
    assert resp.headers["x-fleetgate-context-estimate"] == "1211; exact"
    spans = spans_of(grpc_receiver, CLIENT_TRACE, 4)
    (routing,) = [s for s in spans.values() if s.name == "fleetgate.route"]
    (count,) = [s for s in spans.values() if s.name == "fleetgate.count_tokens"]
    assert count.parent_span_id == routing.span_id
    assert routing.start_time_unix_nano <= count.start_time_unix_nano
    assert count.end_time_unix_nano <= routing.end_time_unix_nano
    assert attributes(count.attributes)["fleetgate.context.source"] == "exact"
    route_attrs = attributes(routing.attributes)
    assert route_attrs["fleetgate.context.tokens"] == 1211
    assert route_attrs["fleetgate.context.exact"] is True
    assert route_attrs["fleetgate.context.source"] == "exact"
    assert "m@long" in route_attrs["fleetgate.candidates.kept"]


def count_calls(stack: Stack) -> list[Any]:
    return [
        r
        for e in stack.engines.values()
        for r in e.requests
        if r.path in ("/tokenize", "/apply-template")
    ]


def count_near_the_boundary(stack: Stack, headers: dict[str, str] | None = None) -> None:
    # 1200 lone full stops: the estimate straddles the 1k window, so the engine counts them
    body = {"model": "m", "messages": [{"role": "user", "content": " ".join(["."] * 1200)}]}
    resp = httpx.post(
        f"{stack.url}/v1/chat/completions",
        json={**body, "max_tokens": 10},
        headers=headers,
        timeout=10,
    )
    assert resp.headers["x-fleetgate-context-estimate"] == "1211; exact"


def tiered(stack: Stack, telemetry_block: dict[str, Any] | None) -> None:
    base = stack.engine("base", context_window=BASE_WINDOW)
    long = stack.engine("long", context_window=LONG_WINDOW)
    config = tiered_config(base, long)
    if telemetry_block is not None:
        config["telemetry"] = telemetry_block
    stack.start_gateway(config)


def test_the_exact_count_call_names_its_span_as_parent(
    stack: Stack, grpc_receiver: GrpcReceiver
) -> None:
    tiered(stack, telemetry(grpc_receiver.endpoint, "grpc"))
    count_near_the_boundary(stack, {"traceparent": traceparent(), "tracestate": "vendor=abc"})
    spans = spans_of(grpc_receiver, CLIENT_TRACE, 4)
    (count,) = [s for s in spans.values() if s.name == "fleetgate.count_tokens"]
    (calls,) = count_calls(stack)  # an engine that traces joins the trace under the count
    assert calls.headers["traceparent"] == f"00-{CLIENT_TRACE}-{count.span_id.hex()}-01"
    assert calls.headers["tracestate"] == "vendor=abc"
    (client,) = [s for s in spans.values() if s.kind == CLIENT]
    assert count.span_id != client.span_id


def test_an_unsampled_count_call_carries_the_trace_and_an_untraced_one_nothing(
    stack: Stack, grpc_receiver: GrpcReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiered(stack, telemetry(grpc_receiver.endpoint, "grpc"))
    unsampled = "11111111111111111111111111111111"
    count_near_the_boundary(stack, {"traceparent": traceparent(unsampled, flags="00")})
    (calls,) = count_calls(stack)
    assert calls.headers["traceparent"].startswith(f"00-{unsampled}-")
    assert calls.headers["traceparent"].endswith("-00")
    stack.stop_gateway()
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    for engine in stack.engines.values():
        engine.reset_counters()
    tiered_off = tiered_config(stack.engines["base"], stack.engines["long"])
    stack.start_gateway(tiered_off)
    count_near_the_boundary(stack, {"traceparent": traceparent()})
    (calls,) = count_calls(stack)
    assert "traceparent" not in calls.headers


def test_a_translated_attempt_has_a_translation_span(
    stack: Stack, grpc_receiver: GrpcReceiver
) -> None:
    fallback_fleet(stack, telemetry(grpc_receiver.endpoint, "grpc"))
    body = {"model": "m", "messages": [{"role": "user", "content": CANARY}], "stream": False}
    resp = httpx.post(
        f"{stack.url}/api/chat", json=body, headers={"traceparent": traceparent()}, timeout=10
    )
    assert resp.status_code == 200
    spans = spans_of(grpc_receiver, CLIENT_TRACE, 4)
    (client,) = [s for s in spans.values() if s.kind == CLIENT]
    assert attributes(client.attributes)["fleetgate.wire"] == "ollama.chat→chat.completions"
    assert attributes(client.attributes)["gen_ai.operation.name"] == "chat"
    (translate,) = [s for s in spans.values() if s.name == "fleetgate.translate"]
    assert translate.parent_span_id == client.span_id
    assert client.start_time_unix_nano <= translate.start_time_unix_nano
    assert translate.end_time_unix_nano <= client.end_time_unix_nano
    (server,) = [s for s in spans.values() if s.kind == SERVER]
    assert server.name == "POST /api/chat"


def test_a_traced_request_s_record_names_each_attempt_s_span(
    stack: Stack, grpc_receiver: GrpcReceiver
) -> None:
    """The read API shows the span id each attempt's upstream was told, as `traceparent`
    writes it: the id the exported CLIENT span carries."""
    fallback_fleet(stack, telemetry(grpc_receiver.endpoint, "grpc"))
    stack.engines["a"].fail_next(Fault("status", status=503))
    resp = chat(stack)
    assert resp.status_code == 200
    url = f"{stack.url}/v1/requests/{resp.headers['x-request-id']}"
    wait_until(lambda: httpx.get(url).status_code == 200, 5, "the request's record")
    record = httpx.get(url).json()
    wait_until(lambda: len(grpc_receiver.spans()) >= 4, 10, "spans exported")
    clients = [s for s in grpc_receiver.spans() if s.kind == CLIENT]
    by_index = {attributes(s.attributes)["fleetgate.attempt.index"]: s for s in clients}
    assert [a["span_id"] for a in record["attempts"]] == [
        by_index[0].span_id.hex(),
        by_index[1].span_id.hex(),
    ]
    assert record["trace_id"] == clients[0].trace_id.hex()
