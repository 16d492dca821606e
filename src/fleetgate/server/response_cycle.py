"""How an answer leaves a connection: uvicorn's request/response cycle, except that an
answer of known length goes out in one write.

uvicorn writes an answer's status line and headers when the app starts it, and its body
when the app sends it: two system calls and two TCP segments for every JSON answer, and on
loopback the writer pays for the receiver's network stack each time. Here the head of an
answer with a `Content-Length` waits for its body, and both leave together. Streams, and
answers of unknown length, are written as they come, as uvicorn does.
"""

from __future__ import annotations

from collections.abc import Iterable

from uvicorn._types import ASGISendEvent
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    RequestResponseCycle,
)


class ResponseCycle(RequestResponseCycle):
    """uvicorn's cycle with a one-write answer (see the module docstring). The connection
    layer (server/connections.py) gives each request one. No access log line is written:
    the request log is the gateway's access log, and uvicorn's is off."""

    _held = b""  # the head of an answer of known length, until its body comes

    async def send(self, message: ASGISendEvent) -> None:
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            return
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(
                    f"Expected ASGI message 'http.response.start', but got '{kind}'."
                )
            self.response_started = True
            self.waiting_for_100_continue = False
            head = self._head(message["status"], message.get("headers", ()))  # type: ignore[typeddict-item]
            if self.chunked_encoding is False and self.expected_content_length > 0:
                self._held = head
            else:
                self.transport.write(head)
            return
        if self.response_complete or kind != "http.response.body":
            raise RuntimeError(
                f"Unexpected ASGI message '{kind}' sent, after response already completed."
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
        held = self._held
        if held:
            self._held = b""
            self.transport.writelines((held, data))  # one system call (writev)
        elif data:
            self.transport.write(data)
        if not more:
            if self.expected_content_length != 0:
                raise RuntimeError("Response content shorter than Content-Length")
            self.response_complete = True
            self.message_event.set()
            if not self.keep_alive:
                self.transport.close()
            self.on_response()

    def _head(self, status: int, headers: Iterable[tuple[bytes, bytes]]) -> bytes:
        """The status line and headers, checked; sets the answer's framing (length or
        chunked) and whether the connection stays open, as uvicorn does."""
        content = [STATUS_LINE[status]]
        says_close = False
        for raw_name, value in (*self.default_headers, *headers):
            if HEADER_RE.search(raw_name):
                raise RuntimeError("Invalid HTTP header name.")
            if HEADER_VALUE_RE.search(value):
                raise RuntimeError("Invalid HTTP header value.")
            name = raw_name.lower()
            if name == b"content-length" and self.chunked_encoding is None:
                self.expected_content_length = int(value.decode())
                self.chunked_encoding = False
            elif name == b"transfer-encoding" and value.lower() == b"chunked":
                self.expected_content_length = 0
                self.chunked_encoding = True
            elif name == b"connection" and b"close" in (
                token.strip().lower() for token in value.split(b",")
            ):
                self.keep_alive = False
                says_close = True
            content += (name, b": ", value, b"\r\n")
        if not self.keep_alive and not says_close:
            content.append(b"connection: close\r\n")
        if (
            self.chunked_encoding is None
            and self.scope["method"] != "HEAD"
            and status not in (204, 304)
        ):
            self.chunked_encoding = True
            content.append(b"transfer-encoding: chunked\r\n")
        content.append(b"\r\n")
        return b"".join(content)
