"""The `telemetry:` block and the OTEL_* variables; the request path's trace context."""

from __future__ import annotations

from fleetgate.config.schema import TelemetryConfig
from fleetgate.telemetry.settings import telemetry_settings
from fleetgate.trace_context import Tracing, parse_traceparent

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_no_endpoint_anywhere_is_off() -> None:
    assert telemetry_settings(TelemetryConfig(), {}) is None
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}
    assert telemetry_settings(TelemetryConfig(), env) is None


def test_every_setting_comes_from_the_environment_when_the_file_leaves_it_unset() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317/",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_HEADERS": "x-honeycomb-team=k%3D1, other = two",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "2500",
        "OTEL_SERVICE_NAME": "gw",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.1",
        "OTEL_BSP_MAX_QUEUE_SIZE": "100",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,service.name=ignored",
    }
    s = telemetry_settings(TelemetryConfig(), env)
    assert s is not None
    assert (s.endpoint, s.protocol, s.service_name) == ("http://collector:4317", "grpc", "gw")
    assert s.headers == (("x-honeycomb-team", "k=1"), ("other", "two"))
    assert (s.timeout, s.sample_ratio, s.parent_based) == (2.5, 0.1, True)
    assert s.max_queue_spans == 100
    assert s.resource == (("deployment.environment", "prod"),)


def test_the_file_wins_over_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("HONEYCOMB_KEY", "from-env")
    config = TelemetryConfig.model_validate(
        {
            "otlp": {
                "endpoint": "https://api.example:443",
                "protocol": "http/protobuf",
                "headers": {"x-honeycomb-team": "${HONEYCOMB_KEY}"},
            },
            "service_name": "edge",
            "sample_ratio": 0.5,
        }
    )
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://other:4317",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_SERVICE_NAME": "gw",
        "OTEL_TRACES_SAMPLER": "always_off",
    }
    s = telemetry_settings(config, env)
    assert s is not None
    assert (s.endpoint, s.protocol, s.service_name) == (
        "https://api.example:443",
        "http/protobuf",
        "edge",
    )
    assert s.headers == (("x-honeycomb-team", "from-env"),)
    assert (s.sample_ratio, s.parent_based) == (0.5, True)


def test_traceparent_parsing() -> None:
    assert parse_traceparent(f"00-{TRACE}-00f067aa0ba902b7-01") == (TRACE, "00f067aa0ba902b7", True)
    assert parse_traceparent(f"00-{TRACE}-00f067aa0ba902b7-00")[2] is False  # type: ignore[index]
    future = f"cc-{TRACE}-00f067aa0ba902b7-09-more"
    assert parse_traceparent(future) == (TRACE, "00f067aa0ba902b7", True)
    for bad in (
        f"00-{TRACE}-00f067aa0ba902b7-01-extra",  # version 00 has no more fields
        f"ff-{TRACE}-00f067aa0ba902b7-01",
        f"00-{'0' * 32}-00f067aa0ba902b7-01",
        f"00-{TRACE}-{'0' * 16}-01",
        f"00-{TRACE.upper()}-00f067aa0ba902b7-01",
        "garbage",
    ):
        assert parse_traceparent(bad) is None, bad


def test_sampling_is_parent_based_and_by_trace_id() -> None:
    never, always = Tracing(0.0), Tracing(1.0)
    assert not never.begin(None, None, 0.0).sampled
    assert always.begin(None, None, 0.0).sampled
    child = never.begin(f"00-{TRACE}-00f067aa0ba902b7-01", "a=b", 0.0)
    assert child.sampled and child.trace_id == TRACE and child.parent_id == "00f067aa0ba902b7"
    assert child.state == "a=b"
    assert not always.begin(f"00-{TRACE}-00f067aa0ba902b7-00", None, 0.0).sampled
    half = Tracing(0.5)
    low, high = "0" * 16 + "7" + "f" * 15, "0" * 16 + "8" + "0" * 15
    assert half.begin(f"00-{low}-00f067aa0ba902b7-00", None, 0.0).sampled is False  # parent says
    assert (
        Tracing(0.5, parent_based=False).begin(f"00-{low}-00f067aa0ba902b7-00", None, 0.0).sampled
    )
    assert (
        not Tracing(0.5, parent_based=False)
        .begin(f"00-{high}-00f067aa0ba902b7-01", None, 0.0)
        .sampled
    )
    kept = sum(Tracing(0.25).begin(None, None, 0.0).sampled for _ in range(4000))
    assert 800 < kept < 1200


def test_new_ids_are_hex_of_their_width_and_never_all_zeros(monkeypatch) -> None:
    ids = {Tracing(1.0).begin(None, None, 0.0).trace_id for _ in range(200)}
    assert len(ids) == 200
    assert all(len(i) == 32 and int(i, 16) > 0 and i == i.lower() for i in ids)
    draws = iter([0, 1 << 64, 5])  # an all-zero trace id, then an all-zero span id
    monkeypatch.setattr("fleetgate.trace_context.random.getrandbits", lambda _bits: next(draws))
    first = Tracing(1.0).begin(None, None, 0.0)
    second = Tracing(1.0).begin(None, None, 0.0)
    for trace in (first, second):
        assert parse_traceparent(trace.traceparent(trace.span_id)) is not None
    assert (first.trace_id, first.span_id) == (f"{1:032x}", f"{1:016x}")
    assert (second.trace_id, second.span_id) == (f"{1:032x}", f"{1:016x}")
    monkeypatch.undo()
    # a ratio of 1 keeps every trace, 0 none, whatever the id
    assert Tracing(1.0).begin(None, None, 0.0).sampled
    assert not Tracing(0.0).begin(None, None, 0.0).sampled
