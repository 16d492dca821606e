"""The raw floor: a pass-through with no framework, for comparison only.

Server and client are `asyncio.Protocol`s on uvloop with the httptools parsers, nothing
else: read the request, swap the model name, send it upstream on a kept-alive connection,
swap the name back in the answer (a whole body with its length, a stream's bytes as they
come, re-framed as chunks). No routing, records, limits, metrics or headers beyond the
framing, no flow control. What `baseline.py` (uvicorn + aiohttp) costs above this is the
ASGI server's and the client library's per-request machinery; what this costs is the
event loop, the parser and the kernel.

Run: `python3 -m benchmarks.raw_floor --port 18093 --upstream http://127.0.0.1:18090`.
The models are `baseline.py`'s: `X` goes upstream as `X` with `bench-model` replaced by
`upstream-bench`, `bench-model-paced` to `/paced/v1/chat/completions`; `GET /readyz` is 200.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
from urllib.parse import urlsplit

import httptools

_MODEL = re.compile(rb'"model"\s*:\s*"([^"]{1,200})"')
READY_BODY = b'{"status":"ready"}'
_READY = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
    len(READY_BODY),
    READY_BODY,
)
_BAD = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_GONE = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def upstream_request(body: bytes, upstream_host: bytes) -> tuple[bytes, bytes, bytes, bytes] | None:
    """The upstream's request for a client's chat `body` (its model renamed): its head, its
    body, and the answer's model field as the upstream writes it and as the client gets it
    back. None: the body names no model."""
    match = _MODEL.search(body)
    if match is None:
        return None
    client_model = match.group(1)
    upstream_model = client_model.replace(b"bench-model", b"upstream-bench")
    body = body[: match.start(1)] + upstream_model + body[match.end(1) :]
    prefix = b"/paced" if client_model == b"bench-model-paced" else b""
    head = b"POST %s/v1/chat/completions HTTP/1.1\r\nHost: %s\r\n" % (prefix, upstream_host)
    head += b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    return head, body, b'"model":"' + upstream_model + b'"', b'"model":"' + client_model + b'"'


class Upstream:
    """Kept-alive connections to the upstream, unbounded, last used first."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.idle: list[UpstreamConnection] = []

    async def connection(self) -> UpstreamConnection:
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed:
                return conn
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(
            lambda: UpstreamConnection(self), self.host, self.port
        )
        return conn


class UpstreamConnection(asyncio.Protocol):
    def __init__(self, pool: Upstream) -> None:
        self.pool = pool
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.client: ClientConnection | None = None
        self.closed = False
        self.streaming = False
        self.body: list[bytes] = []
        self.content_type = b"application/json"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, client: ClientConnection, head: bytes, body: bytes) -> None:
        assert self.transport is not None
        self.client = client
        self.streaming = False
        self.body = []
        self.content_type = b"application/json"
        self.transport.write(head + body)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._fail()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail()

    def _fail(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            client.upstream_failed()
        if self.transport is not None:
            self.transport.close()

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-type":
            self.content_type = value

    def on_headers_complete(self) -> None:
        self.streaming = self.content_type.startswith(b"text/event-stream")
        if self.streaming and self.client is not None:
            self.client.start_stream(self.parser.get_status_code(), self.content_type)

    def on_body(self, body: bytes) -> None:
        client = self.client
        if client is None:
            return
        if self.streaming:
            client.stream_part(body)
        else:
            self.body.append(body)

    def on_message_complete(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            if self.streaming:
                client.end_stream()
            else:
                client.whole(self.parser.get_status_code(), self.content_type, b"".join(self.body))
        if self.parser.should_keep_alive() and not self.closed:
            self.pool.idle.append(self)
        elif self.transport is not None:
            self.transport.close()


class ClientConnection(asyncio.Protocol):
    def __init__(self, upstream: Upstream, upstream_host: bytes) -> None:
        self.upstream = upstream
        self.upstream_host = upstream_host
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body: list[bytes] = []
        self.old = self.new = b""  # the upstream's model name, and the client's

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._write(_BAD)
            self._close()

    def on_message_begin(self) -> None:
        self.url = b""
        self.body = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.parser.get_method() == b"GET":
            self._write(_READY)
            return
        sent = upstream_request(b"".join(self.body), self.upstream_host)
        if sent is None:
            self._write(_BAD)
            self._close()
            return
        head, body, self.old, self.new = sent
        asyncio.get_running_loop().create_task(self._forward(head, body))

    async def _forward(self, head: bytes, body: bytes) -> None:
        try:
            conn = await self.upstream.connection()
        except OSError:
            self.upstream_failed()
            return
        conn.send(self, head, body)

    # ---- from the upstream connection ---------------------------------------------------
    def whole(self, status: int, content_type: bytes, body: bytes) -> None:
        body = body.replace(self.old, self.new)
        self._write(
            b"HTTP/1.1 %d OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
            % (status, content_type, len(body), body)
        )

    def start_stream(self, status: int, content_type: bytes) -> None:
        self._write(
            b"HTTP/1.1 %d OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n"
            % (status, content_type)
        )

    def stream_part(self, data: bytes) -> None:
        # a name split across two reads stays unrewritten: good enough for a floor
        data = data.replace(self.old, self.new)
        self._write(b"%x\r\n%s\r\n" % (len(data), data))

    def end_stream(self) -> None:
        self._write(b"0\r\n\r\n")

    def upstream_failed(self) -> None:
        self._write(_GONE)
        self._close()

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def serve(host: str, port: int, upstream_url: str) -> None:
    upstream = Upstream(upstream_url)
    upstream_host = f"{upstream.host}:{upstream.port}".encode()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: ClientConnection(upstream, upstream_host),
        host,
        port,
        backlog=4096,
        reuse_address=True,
    )
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18093)
    parser.add_argument("--upstream", required=True, help="e.g. http://127.0.0.1:18090")
    parser.add_argument("--cpu", type=int, default=None, help="pin to this CPU")
    args = parser.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    import uvloop

    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(serve(args.host, args.port, args.upstream))


if __name__ == "__main__":
    main()
