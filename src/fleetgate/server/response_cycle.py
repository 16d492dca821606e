"""How an answer leaves a connection: uvicorn's request/response cycle, with the writes of
one loop turn joined into one.

uvicorn writes an answer's status line and headers when the app starts it, each body part
when the app sends it, and a stream's last chunk marker on its own: a system call and a TCP
segment each, and on loopback the writer pays for the receiver's network stack every time.
Here what a response sends during one turn of the event loop leaves in one write (`writev`)
at the turn's end, or at once when the response ends: a JSON answer is one write, and a
stream whose first events are at hand goes out with its head. Nothing waits longer than the
turn it was sent in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from uvicorn._types import ASGISendEvent
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from fleetgate.server.response_head import response_head


class ResponseCycle(RequestResponseCycle):
    """uvicorn's cycle with joined writes (see the module docstring). The connection layer
    (server/connections.py) gives each request one and sets `loop`. No access log line is
    written: the request log is the gateway's access log, and uvicorn's is off."""

    loop: asyncio.AbstractEventLoop | None = None
    _pending: list[bytes] | None = None  # written at the turn's end, or with the last part
    _flush_soon = False  # a call at the turn's end is scheduled

    async def send(self, message: ASGISendEvent) -> None:
        if self.flow.write_paused and not self.disconnected:
            self._flush()
            await self.flow.drain()
        if self.disconnected:
            return
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"Expected 'http.response.start', got '{kind}'.")
            self.response_started = True
            self.waiting_for_100_continue = False
            head = self._head(message["status"], message.get("headers", ()))  # type: ignore[typeddict-item]
            # an answer of known length sends its body next: no need to schedule a flush
            self._queue(
                head, soon=not (self.chunked_encoding is False and self.expected_content_length)
            )
            return
        if self.response_complete or kind != "http.response.body":
            raise RuntimeError(
                f"Unexpected ASGI message '{kind}': the response has started or ended."
            )
        body: bytes = message.get("body", b"")  # type: ignore[assignment]
        more = message.get("more_body", False)
        if self.scope["method"] == "HEAD":
            self.expected_content_length = 0
            data = b""
        elif self.chunked_encoding:
            data = b"%x\r\n%b\r\n" % (len(body), body) if body else b""
            if not more:
                data += b"0\r\n\r\n"
        else:
            if len(body) > self.expected_content_length:
                raise RuntimeError("Response content longer than Content-Length")
            self.expected_content_length -= len(body)
            data = body
        if more:
            if data:
                self._queue(data, soon=True)
            return
        if self.expected_content_length != 0:
            raise RuntimeError("Response content shorter than Content-Length")
        if data:
            self._queue(data, soon=False)
        self._flush()
        self.response_complete = True
        self.message_event.set()
        if not self.keep_alive:
            self.transport.close()
        self.on_response()

    def _queue(self, data: bytes, soon: bool) -> None:
        if self._pending is None:
            self._pending = [data]
        else:
            self._pending.append(data)
        if soon and not self._flush_soon:
            self._flush_soon = True
            (self.loop or asyncio.get_running_loop()).call_soon(self._flush)

    def _flush(self) -> None:
        """Write what waits, in one system call."""
        self._flush_soon = False
        pending = self._pending
        if not pending:
            return
        self._pending = None
        if self.disconnected or self.transport.is_closing():  # the app failed, or the client left
            return
        if len(pending) == 1:
            self.transport.write(pending[0])
        else:
            self.transport.writelines(pending)

    def _head(self, status: int, headers: Iterable[tuple[bytes, bytes]]) -> bytes:
        """The status line and headers, checked; sets the answer's framing (length or
        chunked) and whether the connection stays open, as uvicorn does."""
        head = response_head(
            status,
            (*self.default_headers, *headers),
            head_request=self.scope["method"] == "HEAD",
            keep_alive=self.keep_alive,
        )
        self.keep_alive = head.keep_alive
        self.chunked_encoding = head.chunked
        self.expected_content_length = head.length
        return head.data
