"""Minimal ASGI primitives for the hot path: read a body, send JSON, send a stream.

Written directly on ASGI (no framework) because a framework's per-request machinery
would cost about as much CPU as the whole gateway pipeline.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fleetgate.errors import GatewayError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

JSON = b"application/json"


def new_request_id() -> str:
    """Unique, not secret: microseconds then 44 random bits (the PRNG is seeded from the OS
    and reseeded after fork; no system call on the hot path). Ids that grow with time keep
    the request log's index on them append-only."""
    return f"{time.time_ns() // 1000:013x}{random.getrandbits(44):011x}"


class ClientDisconnected(Exception):
    """The client went away before its request body had arrived: nothing to answer."""


async def read_body(receive: Receive, limit: int) -> bytes:
    message = await receive()
    if message["type"] == "http.disconnect":
        raise ClientDisconnected
    body: bytes = message.get("body", b"")
    if not message.get("more_body"):
        if len(body) > limit:
            raise too_large(limit)
        return body
    parts = [body]
    size = len(body)
    while message.get("more_body"):
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        parts.append(chunk)
    return b"".join(parts)


def too_large(limit: int) -> GatewayError:
    """A body larger than the limit (one that did not declare its length beforehand)."""
    return GatewayError(
        "payload_too_large", f"The request body is larger than the {limit}-byte limit."
    )


async def send_body(
    send: Send, status: int, body: bytes, headers: Headers, content_type: bytes = JSON
) -> None:
    headers.append((b"content-type", content_type))
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# A scope key the connection layer (server/connections.py) sets to None when it will call
# the callable the app stores there once the client's connection is lost.
DISCONNECT_HOOK = "fleetgate.on_disconnect"


class DisconnectWatch:
    """Cancels the handling task when the client goes away before the response is done.

    Without it an abandoned request would keep its upstream request (and a GPU) busy.
    Behind fleetgate's own connection layer the connection calls it when it is lost (no
    task, no callback on the loop); behind another ASGI server a task waits on `receive()`.
    """

    __slots__ = ("_hooked", "_loop", "_owner", "_scope", "_task", "cancelled", "done")

    def __init__(self, receive: Receive, loop: asyncio.AbstractEventLoop, scope: Scope) -> None:
        # `loop` is the running loop, passed in: asking asyncio for it costs a getpid()
        # system call each time (its fork check), three per request here
        self.done = False
        self.cancelled = False
        self._loop = loop
        self._owner = asyncio.current_task(loop)
        self._scope = scope
        self._task: asyncio.Task[Message] | None = None
        self._hooked = DISCONNECT_HOOK in scope
        if self._hooked:
            scope[DISCONNECT_HOOK] = self._lost
            return
        # The body has been read, so the only message left is http.disconnect: a task on
        # receive() itself with a done-callback is the cheapest way to hear it.
        self._task = loop.create_task(receive())  # type: ignore[arg-type]
        self._task.add_done_callback(self._heard)

    def _lost(self) -> None:
        if not self.done and self._owner is not None:
            self.cancelled = True
            self._owner.cancel()

    def _heard(self, task: asyncio.Task[Message]) -> None:
        if task.cancelled() or task.exception() is not None or self.done:
            return
        if task.result()["type"] == "http.disconnect":
            self._lost()

    def finish(self) -> None:
        self.done = True
        if self._hooked:
            self._scope[DISCONNECT_HOOK] = None
            return
        assert self._task is not None
        if not self._task.done():
            # uvicorn answers the pending receive() with http.disconnect once the response is
            # complete, so the watcher normally ends by itself in this loop turn. Cancelling it
            # at once would leave a CancelledError-traceback-frame cycle per request for the
            # cyclic GC to find.
            self._loop.call_soon(self._reap)

    def _reap(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def absorb(self) -> None:
        """Called after a CancelledError this watch caused: clear it so the task ends well."""
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
