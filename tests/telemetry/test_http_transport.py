"""The OTLP/HTTP sender against collectors that answer in every shape HTTP/1.1 allows: a
kept-alive connection is reused, one the collector closes is opened again, chunked and
run-to-the-end bodies are read whole, an answer that comes in pieces is waited for, and a
refusal's status and `Retry-After` reach the retry logic. A real socket server on
loopback, read byte for byte."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from fleetgate.config.schema import TelemetryConfig
from fleetgate.telemetry.settings import TelemetrySettings, telemetry_settings
from fleetgate.telemetry.transport import METRICS, TRACES, ExportFailed, HttpTransport

OK_LENGTH = (
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/x-protobuf\r\n\r\nok"
)
OK_CLOSE = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
OK_CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
)
OK_TO_EOF = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n\r\nto the end"
BUSY = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 7\r\nContent-Length: 4\r\n\r\nbusy"
BAD = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 3\r\n\r\nbad"


class Collector(socketserver.ThreadingTCPServer):
    """Reads each request whole (head, then `Content-Length` bytes) and answers with the
    next of `answers`, written in `pieces` writes; closes after an answer that says so or
    that runs to the end."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, answers: list[bytes], pieces: int = 1) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answers = answers
        self.pieces = pieces
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []  # (head, body)
        self.lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/otlp"


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server: Collector = self.server  # type: ignore[assignment]
        with server.lock:
            server.connections += 1
        sock: socket.socket = self.request
        buffer = b""
        while True:
            while b"\r\n\r\n" not in buffer:
                data = sock.recv(65536)
                if not data:
                    return
                buffer += data
            head, buffer = buffer.split(b"\r\n\r\n", 1)
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            while len(buffer) < length:
                buffer += sock.recv(65536)
            body, buffer = buffer[:length], buffer[length:]
            with server.lock:
                server.requests.append((head, body))
                answer = server.answers.pop(0)
            step = max(1, len(answer) // server.pieces)
            for at in range(0, len(answer), step):
                sock.sendall(answer[at : at + step])
            if b"Connection: close" in answer or answer in (OK_TO_EOF,):
                sock.close()
                return


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector([])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _transport(endpoint: str, headers: tuple[tuple[str, str], ...] = ()) -> HttpTransport:
    settings = TelemetrySettings(
        endpoint=endpoint,
        protocol="http/protobuf",
        headers=headers,
        timeout=5.0,
        retries=5,
        retry_backoff=1.0,
        service_name="fleetgate",
        sample_ratio=1.0,
        parent_based=True,
        max_queue_spans=2048,
        export_interval=1.0,
        metrics_interval=60.0,
        resource=(),
    )
    return HttpTransport(settings)


def test_a_kept_alive_connection_carries_every_export(collector: Collector) -> None:
    collector.answers[:] = [OK_LENGTH, OK_CHUNKED, OK_LENGTH]
    collector.pieces = 5  # each answer in five writes: the sender waits for the rest
    transport = _transport(collector.endpoint, (("x-team", "blue"),))
    transport.send(TRACES, b"\x0a\x01a")
    transport.send(METRICS, b"")
    transport.send(TRACES, b"b" * 200_000)
    transport.close()
    assert collector.connections == 1
    heads = [head for head, _ in collector.requests]
    assert heads[0].startswith(b"POST /otlp/v1/traces HTTP/1.1\r\n")
    assert heads[1].startswith(b"POST /otlp/v1/metrics HTTP/1.1\r\n")
    assert b"\r\nx-team: blue" in heads[0]
    assert b"\r\nContent-Type: application/x-protobuf" in heads[0]
    assert f"\r\nHost: 127.0.0.1:{collector.server_address[1]}".encode() in heads[0]
    assert [body for _, body in collector.requests] == [b"\x0a\x01a", b"", b"b" * 200_000]


def test_a_collector_that_closes_after_each_answer_gets_a_new_connection(
    collector: Collector,
) -> None:
    collector.answers[:] = [OK_CLOSE, OK_TO_EOF, OK_LENGTH]
    transport = _transport(collector.endpoint)
    for _ in range(3):
        transport.send(TRACES, b"span")
    transport.close()
    assert len(collector.requests) == 3
    assert collector.connections == 3


def test_a_refusal_reports_its_status_and_retry_after_and_keeps_the_connection(
    collector: Collector,
) -> None:
    collector.answers[:] = [BUSY, BAD, OK_LENGTH]
    transport = _transport(collector.endpoint)
    with pytest.raises(ExportFailed) as busy:
        transport.send(TRACES, b"span")
    assert (str(busy.value), busy.value.retryable, busy.value.after) == ("HTTP 503", True, 7.0)
    with pytest.raises(ExportFailed) as bad:
        transport.send(TRACES, b"span")
    assert (str(bad.value), bad.value.retryable) == ("HTTP 400", False)
    transport.send(TRACES, b"span")
    transport.close()
    assert collector.connections == 1


def test_a_collector_gone_between_exports_is_dialled_again_once(collector: Collector) -> None:
    collector.answers[:] = [OK_LENGTH, OK_LENGTH]
    transport = _transport(collector.endpoint)
    transport.send(TRACES, b"one")
    assert transport._sock is not None
    transport._sock.shutdown(socket.SHUT_RDWR)  # as if the collector had dropped it
    transport.send(TRACES, b"two")
    transport.close()
    assert [body for _, body in collector.requests] == [b"one", b"two"]
    assert collector.connections == 2


def test_a_header_that_would_split_the_request_is_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = TelemetryConfig.model_validate(
        {"otlp": {"endpoint": "http://127.0.0.1:1", "headers": {"x-key": "a\r\nInjected: 1"}}}
    )
    env = {"OTEL_EXPORTER_OTLP_HEADERS": "x-other=b%0D%0AInjected%3A%201"}
    settings = telemetry_settings(config, env)
    assert settings is not None and settings.headers == ()
    assert "'x-key' holds a line break" in caplog.text
    assert "Injected" not in caplog.text
    config = TelemetryConfig.model_validate({"otlp": {"endpoint": "http://127.0.0.1:1"}})
    settings = telemetry_settings(config, env)
    assert settings is not None and settings.headers == ()
    assert "'x-other' holds a line break" in caplog.text
