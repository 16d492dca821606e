"""The HTTP/1.1 connection layer: uvicorn's httptools protocol with the limits that a server
facing untrusted clients needs and uvicorn does not have.

- A request's line and headers must arrive within `server.header_timeout_seconds` (counted
  from the connection's opening, or from the request's first byte on a kept-alive one): a
  slowloris or a silent connection gets 408 and is closed.
- Its body must arrive within `server.body_timeout_seconds` of the headers: 408.
- A `Content-Length` above `server.max_body_bytes` is answered 413 at once, before any of
  the body is read.
- At most `server.max_connections` connections are open per process; one more is answered
  503 and closed.
- A kept-alive connection idle for `server.keep_alive_seconds` is closed, by one timer per
  connection that re-arms itself while the connection is busy: uvicorn made a timer when
  each response ended and cancelled it when the next request arrived (~2 µs a request).
- A lost connection cancels the handling of its request at once, through a hook the app
  sets in the request's scope (`asgi.DISCONNECT_HOOK`): no task per request waits for it.
- What a response sends in one turn of the loop leaves in one write (`response_cycle.py`).

All of it costs nothing on the common path: timers are armed only while a request's head
or body is incomplete after a read, which a client that sends its request at once never
sees. `fleetgate serve` and the test harness both serve through
`server/run.py`'s `uvicorn_config`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from fleetgate.config.schema import ServerConfig
from fleetgate.errors import GatewayError
from fleetgate.ingress.routes import error_protocol
from fleetgate.pipeline.error_shapes import error_body
from fleetgate.server.response_cycle import ResponseCycle
from fleetgate.web.asgi import DISCONNECT_HOOK, new_request_id

_LINGER_SECONDS = 2.0  # how long a refused connection's further bytes are read and dropped
_HEAD, _BODY, _DONE = 1, 2, 3  # where the current request stands (0: none begun yet)


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


def limits_of(app: Any) -> ConnectionLimits:
    """The limits the served app declares (through any uvicorn middleware around it)."""
    for _ in range(8):
        limits = getattr(app, "connection_limits", None)
        if isinstance(limits, ConnectionLimits):
            return limits
        app = getattr(app, "app", None)
        if app is None:
            break
    return ConnectionLimits()


def _declared_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the parser has already refused a malformed one
    return None


def _no_delay(transport: asyncio.Transport) -> None:
    """Send each write at once. asyncio sets TCP_NODELAY only on sockets made with
    IPPROTO_TCP, and a listening socket made with proto 0 accepts sockets without it: a
    response's head and body then wait for the client's delayed ACK (40 ms each)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol plus header and body deadlines, an early 413 and a cap
    on open connections (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits_of(self.app)
        self._phase = 0
        self._deadline: asyncio.TimerHandle | None = None
        self._deadline_for = 0  # the phase the armed deadline guards
        self._refused = False
        self._idle_since: float | None = None  # when the last response ended; None: busy

    # ---- the connection ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        _no_delay(transport)
        if len(self.connections) > self.limits.max_connections:
            self._refuse(
                503,
                GatewayError(
                    "server_busy",
                    f"The gateway has {self.limits.max_connections} connections open, its "
                    "limit (`server.max_connections`); retry shortly.",
                    headers={"Retry-After": "1"},
                ),
            )
            return
        self._arm(_HEAD, self.limits.header_timeout)  # a silent connection is a slow one

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
        super().connection_lost(exc)
        self._tell_app()

    def _tell_app(self) -> None:
        """The current request's client is gone: call what the app hooked on it (the
        cancellation of its handling, `asgi.DisconnectWatch`)."""
        cycle = self.cycle
        if cycle is not None and cycle.disconnected:
            hook = cycle.scope.get(DISCONNECT_HOOK)
            if hook is not None:
                hook()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        phase = self._phase
        if phase == _HEAD:
            if self._deadline_for != _HEAD:
                self._arm(_HEAD, self.limits.header_timeout)
        elif phase == _BODY:
            if self._deadline_for != _BODY:
                self._arm(_BODY, self.limits.body_timeout)
        elif phase == _DONE and not (self.cycle is not None and self.cycle.response_complete):
            self._disarm()  # the app has the whole request; it may take its time
        elif self._deadline is None:
            self._arm(_HEAD, self.limits.header_timeout)  # bytes that begin no request

    # ---- the parser's callbacks ---------------------------------------------------------
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._phase = _HEAD

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        declared = _declared_length(self.headers)
        if declared is not None and declared > self.limits.max_body_bytes:
            self._refuse(
                413,
                GatewayError(
                    "payload_too_large",
                    f"The declared body ({declared} bytes) is larger than the "
                    f"{self.limits.max_body_bytes}-byte limit (`server.max_body_bytes`).",
                ),
            )
            return
        super().on_headers_complete()
        cycle = self.cycle
        if type(cycle) is RequestResponseCycle:
            # uvicorn has just built its cycle; the task that runs the app on it starts at
            # the loop's next turn, so the answer can still go through ours (joined writes)
            cycle.__class__ = ResponseCycle
            cycle.loop = self.loop
        self._phase = _BODY
        # the app may hook its disconnect handling here (before it runs: its task starts
        # at the loop's next turn)
        self.scope[DISCONNECT_HOOK] = None  # type: ignore[literal-required]

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        super().on_message_complete()
        self._phase = _DONE

    # ---- keep-alive ---------------------------------------------------------------------
    def _unset_keepalive_if_required(self) -> None:
        """uvicorn calls this when bytes arrive: the connection is busy. Its keep-alive
        timer stays armed (`_keep_alive_check` then finds it busy)."""
        self._idle_since = None

    def on_response_complete(self) -> None:
        """uvicorn's, but for the keep-alive timer: armed only when none is."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:  # a pipelined request waits: start it
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self._idle_since = now = self.loop.time()
        if self.timeout_keep_alive_task is None:
            self.timeout_keep_alive_task = self.loop.call_at(
                now + self.limits.keep_alive, self._keep_alive_check
            )

    def _keep_alive_check(self) -> None:
        """Close the connection if it has been idle for the keep-alive time, else wait for
        when it may have been (a busy one is armed again when its response ends)."""
        self.timeout_keep_alive_task = None
        since = self._idle_since
        if since is None or self.transport.is_closing():
            return
        due = since + self.limits.keep_alive
        if self.loop.time() < due:
            self.timeout_keep_alive_task = self.loop.call_at(due, self._keep_alive_check)
        else:
            self.transport.close()

    # ---- deadlines ----------------------------------------------------------------------
    def _arm(self, phase: int, seconds: float) -> None:
        self._disarm()
        self._deadline_for = phase
        self._deadline = self.loop.call_later(seconds, self._expired, phase)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._deadline_for = 0

    def _expired(self, phase: int) -> None:
        self._deadline = None
        self._deadline_for = 0
        if self.transport.is_closing():
            return
        what = "headers" if phase == _HEAD else "body"
        seconds = self.limits.header_timeout if phase == _HEAD else self.limits.body_timeout
        setting = "header_timeout_seconds" if phase == _HEAD else "body_timeout_seconds"
        self._refuse(
            408,
            GatewayError(
                "request_timeout",
                f"The request's {what} did not arrive within {seconds:g} s "
                f"(`server.{setting}`); send the request at once.",
            ),
        )

    # ---- answering without the app ------------------------------------------------------
    def _refuse(self, status: int, exc: GatewayError) -> None:
        """Answer `exc` (when no response is under way) and close the connection."""
        self._refused = True
        self._disarm()
        cycle = self.cycle
        busy = cycle is not None and cycle.response_started and not cycle.response_complete
        if not busy:
            raw_path = getattr(self, "url", b"").split(b"?", 1)[0]
            body = error_body(error_protocol(raw_path.decode("latin-1")), exc)
            head = [
                STATUS_LINE[status],
                b"content-type: application/json\r\n",
                b"content-length: %d\r\n" % len(body),
                b"connection: close\r\n",
                b"x-request-id: " + new_request_id().encode() + b"\r\n",
            ]
            head += [f"{k.lower()}: {v}\r\n".encode() for k, v in exc.headers.items()]
            self.transport.write(b"".join([*head, b"\r\n", body]))
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app, if it waits on the body, hears it at once
            cycle.message_event.set()
            self._tell_app()
        if busy or not self.transport.can_write_eof():
            self.transport.close()
            return
        # A lingering close: end our side after the answer and drop what the client still
        # sends, for a moment. Closing at once would answer its next bytes with a reset,
        # which can destroy the answer before the client has read it.
        self.transport.write_eof()
        self.loop.call_later(_LINGER_SECONDS, self.transport.close)
