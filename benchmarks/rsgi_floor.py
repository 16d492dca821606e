"""The RSGI floor: the raw floor's pass-through on granian's Rust HTTP server, for comparison.

granian parses and writes HTTP in Rust and calls a Python app per request through RSGI,
its low-overhead interface. The app does what `raw_floor.py` does, with its upstream client
(`Upstream`, an `asyncio.Protocol` on httptools): rename the model, send the body upstream
on a kept-alive connection, rename it back in the answer, a stream's bytes as they come.
What this costs above the raw floor is granian's per-request hand-over to Python and back:
the least a Python gateway on a Rust server front pays before any work of its own.

Run: `granian --interface rsgi --workers 1 --runtime-mode st --runtime-threads 1
--loop uvloop --no-ws --port 18094 benchmarks.rsgi_floor:app` with `RSGI_UPSTREAM`
(default http://127.0.0.1:18090) in the environment, or `RSGI=1` in `benchmarks.run`.
Needs `pip install granian` (a benchmark's own install, not one of fleetgate's).
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from typing import Any

from benchmarks.raw_floor import READY_BODY, Upstream, upstream_request

_JSON = [("content-type", "application/json")]

_upstream = Upstream(os.environ.get("RSGI_UPSTREAM", "http://127.0.0.1:18090"))
_upstream_host = f"{_upstream.host}:{_upstream.port}".encode()


class _Answer:
    """What the upstream connection hands its client (`raw_floor.ClientConnection`'s
    calls), kept for the app: the head once it comes, then a stream's parts."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.head: asyncio.Future[tuple[int, bytes, bytes | None]] = loop.create_future()
        self.parts: deque[bytes | None] = deque()
        self.more: asyncio.Future[None] | None = None

    def whole(self, status: int, content_type: bytes, body: bytes) -> None:
        self.head.set_result((status, content_type, body))

    def start_stream(self, status: int, content_type: bytes) -> None:
        self.head.set_result((status, content_type, None))

    def stream_part(self, data: bytes) -> None:
        self._put(data)

    def end_stream(self) -> None:
        self._put(None)

    def upstream_failed(self) -> None:
        if not self.head.done():
            self.head.set_result((502, b"text/plain", b""))
        else:
            self._put(None)

    def _put(self, part: bytes | None) -> None:
        self.parts.append(part)
        if self.more is not None and not self.more.done():
            self.more.set_result(None)


async def app(scope: Any, proto: Any) -> None:
    if scope.method == "GET":
        proto.response_bytes(200, _JSON, READY_BODY)
        return
    sent = upstream_request(await proto(), _upstream_host)
    if sent is None:
        proto.response_empty(400, [])
        return
    head, body, old, new = sent
    answer = _Answer()
    try:
        conn = await _upstream.connection()
    except OSError:
        proto.response_empty(502, [])
        return
    conn.send(answer, head, body)  # type: ignore[arg-type]  # the client's calls, duck-typed
    status, content_type, whole = await answer.head
    headers = [("content-type", content_type.decode("latin-1"))]
    if whole is not None:
        proto.response_bytes(status, headers, whole.replace(old, new))
        return
    transport = proto.response_stream(status, headers)
    parts = answer.parts
    while True:
        if not parts:
            answer.more = asyncio.get_running_loop().create_future()
            await answer.more
        part = parts.popleft()
        if part is None:
            return
        await transport.send_bytes(part.replace(old, new))
