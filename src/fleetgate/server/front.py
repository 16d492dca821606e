"""The gateway's own HTTP/1.1 server front: an `asyncio.Protocol` on the httptools parser.

A proxied request (`POST` to a path of `ingress/routes.py`) goes straight to the gateway's
`proxied` (server/app.py) with its whole body and its `FrontRequest` as the answer's
writer: no ASGI scope, `receive` or `send` messages, one task per request. Every other
path (the gateway's own endpoints, the admin API, the dashboard) runs the ASGI app through
`asgi_bridge.py`. A server runs the process around it (the listeners, the start, signals,
graceful shutdown): the gateway's own (`serving.py`) for one process, uvicorn's for
`--workers N`, which takes this class as its `http` protocol (`server/run.py`).

Per connection it keeps `limits.py`'s limits (header and body deadlines and the keep-alive
timer of `guard.py`, the early 413 for a declared length and a 413 for a chunked body
that outgrows the limit, the cap on open connections), HTTP/1.1 keep-alive, pipelining
(a request that arrives while one is answered waits, reading paused, until that one's
answer has ended), `Expect: 100-continue`, flow control both ways (a stream waits while
the client reads slower than the gateway writes), and a lost connection's cancellation of
its request (`FrontRequest.lost`).
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections import deque
from typing import Any

import httptools

from fleetgate.ingress.routes import INGRESS_ROUTES
from fleetgate.server.asgi_bridge import asgi_scope, run_asgi
from fleetgate.server.front_request import FrontRequest, Outbox
from fleetgate.server.guard import BODY, DONE, HEAD, ConnectionGuard
from fleetgate.server.limits import declared_too_large, limits_of, served_app
from fleetgate.web.asgi import DISCONNECT_HOOK, too_large

log = logging.getLogger("fleetgate")

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_INVALID = b"Invalid HTTP request received."
_BAD_REQUEST = (
    b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%b" % (len(_INVALID), _INVALID)
)


class _Shared:
    """What every connection of one server shares (kept on the server's state)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, app: Any) -> None:
        self.outbox = Outbox(loop)
        self.limits = limits_of(app)
        self.gateway = served_app(app, "proxied")  # None: every path goes through ASGI


def _shared(server_state: Any, loop: asyncio.AbstractEventLoop, app: Any) -> _Shared:
    shared = getattr(server_state, "fleetgate_front", None)
    if shared is None:
        shared = server_state.fleetgate_front = _Shared(loop, app)
    return shared  # type: ignore[no-any-return]


class FrontProtocol(ConnectionGuard, asyncio.Protocol):
    """One client connection (see the module docstring). Made by its server with the
    settings that hold the app, the server's state and the lifespan's state."""

    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if not config.loaded:
            config.load()
        self.app = config.loaded_app
        self.loop = _loop or asyncio.get_event_loop()
        self.server_state = server_state
        self.connections: set[Any] = server_state.connections
        self.tasks: set[asyncio.Task[None]] = server_state.tasks
        self.app_state = app_state
        shared = _shared(server_state, self.loop, self.app)
        self.outbox = shared.outbox
        self.limits = shared.limits
        self.gateway = shared.gateway
        self.parser = httptools.HttpRequestParser(self)
        # answer the first of pipelined requests even when the client closes after them
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.reading: FrontRequest | None = None  # the request being read
        self.current: FrontRequest | None = None  # the request being answered
        self.waiting: deque[FrontRequest] = deque()  # read, to be answered after it
        self.write_paused = False
        self._drained: asyncio.Future[None] | None = None
        self._phase = 0

    # ---- the connection -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.connections.add(self)
        self._admit(transport, len(self.connections))

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        self._stop_clocks()
        if self._phase == BODY:  # (a body refused as too large is not waited for)
            log.debug("a client went away before its request's body arrived")
        self.waiting.clear()
        # a request refers to its connection: the connection lets go of its requests (and of
        # its parser, below), so nothing of it is left in a cycle for the collector
        current, self.current, self.reading = self.current, None, None
        if current is not None and not current.complete:
            current.lost()
        self._wake_drain()
        # the parser holds this protocol's callbacks: the two were a cycle, left with the
        # transport to the collector (512 streams at once, each on a new connection: gen1
        # passes of 34 ms, and the peak RSS about 2 MB higher at each round)
        del self.parser

    def eof_received(self) -> None:
        return None  # the connection closes (as uvicorn's does)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        self._idle_since = None  # busy: the keep-alive timer finds it so
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # no protocol to switch to: the request is answered as plain HTTP
        except httptools.HttpParserError:
            self._refused = True
            self._disarm()
            if self.current is None:
                self.transport.write(_BAD_REQUEST)
            self.transport.close()
            return
        if not self._refused:
            self._after_read(self._phase, self.current is not None)

    # ---- the parser's callbacks -----------------------------------------------------------
    def on_message_begin(self) -> None:
        self.reading = FrontRequest(self)
        self._phase = HEAD

    def on_url(self, url: bytes) -> None:
        request = self.reading
        assert request is not None
        request.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        request = self.reading
        assert request is not None
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            request.expect_continue = True
        request.headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        request = self.reading
        assert request is not None
        parser = self.parser
        for name, value in request.headers:
            if name == b"content-length":
                declared = int(value)  # the parser has refused a malformed one
                if declared > self.limits.max_body_bytes:
                    self._refuse(413, declared_too_large(self.limits, declared))
                    return
                break
        request.method = method = parser.get_method()
        request.head_request = method == b"HEAD"
        version = parser.get_http_version()
        request.http_version = version
        request.keep_alive = version != "1.0" and parser.should_keep_alive()
        self._phase = BODY
        if request.expect_continue and self.current is None:
            self.transport.write(_CONTINUE)  # the client waits for it to send the body

    def on_body(self, body: bytes) -> None:
        request = self.reading
        if self._refused or request is None:
            return
        request.size += len(body)
        if request.size > self.limits.max_body_bytes:  # a chunked body that did not say
            self._phase = 0
            self._refuse(413, too_large(self.limits.max_body_bytes))
            return
        request.parts.append(body)

    def on_message_complete(self) -> None:
        request = self.reading
        if self._refused or request is None:
            return
        self.reading = None
        self._phase = DONE
        parts = request.parts
        request.body = parts[0] if len(parts) == 1 else b"".join(parts)
        request.parts = []
        if self.current is None:
            self._answer(request)
        else:  # pipelined: answered in order, once the one before has ended
            self.waiting.append(request)
            self.transport.pause_reading()

    # ---- answering ----------------------------------------------------------------------
    def _answer(self, request: FrontRequest) -> None:
        self.current = request
        url = request.url
        if url[:1] == b"/":
            raw_path, _, query = url.partition(b"?")
        else:  # the absolute form (`POST http://host/path`)
            parsed = httptools.parse_url(url)
            raw_path, query = parsed.path or b"/", parsed.query or b""
        try:
            path = raw_path.decode("ascii")
        except UnicodeDecodeError:
            self._refuse_bad_request()
            return
        if "%" in path:
            path = urllib.parse.unquote(path)
        gateway = self.gateway
        route = INGRESS_ROUTES.get(path) if request.method == b"POST" else None
        if route is not None and gateway is not None:
            request.scope = {
                "type": "http",
                "method": "POST",
                "path": path,
                "query_string": query,
                "headers": request.headers,
                DISCONNECT_HOOK: None,
            }
            coro = gateway.proxied(request.scope, route, request.body, request)
        else:
            request.scope = asgi_scope(request, path, raw_path, query)
            coro = run_asgi(self.app, request)
        task = self.loop.create_task(coro)
        task.add_done_callback(lambda done: self._handled(done, request))
        self.tasks.add(task)

    def _handled(self, task: asyncio.Task[None], request: FrontRequest) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a request's handling failed", exc_info=task.exception())
        if not (request.complete or request.disconnected):  # no whole answer will come
            request.lost()
            self.transport.close()

    def response_complete(self, request: FrontRequest) -> None:
        """The current request's answer has ended: the next one, or the keep-alive wait."""
        self.server_state.total_requests += 1
        if self.current is request:
            self.current = None
        transport = self.transport
        if not request.keep_alive:
            transport.close()
            return
        if transport.is_closing():
            return
        if self.waiting:
            self._answer(self.waiting.popleft())
            if not self.waiting:
                transport.resume_reading()
            return
        self._idle()

    # ---- flow control -------------------------------------------------------------------
    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        self._wake_drain()

    def _wake_drain(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    async def drain(self, request: FrontRequest) -> None:
        """Until the client has read enough of what was written (or has gone)."""
        request.flush()
        if not self.write_paused or request.disconnected:
            return
        if self._drained is None:
            self._drained = self.loop.create_future()
        await self._drained

    # ---- shutdown -----------------------------------------------------------------------
    def shutdown(self) -> None:
        """The server shuts down: an idle connection closes now, a busy one once its
        answer has ended."""
        current = self.current
        if current is None or current.complete:
            self.transport.close()
        else:
            current.keep_alive = False
            self.waiting.clear()

    # ---- answering without the app ------------------------------------------------------
    def _refuse_bad_request(self) -> None:
        self._refused = True
        self.current = None
        self.transport.write(_BAD_REQUEST)
        self.transport.close()

    # ---- what a refusal asks (guard.py) ------------------------------------------------
    def _answering(self) -> bool:
        current = self.current
        return current is not None and current.started and not current.complete

    def _refused_url(self) -> bytes:
        return self.reading.url if self.reading is not None else b""

    def _abandon(self) -> None:
        current = self.current
        if current is not None and not current.complete:
            current.lost()
