"""gRPC on the picker's HTTP/2 connections: length-prefixed messages each way, the status in
the trailers, calls dispatched by path to their service's handler, and the gRPC health
service (`grpc.health.v1.Health`: Check and Watch).

A call's handler is told `message(bytes)` for each request message, `end()` when the
client has sent its last, and `cancel()` when the call goes away unfinished; it answers
through the call: `send(bytes)` then `finish(status)`.
"""

from __future__ import annotations

import logging
import struct
import urllib.parse
from collections.abc import Callable
from typing import Protocol

from grpc_health.v1 import health_pb2

from fleetgate.epp.http2 import Http2Connection, literal_block

log = logging.getLogger("fleetgate.epp")

OK, UNKNOWN, NOT_FOUND, UNIMPLEMENTED, INTERNAL = 0, 2, 5, 12, 13
RESPONSE_HEADERS = literal_block([(b":status", b"200"), (b"content-type", b"application/grpc")])
TRAILERS_OK = literal_block([(b"grpc-status", b"0")])
_OK_ONLY = RESPONSE_HEADERS + TRAILERS_OK  # a call ended with OK before any message
_PREFIX = struct.Struct(">BI")  # a message's compressed flag and length


def _framed(messages: tuple[bytes, ...]) -> bytes:
    """gRPC messages as a DATA frame carries them: each uncompressed, after its length."""
    if len(messages) == 1:
        message = messages[0]
        return b"\0" + len(message).to_bytes(4, "big") + message
    return b"".join(b"\0" + len(m).to_bytes(4, "big") + m for m in messages)


def trailers(status: int, message: str = "") -> bytes:
    if status == OK and not message:
        return TRAILERS_OK
    fields = [(b"grpc-status", str(status).encode())]
    if message:
        quoted = urllib.parse.quote(message[:80], safe=" !#$&'()*+,/:;=?@[]~").encode()
        fields.append((b"grpc-message", quoted))
    return literal_block(fields)


class Handler(Protocol):
    def message(self, data: bytes) -> None: ...
    def end(self) -> None: ...
    def cancel(self) -> None: ...


class Call:
    """One gRPC call: an HTTP/2 stream with the client's metadata."""

    __slots__ = ("_buf", "_started", "conn", "done", "handler", "metadata", "stream_id")

    def __init__(self, conn: Http2Connection, stream_id: int, metadata: dict[bytes, bytes]):
        self.conn = conn
        self.stream_id = stream_id
        self.metadata = metadata
        self.handler: Handler = IGNORED
        self.done = False
        self._started = False
        self._buf = b""

    # ---- the HTTP/2 stream's side -------------------------------------------------------
    def data(self, chunk: bytes) -> None:
        if not self._buf and len(chunk) >= 5:  # most often: one whole message
            compressed, length = _PREFIX.unpack_from(chunk)
            if length == len(chunk) - 5 and not compressed:
                if not self.done:
                    try:
                        self.handler.message(chunk[5:])
                    except Exception:
                        log.exception("a gRPC call's message failed")
                        self.finish(INTERNAL, "the picker failed on this message")
                return
        if self._buf:
            chunk = self._buf + chunk
            self._buf = b""
        pos, size = 0, len(chunk)
        while size - pos >= 5:
            length = int.from_bytes(chunk[pos + 1 : pos + 5], "big")
            if size - pos - 5 < length:
                break
            if chunk[pos]:  # compressed: never asked for (no grpc-accept-encoding)
                self.finish(UNIMPLEMENTED, "compressed messages are not accepted")
                return
            message = chunk[pos + 5 : pos + 5 + length]
            pos += 5 + length
            if not self.done:
                try:
                    self.handler.message(message)
                except Exception:
                    log.exception("a gRPC call's message failed")
                    self.finish(INTERNAL, "the picker failed on this message")
        if pos < size:
            self._buf = chunk[pos:]

    def end(self) -> None:
        if not self.done:
            try:
                self.handler.end()
            except Exception:
                log.exception("a gRPC call's end failed")
                self.finish(INTERNAL, "the picker failed at the end of this call")

    def reset(self) -> None:
        if not self.done:
            self.done = True
            handler, self.handler = self.handler, IGNORED
            handler.cancel()

    # ---- the handler's side -----------------------------------------------------------
    def send(self, *messages: bytes) -> None:
        """Sends the messages, in one DATA frame when the peer's windows allow."""
        if self.done:
            return
        if not self._started:
            self._started = True
            self.conn.send_headers(self.stream_id, RESPONSE_HEADERS)
        self.conn.send_data(self.stream_id, _framed(messages))

    def answer(self, *messages: bytes) -> None:
        """Sends the messages and ends the call with OK: the whole answer in one write when
        the peer's windows allow."""
        if self.done:
            return
        self.done = True
        self.handler = IGNORED  # (see `finish`)
        head = b"" if self._started else RESPONSE_HEADERS
        self._started = True
        self.conn.send_whole(self.stream_id, head, _framed(messages), TRAILERS_OK)

    def finish(self, status: int = OK, message: str = "", lazy: bool = False) -> None:
        """Ends the call; `lazy`: the client waits for nothing from its end (its status may
        go out with the connection's next frames that are waited for)."""
        if self.done:
            return
        self.done = True
        # a done call tells its handler nothing more: it lets go of it, and the two (each
        # refers to the other) are freed with the stream, not left to the collector (the
        # picker's CPU a 20-chunk stream at 16 connections: a fifth less)
        self.handler = IGNORED
        if not self._started:  # trailers-only
            block = (
                _OK_ONLY
                if status == OK and not message
                else RESPONSE_HEADERS + trailers(status, message)
            )
        else:
            block = trailers(status, message)
        self.conn.send_headers(self.stream_id, block, end_stream=True, lazy=lazy)


class _Ignored:
    def message(self, data: bytes) -> None:
        pass

    def end(self) -> None:
        pass

    def cancel(self) -> None:
        pass


IGNORED = _Ignored()  # the handler of a call before its method's, and once it is done


# a method's handler, made for each call
Method = Callable[[Call], Handler]


class Dispatcher:
    """Opens each stream as a call of the method its path names."""

    def __init__(self, methods: dict[str, Method]) -> None:
        self.methods = {path.encode(): method for path, method in methods.items()}

    def __call__(self, conn: Http2Connection, stream_id: int, headers: dict[bytes, bytes]) -> Call:
        call = Call(conn, stream_id, headers)
        method = self.methods.get(headers.get(b":path", b""))
        if method is None:
            call.finish(UNIMPLEMENTED, "no such method")
        else:
            call.handler = method(call)
        return call


# ---- grpc.health.v1.Health --------------------------------------------------------------
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


class Health:
    """The status of each name a probe may ask about."""

    def __init__(self) -> None:
        self.statuses: dict[str, int] = {}
        self.watchers: dict[str, set[Call]] = {}

    def set(self, name: str, status: int) -> None:
        self.statuses[name] = status
        answer = health_pb2.HealthCheckResponse(status=status).SerializeToString()  # type: ignore[arg-type]
        for call in list(self.watchers.get(name, ())):
            call.send(answer)

    def methods(self) -> dict[str, Method]:
        return {
            "/grpc.health.v1.Health/Check": lambda call: _Check(self, call),
            "/grpc.health.v1.Health/Watch": lambda call: _Watch(self, call),
        }


class _Check:
    def __init__(self, health: Health, call: Call) -> None:
        self.health, self.call = health, call

    def message(self, data: bytes) -> None:
        name = health_pb2.HealthCheckRequest.FromString(data).service
        status = self.health.statuses.get(name)
        if status is None:
            self.call.finish(NOT_FOUND, "unknown service")
            return
        self.call.send(health_pb2.HealthCheckResponse(status=status).SerializeToString())  # type: ignore[arg-type]
        self.call.finish()

    def end(self) -> None:
        self.call.finish(UNKNOWN, "no request")

    def cancel(self) -> None:
        pass


class _Watch:
    def __init__(self, health: Health, call: Call) -> None:
        self.health, self.call = health, call
        self.name: str | None = None

    def message(self, data: bytes) -> None:
        if self.name is not None:
            return
        self.name = health_pb2.HealthCheckRequest.FromString(data).service
        self.health.watchers.setdefault(self.name, set()).add(self.call)
        status = self.health.statuses.get(self.name, SERVICE_UNKNOWN)
        self.call.send(health_pb2.HealthCheckResponse(status=status).SerializeToString())  # type: ignore[arg-type]

    def end(self) -> None:
        pass  # the client has asked; the answers go on until it goes

    def cancel(self) -> None:
        if self.name is not None:
            self.health.watchers.get(self.name, set()).discard(self.call)
