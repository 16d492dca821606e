"""The `telemetry:` block, completed from the standard `OTEL_*` environment variables.

A value the file sets wins; one it leaves unset comes from the environment, as an
OpenTelemetry SDK would read it; neither gives OpenTelemetry's default. No endpoint
anywhere (or `OTEL_SDK_DISABLED=true`) means telemetry is off.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

from fleetgate.config.schema import TelemetryConfig
from fleetgate.fleet import resolve_secret

log = logging.getLogger("fleetgate.telemetry")

PROTOCOLS = ("grpc", "http/protobuf")


@dataclass(frozen=True, slots=True)
class TelemetrySettings:
    endpoint: str
    protocol: str  # "grpc" | "http/protobuf"
    headers: tuple[tuple[str, str], ...]
    timeout: float  # seconds
    retries: int  # sends again of a batch the collector may take later
    retry_backoff: float  # seconds: the first wait before one
    service_name: str
    sample_ratio: float
    parent_based: bool
    max_queue_spans: int
    export_interval: float  # seconds
    metrics_interval: float  # seconds
    resource: tuple[tuple[str, str], ...]  # OTEL_RESOURCE_ATTRIBUTES, service.name aside


def _ms(env: Mapping[str, str], name: str) -> float | None:
    raw = env.get(name)
    if not raw:
        return None
    try:
        value = float(raw) / 1000
    except ValueError:
        log.warning("%s=%r is no number of milliseconds; ignored", name, raw)
        return None
    return value if value > 0 else None


def _int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        log.warning("%s=%r is no integer; ignored", name, raw)
        return None
    return value if value > 0 else None


def _pairs(raw: str | None) -> tuple[tuple[str, str], ...]:
    """`key=value,key2=value2`, values URL-encoded (the W3C baggage form the OTEL_* lists use)."""
    pairs = []
    for item in (raw or "").split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            pairs.append((key.strip(), unquote(value.strip())))
    return tuple(pairs)


def _sendable(headers: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """The headers a request can carry: one whose name or value holds a line break or a
    NUL (it would end the header block early, or be refused by gRPC) is left out, named in
    a warning (its value may be a secret: not shown)."""
    kept = []
    for key, value in headers:
        if any(c in key + value for c in "\r\n\0"):
            log.warning("OTLP header %r holds a line break or a NUL; it is not sent", key)
        else:
            kept.append((key, value))
    return tuple(kept)


def _sampler(env: Mapping[str, str]) -> tuple[float, bool]:
    """(ratio, parent-based) from `OTEL_TRACES_SAMPLER[_ARG]`; (1.0, True) by default."""
    name = env.get("OTEL_TRACES_SAMPLER", "").strip().lower() or "parentbased_always_on"
    parent_based = name.startswith("parentbased_")
    kind = name.removeprefix("parentbased_")
    if kind == "always_on":
        return 1.0, parent_based
    if kind == "always_off":
        return 0.0, parent_based
    if kind == "traceidratio":
        try:
            ratio = float(env.get("OTEL_TRACES_SAMPLER_ARG", "1.0"))
        except ValueError:
            ratio = 1.0
        return max(0.0, min(1.0, ratio)), parent_based
    log.warning("OTEL_TRACES_SAMPLER=%r is not supported; parentbased_always_on instead", name)
    return 1.0, True


def telemetry_settings(
    config: TelemetryConfig, env: Mapping[str, str] | None = None
) -> TelemetrySettings | None:
    """The settings in force, or None when telemetry is off."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    otlp = config.otlp
    endpoint = otlp.endpoint or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if not endpoint:
        return None
    protocol = otlp.protocol or env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip()
    if protocol not in PROTOCOLS:
        if protocol:
            log.warning("OTLP protocol %r is not supported; http/protobuf instead", protocol)
        protocol = "http/protobuf"
    if otlp.headers is not None:
        headers = tuple((k, resolve_secret(v) or "") for k, v in otlp.headers.items())
    else:
        headers = _pairs(env.get("OTEL_EXPORTER_OTLP_HEADERS"))
    headers = _sendable(headers)
    ratio, parent_based = _sampler(env)
    if config.sample_ratio is not None:
        ratio, parent_based = config.sample_ratio, True
    resource = tuple(
        (k, v) for k, v in _pairs(env.get("OTEL_RESOURCE_ATTRIBUTES")) if k != "service.name"
    )
    service = config.service_name or env.get("OTEL_SERVICE_NAME", "").strip() or "fleetgate"
    return TelemetrySettings(
        endpoint=endpoint.rstrip("/"),
        protocol=protocol,
        headers=tuple((k.lower(), v) for k, v in headers),
        timeout=otlp.timeout_seconds or _ms(env, "OTEL_EXPORTER_OTLP_TIMEOUT") or 10.0,
        retries=otlp.retries,
        retry_backoff=otlp.retry_backoff_seconds,
        service_name=service,
        sample_ratio=ratio,
        parent_based=parent_based,
        max_queue_spans=config.max_queue_spans or _int(env, "OTEL_BSP_MAX_QUEUE_SIZE") or 2048,
        export_interval=config.export_interval_seconds
        or _ms(env, "OTEL_BSP_SCHEDULE_DELAY")
        or 1.0,
        metrics_interval=config.metrics_interval_seconds
        or _ms(env, "OTEL_METRIC_EXPORT_INTERVAL")
        or 60.0,
        resource=resource,
    )
