"""The limits a connection facing untrusted clients keeps, whichever server front serves it
(`front.py`, or uvicorn's protocol in `connections.py`): the settings, the refusals they
answer, and how an answer without the app is written.

- A request's line and headers must arrive within `server.header_timeout_seconds` (counted
  from the connection's opening, or from the request's first byte on a kept-alive one): a
  slowloris or a silent connection gets 408 and is closed.
- Its body must arrive within `server.body_timeout_seconds` of the headers: 408.
- A `Content-Length` above `server.max_body_bytes` is answered 413 at once, before any of
  the body is read.
- At most `server.max_connections` connections are open per process; one more is answered
  503 and closed.
- A kept-alive connection idle for `server.keep_alive_seconds` is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from dataclasses import dataclass
from typing import Any

from fleetgate.config.schema import ServerConfig
from fleetgate.errors import GatewayError
from fleetgate.ingress.routes import error_protocol
from fleetgate.pipeline.error_shapes import error_body
from fleetgate.server.response_head import STATUS_LINE
from fleetgate.web.asgi import new_request_id

LINGER_SECONDS = 2.0  # how long a refused connection's further bytes are read and dropped


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout: float = 10.0
    body_timeout: float = 60.0
    max_connections: int = 2048
    max_body_bytes: int = 32 * 1024 * 1024
    keep_alive: float = 5.0

    @classmethod
    def of(cls, server: ServerConfig) -> ConnectionLimits:
        return cls(
            header_timeout=server.header_timeout_seconds,
            body_timeout=server.body_timeout_seconds,
            max_connections=server.max_connections,
            max_body_bytes=server.max_body_bytes,
            keep_alive=server.keep_alive_seconds,
        )


def served_app(app: Any, attribute: str) -> Any:
    """The first of `app` and the apps it wraps (uvicorn's middleware) with `attribute`."""
    for _ in range(8):
        if getattr(app, attribute, None) is not None:
            return app
        app = getattr(app, "app", None)
        if app is None:
            break
    return None


def limits_of(app: Any) -> ConnectionLimits:
    """The limits the served app declares (through any uvicorn middleware around it)."""
    found = served_app(app, "connection_limits")
    limits = getattr(found, "connection_limits", None)
    return limits if isinstance(limits, ConnectionLimits) else ConnectionLimits()


def declared_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the parser has already refused a malformed one
    return None


def no_delay(transport: asyncio.BaseTransport) -> None:
    """Send each write at once. asyncio sets TCP_NODELAY only on sockets made with
    IPPROTO_TCP, and a listening socket made with proto 0 accepts sockets without it: a
    response's head and body then wait for the client's delayed ACK (40 ms each)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def too_many_connections(limits: ConnectionLimits) -> GatewayError:
    return GatewayError(
        "server_busy",
        f"The gateway has {limits.max_connections} connections open, its "
        "limit (`server.max_connections`); retry shortly.",
        headers={"Retry-After": "1"},
    )


def declared_too_large(limits: ConnectionLimits, declared: int) -> GatewayError:
    return GatewayError(
        "payload_too_large",
        f"The declared body ({declared} bytes) is larger than the "
        f"{limits.max_body_bytes}-byte limit (`server.max_body_bytes`).",
    )


def timed_out(limits: ConnectionLimits, head: bool) -> GatewayError:
    what = "headers" if head else "body"
    seconds = limits.header_timeout if head else limits.body_timeout
    setting = "header_timeout_seconds" if head else "body_timeout_seconds"
    return GatewayError(
        "request_timeout",
        f"The request's {what} did not arrive within {seconds:g} s "
        f"(`server.{setting}`); send the request at once.",
    )


def refusal_bytes(status: int, exc: GatewayError, raw_url: bytes) -> bytes:
    """A refusal answered by the connection itself, in the error shape of the path's
    protocol; it closes the connection."""
    raw_path = raw_url.split(b"?", 1)[0]
    body = error_body(error_protocol(raw_path.decode("latin-1")), exc)
    head = [
        STATUS_LINE[status],
        b"content-type: application/json\r\n",
        b"content-length: %d\r\n" % len(body),
        b"connection: close\r\n",
        b"x-request-id: " + new_request_id().encode() + b"\r\n",
    ]
    head += [f"{k.lower()}: {v}\r\n".encode() for k, v in exc.headers.items()]
    return b"".join([*head, b"\r\n", body])


def close_refused(transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
    """Close a connection whose refusal was written: a lingering close, which ends our
    side after the answer and drops what the client still sends, for a moment. Closing at
    once would answer its next bytes with a reset, which can destroy the answer before the
    client has read it."""
    if not transport.can_write_eof():
        transport.close()
        return
    transport.write_eof()
    loop.call_later(LINGER_SECONDS, transport.close)
