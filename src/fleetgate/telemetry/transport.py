"""Sends encoded OTLP requests to the collector: gRPC (grpcio, the bytes as they are) or
HTTP/protobuf (a socket and httptools). Blocking calls, made by the exporter's own thread."""

from __future__ import annotations

import logging
import socket
import ssl
from typing import Protocol
from urllib.parse import urlsplit

import httptools

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


class _Answer:
    """The collector's answers on one connection as httptools reads them, one after the
    other: the last one's status and `Retry-After`, whether the connection stays open after
    it, and how far it has come (its head read, whole)."""

    __slots__ = ("headed", "keep", "parser", "retry_after", "status", "whole")

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.next()

    def next(self) -> None:
        """Ready for the connection's next answer."""
        self.status = 0
        self.retry_after: bytes | None = None
        self.keep = False
        self.headed = False
        self.whole = False

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"retry-after":
            self.retry_after = value

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep = self.parser.should_keep_alive()  # read now: the parser resets at the end
        self.headed = True

    def on_message_complete(self) -> None:
        self.whole = True


class HttpTransport:
    """OTLP/HTTP with protobuf bodies: POST `<endpoint>/v1/traces` and `/v1/metrics`, on
    one kept-alive connection. The request is written in one `sendall` and the answer read
    by httptools (the parser the gateway's own HTTP paths use): `http.client` cost about
    110 µs of CPU an export, mostly building and parsing headers, against about 15."""

    def __init__(self, settings: TelemetrySettings) -> None:
        url = urlsplit(settings.endpoint)
        self._https = url.scheme == "https"
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if self._https else 4318)
        base = url.path.rstrip("/")
        authority = self._host if ":" not in self._host else f"[{self._host}]"
        if url.port is not None:
            authority += f":{url.port}"
        fixed = [
            ("Host", authority),
            *settings.headers,
            ("Content-Type", "application/x-protobuf"),
            ("User-Agent", "fleetgate"),
        ]
        lines = "".join(f"{k}: {v}\r\n" for k, v in fixed)
        self._heads = {
            signal: f"POST {base}/v1/{signal} HTTP/1.1\r\n{lines}Content-Length: ".encode("latin-1")
            for signal in (TRACES, METRICS)
        }
        self._timeout = settings.timeout
        self._sock: socket.socket | None = None
        self._answer = _Answer()

    def _connection(self) -> socket.socket:
        if self._sock is None:
            self._answer = _Answer()
            sock = socket.create_connection((self._host, self._port), self._timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._https:
                context = ssl.create_default_context()
                sock = context.wrap_socket(sock, server_hostname=self._host)
            self._sock = sock
        return self._sock

    def send(self, signal: str, body: bytes) -> None:
        for retry in (False, True):  # a kept-alive connection the collector closed: once more
            try:
                sock = self._connection()
                sock.sendall(b"%b%d\r\n\r\n%b" % (self._heads[signal], len(body), body))
                answer = self._read(sock)
            except (OSError, httptools.HttpParserError) as exc:
                self.close()
                if retry or isinstance(exc, TimeoutError):
                    # refused or reset: the collector may be back later; a deadline passed
                    # on one that is stuck is not waited for again
                    raise ExportFailed(
                        type(exc).__name__, isinstance(exc, ConnectionError)
                    ) from None
                continue
            if not answer.keep:
                self.close()
            status = answer.status
            if not 200 <= status < 300:
                raw = answer.retry_after
                after = retry_after(raw.decode("latin-1") if raw is not None else None)
                raise ExportFailed(f"HTTP {status}", status in RETRYABLE_HTTP, after)
            return

    def _read(self, sock: socket.socket) -> _Answer:
        answer = self._answer
        answer.next()
        while not answer.whole:
            data = sock.recv(65536)
            if not data:
                if answer.headed:  # a body that runs to the connection's end: it ended
                    answer.keep = False
                    return answer
                raise ConnectionResetError("the collector closed the connection")
            answer.parser.feed_data(data)
        return answer

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def transport_for(settings: TelemetrySettings) -> Transport:
    if settings.protocol == "grpc":
        return GrpcTransport(settings)
    return HttpTransport(settings)
