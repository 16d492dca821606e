"""Where a proxied request's answer goes (`proxy.py`), whichever front serves it: the
gateway's own (`front_request.FrontRequest`) or an ASGI server (`AsgiReply`, over the
app's `send`).

A stream's parts go through `write`, which is not a coroutine: it returns whether the
caller must await `drain` before the next part (the client reads slower than the gateway
writes, or, behind ASGI, every part is sent by `drain`). A relayed event costs no
coroutine call of the front's; on the gateway's own front (`writes_at_once`) a plain
relay calls `write` from the upstream connection's callback, and costs no task wake-up
either.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from fleetgate.web.asgi import (
    JSON,
    DisconnectWatch,
    Headers,
    Receive,
    Scope,
    Send,
    send_body,
)


class Reply(Protocol):
    # whether `write` may be called from any callback of the loop, not only by the task
    # that answers (a relay then writes each upstream read's events as it arrives)
    writes_at_once: bool

    async def whole(
        self, status: int, body: bytes, headers: Headers, content_type: bytes = JSON
    ) -> None:
        """An answer of known length (its content type and length are added)."""

    async def start(self, status: int, headers: Headers) -> None:
        """The head of a streamed answer."""

    def write(self, chunk: bytes) -> bool:
        """One more part of it; True when the caller must await `drain` next."""

    async def drain(self) -> None: ...

    async def end(self) -> None:
        """The streamed answer's end."""

    def watch(self, loop: asyncio.AbstractEventLoop) -> DisconnectWatch:
        """What cancels the request's handling when its client goes away."""


class AsgiReply:
    """A `Reply` behind an ASGI server: each call is an ASGI message."""

    __slots__ = ("_part", "receive", "scope", "send")
    writes_at_once = False  # each part is an ASGI message, sent by `drain`

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope = scope
        self.receive = receive
        self.send = send
        self._part = b""

    async def whole(
        self, status: int, body: bytes, headers: Headers, content_type: bytes = JSON
    ) -> None:
        await send_body(self.send, status, body, headers, content_type)

    async def start(self, status: int, headers: Headers) -> None:
        await self.send({"type": "http.response.start", "status": status, "headers": headers})

    def write(self, chunk: bytes) -> bool:
        self._part = chunk
        return True  # `drain` sends it

    async def drain(self) -> None:
        part, self._part = self._part, b""
        await self.send({"type": "http.response.body", "body": part, "more_body": True})

    async def end(self) -> None:
        await self.send({"type": "http.response.body", "body": b""})

    def watch(self, loop: asyncio.AbstractEventLoop) -> DisconnectWatch:
        return DisconnectWatch(self.receive, loop, self.scope)
