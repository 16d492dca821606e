"""One request on a connection of the gateway's own front (`front.py`): what was read of
it, and its answer.

The answer is written the way a proxied answer needs, without ASGI messages: `whole` (a
body of known length, head and body in one write), or `start`, `write` per part and `end`
(chunked). What a request sends during one turn of the event loop leaves at the turn's
end in one write, together with every other request's (the connection's `Outbox`): a
stream's head and its first events go together. A whole answer, a stream's end, and a
stream's later part that finds nothing waiting leave at once. Nothing waits longer than
the turn it was sent in. `write` returns whether the client reads slower than the
gateway writes: the caller then awaits `drain`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from fleetgate.server.response_head import response_head
from fleetgate.web.asgi import DISCONNECT_HOOK, JSON, DisconnectWatch, Headers, Message

_LAST_CHUNK = b"0\r\n\r\n"


class Outbox:
    """The requests with bytes waiting to be written: all of them leave at the end of the
    loop's turn, one write each, from one scheduled call."""

    __slots__ = ("_loop", "_waiting")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiting: list[FrontRequest] = []

    def add(self, request: FrontRequest) -> None:
        if not self._waiting:
            self._loop.call_soon(self._flush)
        self._waiting.append(request)

    def _flush(self) -> None:
        waiting, self._waiting = self._waiting, []
        for request in waiting:
            request.flush()


class Connection(Protocol):
    """What a request needs of its connection (`front.FrontProtocol`)."""

    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    server_state: Any  # the server's: `default_headers` (date, server), refreshed each second
    app_state: dict[str, Any]
    outbox: Outbox
    write_paused: bool

    async def drain(self, request: FrontRequest) -> None: ...

    def response_complete(self, request: FrontRequest) -> None: ...


async def _nothing_to_receive() -> Message:  # behind the hook nothing waits on receive()
    return {"type": "http.disconnect"}


class FrontRequest:
    """A request (its line, headers and whole body) and its answer's state."""

    __slots__ = (
        "_ended",
        "_length",
        "_pending",
        "body",
        "chunked",
        "complete",
        "conn",
        "disconnected",
        "expect_continue",
        "head_request",
        "headers",
        "http_version",
        "keep_alive",
        "method",
        "parts",
        "scope",
        "size",
        "started",
        "url",
    )
    writes_at_once = True  # `write` is a transport's write: safe from any callback

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.url = b""
        self.headers: Headers = []
        self.parts: list[bytes] = []  # the body as it arrives
        self.size = 0
        self.body = b""
        self.method = b""
        self.http_version = "1.1"
        self.keep_alive = True
        self.expect_continue = False
        self.head_request = False
        self.scope: dict[str, Any] = {}
        # the answer
        self.started = False
        self.complete = False
        self.disconnected = False
        self.chunked = False
        self._length = 0  # what a body of declared length still owes
        self._pending: list[bytes] | None = None  # waits for the turn's end
        self._ended: asyncio.Future[None] | None = None  # for the ASGI bridge's receive()

    # ---- what proxied answers call (server/reply.py's `Reply`) -------------------------
    async def whole(
        self, status: int, body: bytes, headers: Headers, content_type: bytes = JSON
    ) -> None:
        """An answer of known length, in one write."""
        headers.append((b"content-type", content_type))
        headers.append((b"content-length", b"%d" % len(body)))
        self.begin(status, headers)
        self.part(body, more=False)

    async def start(self, status: int, headers: Headers) -> None:
        self.begin(status, headers)

    def write(self, chunk: bytes) -> bool:
        """One more part of a started answer; True when the caller should `drain`.

        A part that finds nothing waiting (the head and the first events have left) is
        written at once: a relayed stream resumes once per upstream read and sends one
        part each time, so waiting for the turn's end would join nothing and cost the
        loop one more pass per part."""
        if self._pending is None and self.chunked and not (self.complete or self.disconnected):
            transport = self.conn.transport
            if chunk and not transport.is_closing():
                transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
        else:
            self.part(chunk, more=True)
        return self.conn.write_paused

    async def drain(self) -> None:
        await self.conn.drain(self)

    async def end(self) -> None:
        self.part(b"", more=False)

    def watch(self, loop: asyncio.AbstractEventLoop) -> DisconnectWatch:
        """What cancels the request's handling when its client goes away: the connection
        calls the hook it sets in the scope, no task waits."""
        return DisconnectWatch(_nothing_to_receive, loop, self.scope)

    # ---- the answer's bytes ---------------------------------------------------------------
    def begin(self, status: int, headers: Headers) -> None:
        if self.disconnected:
            return
        if self.started:
            raise RuntimeError("The response has started already.")
        head = response_head(
            status,
            (*self.conn.server_state.default_headers, *headers),
            head_request=self.head_request,
            keep_alive=self.keep_alive,
        )
        self.started = True
        self.keep_alive = head.keep_alive
        self.chunked = head.chunked
        self._length = head.length
        self._pending = [head.data]
        if self.chunked or not head.length:  # a length's body follows at once
            self.conn.outbox.add(self)

    def part(self, body: bytes, more: bool) -> None:
        if self.disconnected:
            return
        if not self.started or self.complete:
            raise RuntimeError("A body part outside a started, unfinished response.")
        if self.head_request:
            data = b""
            self._length = 0
        elif self.chunked:
            data = b"%x\r\n%b\r\n" % (len(body), body) if body else b""
            if not more:
                data += _LAST_CHUNK
        else:
            if len(body) > self._length:
                raise RuntimeError("Response content longer than Content-Length")
            self._length -= len(body)
            data = body
        if more:
            if data:
                pending = self._pending
                if pending is None:
                    self._pending = [data]
                    self.conn.outbox.add(self)
                else:
                    pending.append(data)
            return
        if self._length != 0:
            raise RuntimeError("Response content shorter than Content-Length")
        if data:
            if self._pending is None:
                self._pending = [data]
            else:
                self._pending.append(data)
        self.flush()
        self.complete = True
        self._wake()
        self.conn.response_complete(self)

    def flush(self) -> None:
        """Write what waits, in one system call."""
        pending = self._pending
        if pending is None:
            return
        self._pending = None
        transport = self.conn.transport
        if self.disconnected or transport.is_closing():
            return
        if len(pending) == 1:
            transport.write(pending[0])
        else:
            transport.writelines(pending)

    # ---- the connection's side --------------------------------------------------------
    def lost(self) -> None:
        """The client went away before the answer's end: the handling is cancelled."""
        self.disconnected = True
        self._pending = None
        self._wake()
        hook: Callable[[], None] | None = self.scope.get(DISCONNECT_HOOK)
        if hook is not None:
            hook()

    def _wake(self) -> None:
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(None)

    async def ended(self) -> None:
        """Until the answer has ended or the client has gone."""
        if self.complete or self.disconnected:
            return
        if self._ended is None:
            self._ended = self.conn.loop.create_future()
        await self._ended
