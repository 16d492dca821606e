"""Sends encoded OTLP requests to the collector: gRPC (grpcio, the bytes as they are) or
HTTP/protobuf (`http.client`). Blocking calls, made by the exporter's own thread."""

from __future__ import annotations

import http.client
import logging
from typing import Protocol
from urllib.parse import urlsplit

from fleetgate.telemetry.retry import (
    RETRYABLE_GRPC,
    RETRYABLE_HTTP,
    grpc_retry_delay,
    retry_after,
)
from fleetgate.telemetry.settings import TelemetrySettings

log = logging.getLogger("fleetgate.telemetry")

TRACES, METRICS = "traces", "metrics"
_GRPC_METHODS = {
    TRACES: "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    METRICS: "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
}


class ExportFailed(Exception):
    """The collector did not take a request (unreachable, slow, or it refused it);
    `retryable` when it may take it later (`retry.py`), `after` the seconds it asked to
    wait first."""

    def __init__(self, reason: str, retryable: bool = False, after: float | None = None) -> None:
        super().__init__(reason)
        self.retryable = retryable
        self.after = after


class Transport(Protocol):
    def send(self, signal: str, body: bytes) -> None: ...

    def close(self) -> None: ...


class GrpcTransport:
    """OTLP/gRPC: the `Export` method of TraceService and MetricsService, fed the request's
    bytes (no serializer: they are protobuf already)."""

    def __init__(self, settings: TelemetrySettings) -> None:
        import grpc  # only a gateway that exports over gRPC loads it

        self._grpc = grpc
        url = urlsplit(
            settings.endpoint if "://" in settings.endpoint else "//" + settings.endpoint
        )
        target = f"{url.hostname}:{url.port or (443 if url.scheme == 'https' else 4317)}"
        if url.scheme == "https":
            self._channel = grpc.secure_channel(target, grpc.ssl_channel_credentials())
        else:
            self._channel = grpc.insecure_channel(target)
        self._calls = {
            signal: self._channel.unary_unary(method) for signal, method in _GRPC_METHODS.items()
        }
        self._metadata = settings.headers
        self._timeout = settings.timeout

    def send(self, signal: str, body: bytes) -> None:
        try:
            self._calls[signal](body, timeout=self._timeout, metadata=self._metadata)
        except self._grpc.RpcError as exc:
            name = exc.code().name  # type: ignore[attr-defined]
            details = None
            for key, value in exc.trailing_metadata() or ():  # type: ignore[attr-defined]
                if key == "grpc-status-details-bin" and isinstance(value, bytes):
                    details = value
            after = grpc_retry_delay(details)
            raise ExportFailed(name, name in RETRYABLE_GRPC, after) from None

    def close(self) -> None:
        self._channel.close()


class HttpTransport:
    """OTLP/HTTP with protobuf bodies: POST `<endpoint>/v1/traces` and `/v1/metrics`, on
    one kept-alive connection."""

    def __init__(self, settings: TelemetrySettings) -> None:
        url = urlsplit(settings.endpoint)
        self._https = url.scheme == "https"
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if self._https else 4318)
        base = url.path.rstrip("/")
        self._paths = {TRACES: f"{base}/v1/traces", METRICS: f"{base}/v1/metrics"}
        self._headers = {
            **dict(settings.headers),
            "Content-Type": "application/x-protobuf",
            "User-Agent": "fleetgate",
        }
        self._timeout = settings.timeout
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._conn = cls(self._host, self._port, timeout=self._timeout)
        return self._conn

    def send(self, signal: str, body: bytes) -> None:
        for retry in (False, True):  # a kept-alive connection the collector closed: once more
            conn = self._connection()
            try:
                conn.request("POST", self._paths[signal], body, self._headers)
                resp = conn.getresponse()
                resp.read()
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                if retry or isinstance(exc, TimeoutError):
                    # refused or reset: the collector may be back later; a deadline passed
                    # on one that is stuck is not waited for again
                    raise ExportFailed(
                        type(exc).__name__, isinstance(exc, ConnectionError)
                    ) from None
                continue
            if not 200 <= resp.status < 300:
                after = retry_after(resp.getheader("Retry-After"))
                raise ExportFailed(f"HTTP {resp.status}", resp.status in RETRYABLE_HTTP, after)
            return

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def transport_for(settings: TelemetrySettings) -> Transport:
    if settings.protocol == "grpc":
        return GrpcTransport(settings)
    return HttpTransport(settings)
