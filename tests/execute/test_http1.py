"""The proxied path's HTTP/1.1 client (execute/http1.py) against scripted servers on
loopback: what it reuses, how it reads every framing, and every way an exchange can fail."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import random
import socket
import struct
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from fleetgate.execute.http1 import (
    ConnectFailed,
    ConnectionBroken,
    Http1Pool,
    ReadTimedOut,
    Timeouts,
    UpstreamResponse,
)
from tests.harness import until

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
QUICK = Timeouts(connect=2.0, read=2.0, total=5.0)


class Scripted:
    """A server whose every connection runs `handler`; counts connections."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[Scripted]]]:
    started: list[Scripted] = []

    async def start(handler: Handler) -> Scripted:
        s = Scripted(handler)
        s.server = await asyncio.start_server(s._serve, "127.0.0.1", 0)
        started.append(s)
        return s

    yield start
    for s in started:
        assert s.server is not None
        s.server.close()


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One request's head and body (by its Content-Length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head, await reader.readexactly(length)


def answer(body: bytes, *extra: bytes) -> bytes:
    head = [b"HTTP/1.1 200 OK", b"Content-Length: %d" % len(body), *extra]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


async def test_kept_alive_connections_are_reused_and_the_request_is_well_formed(serve) -> None:
    seen: list[tuple[bytes, bytes]] = []

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head, body = await read_request(reader)
            seen.append((head, body))
            writer.write(answer(b"got " + body, b"Content-Type: application/json"))

    server = await serve(echo)
    pool = Http1Pool(server.url + "/v1", limit=4, idle_seconds=30)
    for i in range(3):
        resp = await pool.request(
            "POST", server.url + "/v1/chat?x=1", {"Authorization": "Bearer k"}, b"%d" % i, QUICK
        )
        assert (resp.status, resp.headers["content-type"]) == (200, "application/json")
        assert await resp.read() == b"got %d" % i
        resp.close()  # after the whole answer was read: the connection is pooled already
    assert server.connections == 1
    head = seen[0][0].decode()
    assert head.startswith("POST /v1/chat?x=1 HTTP/1.1\r\n")
    assert f"Host: {server.url.removeprefix('http://')}\r\n" in head
    assert "Authorization: Bearer k\r\n" in head and "Content-Length: 1\r\n" in head
    assert "cookie" not in head.lower() and "user-agent" not in head.lower()
    await pool.close()


async def test_a_chunked_answer_is_read_as_it_arrives(serve) -> None:
    sent_last = asyncio.Event()
    got_first = asyncio.Event()

    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await writer.drain()
        # the rest only once the client has the first chunk: a client that held chunks
        # back until the end would wait here until its read timeout
        await got_first.wait()
        writer.write(b"4\r\nlast\r\n0\r\n\r\n")
        sent_last.set()
        await reader.read()

    server = await serve(chunked)
    pool = Http1Pool(server.url, limit=4, idle_seconds=30)
    resp = await pool.request("POST", server.url + "/s", {}, b"{}", QUICK)
    got = []
    while chunk := await resp.read_some():
        got.append((chunk, sent_last.is_set()))
        got_first.set()
    assert got == [(b"first", False), (b"last", True)]
    assert len(pool._idle) == 1  # read to its end: kept
    await pool.close()


async def test_a_body_ended_by_the_close_and_a_gzipped_one(serve) -> None:
    packed = gzip.compress(b'{"ok": true}' * 100)

    async def two(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, _ = await read_request(reader)
        if b"/gz" in head:
            writer.write(answer(packed, b"Content-Encoding: gzip"))
            await reader.read()
            return
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end")
        await writer.drain()

    server = await serve(two)
    pool = Http1Pool(server.url, limit=4, idle_seconds=30)
    resp = await pool.request("POST", server.url + "/eof", {}, b"", QUICK)
    assert await resp.read() == b"until the end"
    assert pool._idle == []  # the server said close
    resp = await pool.request("POST", server.url + "/gz", {}, b"", QUICK)
    assert await resp.read() == b'{"ok": true}' * 100
    await pool.close()


async def test_an_idle_connection_the_server_closed_is_not_used_again(serve) -> None:
    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer(b"ok"))  # says nothing of closing, then closes (cpp-httplib)
        await writer.drain()

    server = await serve(once)
    pool = Http1Pool(server.url, limit=4, idle_seconds=30)
    for _ in range(3):
        resp = await pool.request("POST", server.url + "/", {}, b"x", QUICK)
        assert await resp.read() == b"ok"
        await until(lambda: pool._idle == [], what="the close reaches the pool")
    assert server.connections == 3
    await pool.close()


async def test_refused_and_silent_servers_fail_with_their_own_errors(serve) -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    pool = Http1Pool(f"http://127.0.0.1:{port}", limit=4, idle_seconds=30)
    with pytest.raises(ConnectFailed):
        await pool.request("POST", f"http://127.0.0.1:{port}/", {}, b"", QUICK)

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    server = await serve(silent)
    pool = Http1Pool(server.url, limit=4, idle_seconds=30)
    started = time.monotonic()
    with pytest.raises(ReadTimedOut):
        await pool.request("POST", server.url + "/", {}, b"", Timeouts(2.0, 0.3, 5.0))
    assert 0.25 < time.monotonic() - started < 2.0
    assert pool._busy == 0  # its place is free again
    await pool.close()


async def test_a_stalled_and_an_endless_stream_time_out(serve) -> None:
    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, _ = await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n")
        while b"/trickle" in head:  # a chunk every 50 ms, for ever: only `total` ends it
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(b"1\r\n.\r\n")
        await reader.read()

    server = await serve(stall)
    pool = Http1Pool(server.url, limit=4, idle_seconds=30)
    for path, timeouts, after in (
        ("/stall", Timeouts(2.0, 0.3, 10.0), (0.25, 2.0)),
        ("/trickle", Timeouts(2.0, 0.3, 0.8), (0.75, 2.5)),
    ):
        started = time.monotonic()
        resp = await pool.request("POST", server.url + path, {}, b"", timeouts)
        with pytest.raises(ReadTimedOut):
            while await resp.read_some():
                pass
        assert after[0] < time.monotonic() - started < after[1], path
        resp.close()
    assert pool._busy == 0
    await pool.close()


async def test_a_full_pool_makes_the_next_request_wait(serve) -> None:
    release_first = asyncio.Event()

    async def slow_first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head, _ = await read_request(reader)
            if b"/first" in head:
                await release_first.wait()
            writer.write(answer(head.split(b" ")[1]))

    server = await serve(slow_first)
    pool = Http1Pool(server.url, limit=1, idle_seconds=30)

    async def call(path: str) -> bytes:
        resp = await pool.request("POST", server.url + path, {}, b"", QUICK)
        body = await resp.read()
        return body

    first = asyncio.ensure_future(call("/first"))
    second = asyncio.ensure_future(call("/second"))
    await until(lambda: bool(pool._waiters), what="a request waits")
    assert len(pool._waiters) == 1 and not second.done()  # waiting for the one connection
    release_first.set()
    assert await asyncio.gather(first, second) == [b"/first", b"/second"]
    assert server.connections == 1
    await pool.close()


async def test_the_total_deadline_counts_the_wait_for_a_connection(serve) -> None:
    """`total` is the whole exchange from the call: a request that waited for the pool's one
    connection has only what is left of it for the answer (it used to start again)."""

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head, _ = await read_request(reader)
            await asyncio.sleep(0.6)  # each answer takes 0.6 s: two in a row take 1.2
            writer.write(answer(head.split(b" ")[1]))

    server = await serve(slow)
    pool = Http1Pool(server.url, limit=1, idle_seconds=30)
    first = asyncio.ensure_future(pool.request("POST", server.url + "/first", {}, b"", QUICK))
    await until(lambda: pool._busy == 1, what="the first request holds the connection")
    begun = time.monotonic()
    second = asyncio.ensure_future(
        pool.request("POST", server.url + "/second", {}, b"", Timeouts(2.0, 2.0, 1.0))
    )
    assert await (await first).read() == b"/first"
    with pytest.raises(ReadTimedOut, match="longer than 1 s"):
        await second
    assert 0.95 < time.monotonic() - begun < 1.15  # not the 0.6 s wait plus a whole 1.0
    await pool.close()


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part",  # then the close
        b"SSH-2.0-OpenSSH_9.6\r\n",  # not HTTP at all
        b"HTTP/1.1 200 OK\r\n" + b"X-Flood: " + b"a" * 70_000 + b"\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 2\r\n\r\nxx",
    ],
    ids=["cut-short", "not-http", "header-flood", "unknown-encoding"],
)
async def test_broken_answers_are_connection_errors(serve, reply: bytes) -> None:
    async def broken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply)
        await writer.drain()

    server = await serve(broken)
    pool = Http1Pool(server.url, limit=4, idle_seconds=30)
    with pytest.raises(ConnectionBroken):
        resp = await pool.request("POST", server.url + "/", {}, b"", QUICK)
        try:
            await resp.read()
        finally:
            resp.close()
    assert pool._busy == 0 and pool._idle == []
    await pool.close()


async def test_an_answer_nobody_asked_for_is_never_taken_for_the_next(serve) -> None:
    async def twice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head, _ = await read_request(reader)
            path = head.split(b" ")[1]
            writer.write(answer(path) + answer(b"stale answer to " + path))

    server = await serve(twice)
    pool = Http1Pool(server.url, limit=4, idle_seconds=30)
    for path in (b"/one", b"/two"):
        resp = await pool.request("POST", server.url + path.decode(), {}, b"", QUICK)
        assert await resp.read() == path
        await until(lambda: pool._idle == [], what="the connection is dropped")
    assert server.connections == 2
    await pool.close()


async def test_a_providers_own_host_goes_instead_and_the_framing_stays_ours(serve) -> None:
    heads: list[bytes] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, body = await read_request(reader)
        heads.append(head)
        writer.write(answer(body))

    server = await serve(record)
    pool = Http1Pool(server.url, limit=4, idle_seconds=30)
    own = {"Host": "api.example", "Content-Length": "999", "X-Key": "k"}
    resp = await pool.request("POST", server.url + "/", own, b"abc", QUICK)
    assert await resp.read() == b"abc"
    lines = heads[0].decode().lower().split("\r\n")
    assert [ln for ln in lines if ln.startswith(("host:", "content-length:"))] == [
        "host: api.example",
        "content-length: 3",
    ]
    assert "x-key: k" in lines
    with pytest.raises(ValueError, match="line break"):
        await pool.request("POST", server.url + "/", {"X-Bad": "a\r\nb: c"}, b"", QUICK)
    await pool.close()


async def test_a_waiter_woken_then_cancelled_hands_the_wake_on(serve) -> None:
    async def quick(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(answer(b"ok"))

    server = await serve(quick)
    pool = Http1Pool(server.url, limit=1, idle_seconds=30)
    held = await pool.request("POST", server.url + "/", {}, b"", QUICK)

    async def call() -> bytes:
        resp = await pool.request("POST", server.url + "/", {}, b"", QUICK)
        return await resp.read()

    first, second = asyncio.ensure_future(call()), asyncio.ensure_future(call())
    await until(lambda: len(pool._waiters) == 2, what="two requests wait")
    await held.read()  # the connection comes back: the first waiter is woken...
    first.cancel()  # ...and cancelled in the same loop turn (its client went away)
    # the second is served now, not when its wait runs out
    assert await asyncio.wait_for(second, 2.0) == b"ok"
    assert first.cancelled() and pool._busy == 0
    await pool.close()


async def test_a_closed_pool_fails_its_waiters_and_opens_nothing(serve) -> None:
    release = asyncio.Event()

    async def held(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await release.wait()
        writer.write(answer(b"late"))

    server = await serve(held)
    pool = Http1Pool(server.url, limit=1, idle_seconds=30)
    first = asyncio.ensure_future(pool.request("POST", server.url + "/", {}, b"", QUICK))
    await until(lambda: server.connections == 1, what="the first request is out")
    second = asyncio.ensure_future(pool.request("POST", server.url + "/", {}, b"", QUICK))
    await until(lambda: len(pool._waiters) == 1, what="the second waits")
    await pool.close()
    with pytest.raises(ConnectionBroken, match="pool is closed"):
        await asyncio.wait_for(second, 2.0)
    release.set()
    (await first).close()
    assert server.connections == 1


@pytest.mark.parametrize("coding", [b"Chunked", b"CHUNKED", b"gzip, Chunked"])
async def test_a_chunked_body_cut_short_fails_whatever_the_case(serve, coding: bytes) -> None:
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        body = gzip.compress(b"hello") if b"gzip" in coding else b"hello"
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: " + coding + b"\r\n\r\n")
        writer.write(b"%x\r\n%s\r\n" % (len(body), body))  # then the close, no last chunk
        await writer.drain()

    server = await serve(cut)
    pool = Http1Pool(server.url, limit=1, idle_seconds=30)
    with pytest.raises(ConnectionBroken):
        resp = await pool.request("POST", server.url + "/", {}, b"", QUICK)
        await resp.read()
    await pool.close()


async def test_a_reset_does_not_end_a_body_delimited_by_the_close(serve) -> None:
    got_part = asyncio.Event()

    async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\npartial-")
        await writer.drain()
        await got_part.wait()
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()  # a reset, not a close

    server = await serve(reset)
    pool = Http1Pool(server.url, limit=1, idle_seconds=30)
    resp = await pool.request("POST", server.url + "/", {}, b"", QUICK)
    parts = []
    with pytest.raises(ConnectionBroken, match="lost"):
        while part := await resp.read_some():
            parts.append(part)
            got_part.set()
    assert parts == [b"partial-"]
    await pool.close()


async def test_compressed_bodies_empty_and_of_several_gzip_members(serve) -> None:
    members = gzip.compress(b'{"part": 1,') + gzip.compress(b' "more": 2}')

    async def coded(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head, _ = await read_request(reader)
            path = head.split(b" ")[1]
            if path == b"/members":  # chunked, cut inside the second member's header
                cut = len(members) // 2 + 3
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n")
                writer.write(b"Transfer-Encoding: chunked\r\n\r\n")
                for piece in (members[:cut], members[cut:]):
                    writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
            elif path == b"/204":
                writer.write(b"HTTP/1.1 204 No Content\r\nContent-Encoding: gzip\r\n\r\n")
            else:
                writer.write(answer(b"", b"Content-Encoding: gzip"))

    server = await serve(coded)
    pool = Http1Pool(server.url, limit=1, idle_seconds=30)
    resp = await pool.request("POST", server.url + "/members", {}, b"", QUICK)
    assert await resp.read() == b'{"part": 1, "more": 2}'
    for path, status in (("/204", 204), ("/empty", 200)):
        resp = await pool.request("POST", server.url + path, {}, b"", QUICK)
        assert (resp.status, await resp.read()) == (status, b"")
    assert server.connections == 1  # each answer ended cleanly, so the connection stayed
    await pool.close()


async def test_deflate_bodies_zlib_wrapped_or_raw_arriving_a_byte_at_first(serve) -> None:
    text = b'{"choices": [{"text": "' + b"deflated " * 40 + b'"}]}'
    wrapped = zlib.compress(text)
    raw = zlib.compressobj(wbits=-15)
    bodies = {b"/zlib": wrapped, b"/raw": raw.compress(text) + raw.flush()}
    assert bodies[b"/raw"][:2] != wrapped[:2]

    async def coded(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head, _ = await read_request(reader)
            body = bodies[head.split(b" ")[1]]
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Encoding: deflate\r\n")
            writer.write(b"Transfer-Encoding: chunked\r\n\r\n")
            for piece in (body[:1], body[1:2], body[2:]):  # the header's bytes one by one
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
            writer.write(b"0\r\n\r\n")

    server = await serve(coded)
    pool = Http1Pool(server.url, limit=1, idle_seconds=30)
    for path in ("/zlib", "/raw"):
        resp = await pool.request("POST", server.url + path, {}, b"", QUICK)
        assert await resp.read() == text, path
    assert server.connections == 1
    await pool.close()


def gzip_of_zeros(mib: int) -> bytes:
    coder = zlib.compressobj(9, wbits=31)
    step = bytes(1 << 20)
    return b"".join(coder.compress(step) for _ in range(mib)) + coder.flush()


async def test_a_decompression_bomb_fails_and_a_large_honest_body_is_whole(serve) -> None:
    """200 MiB of zeros in 200 KB of gzip is refused once it has given 64 MiB, read whole
    or as it arrives; a 3 MiB body that compresses 1.3 times comes out whole although one
    chunk of it decompresses past a step."""
    bomb = gzip_of_zeros(200)
    honest = base64.b64encode(random.Random(7).randbytes(9 << 18))  # 3 MiB of base64
    bodies = {b"/bomb": bomb, b"/honest": gzip.compress(honest)}

    async def coded(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head, _ = await read_request(reader)
            writer.write(answer(bodies[head.split(b" ")[1]], b"Content-Encoding: gzip"))

    server = await serve(coded)
    pool = Http1Pool(server.url, limit=2, idle_seconds=30)
    resp = await pool.request("POST", server.url + "/honest", {}, b"", QUICK)
    assert await resp.read() == honest
    resp = await pool.request("POST", server.url + "/bomb", {}, b"", QUICK)
    with pytest.raises(ConnectionBroken, match="decompression bomb"):
        await resp.read()
    resp = await pool.request("POST", server.url + "/bomb", {}, b"", QUICK)
    got = 0
    with pytest.raises(ConnectionBroken, match="decompression bomb"):
        while chunk := await resp.read_some():
            got += len(chunk)
    assert got <= 65 << 20
    await pool.close()


@pytest.mark.parametrize(
    ("asked", "sent"),
    [
        ("br", "identity"),
        ("br, gzip;q=0.5, zstd", "gzip;q=0.5"),
        ("identity", "identity"),
    ],
)
async def test_a_providers_accept_encoding_keeps_only_what_is_decoded(
    serve, asked: str, sent: str
) -> None:
    """An answer in a coding the client cannot read would fail however good it is: a
    provider's `Accept-Encoding` is narrowed, and the server answers in what is left."""
    text = b'{"ok": true}'
    heads: list[bytes] = []

    async def negotiating(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, _ = await read_request(reader)
        heads.append(head)
        accept = head.lower().split(b"accept-encoding: ", 1)[1].split(b"\r\n", 1)[0]
        if b"br" in accept:
            writer.write(answer(b"\x8b\x05\x80" + text + b"\x03", b"Content-Encoding: br"))
        elif b"gzip" in accept:
            writer.write(answer(gzip.compress(text), b"Content-Encoding: gzip"))
        else:
            writer.write(answer(text))

    server = await serve(negotiating)
    pool = Http1Pool(server.url, limit=1, idle_seconds=30)
    resp = await pool.request("POST", server.url + "/", {"Accept-Encoding": asked}, b"", QUICK)
    assert await resp.read() == text
    assert heads[0].decode().count("Accept-Encoding") == 1
    assert f"Accept-Encoding: {sent}\r\n" in heads[0].decode()
    await pool.close()


async def test_a_kept_alive_connection_closed_under_a_request_is_tried_once_more(serve) -> None:
    seen: list[tuple[int, bytes]] = []

    async def closes_on_the_second(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        number = len({n for n, _ in seen}) + 1
        while True:
            head, _ = await read_request(reader)
            seen.append((number, head.split(b" ")[1]))
            if len([s for s in seen if s[0] == number]) == 2:
                return  # the server's own request limit: closed, with no answer
            writer.write(answer(b"ok"))

    server = await serve(closes_on_the_second)
    pool = Http1Pool(server.url, limit=1, idle_seconds=30)
    for path in ("/1", "/2"):
        resp = await pool.request("POST", server.url + path, {}, b"", QUICK)
        assert await resp.read() == b"ok"
    # /2 met the closing connection, then went out again on a new one
    assert seen == [(1, b"/1"), (1, b"/2"), (2, b"/2")]
    await pool.close()


async def test_a_new_connection_or_a_begun_answer_is_never_sent_again(serve) -> None:
    seen: list[bytes] = []

    async def half(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head, _ = await read_request(reader)
            seen.append(head.split(b" ")[1])
            if head.startswith(b"POST /silent"):
                return  # closed with no answer, on a connection that served nobody
            if head.startswith(b"POST /half"):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhal")
                await writer.drain()
                return
            writer.write(answer(b"ok"))

    server = await serve(half)
    pool = Http1Pool(server.url, limit=1, idle_seconds=30)
    with pytest.raises(ConnectionBroken):
        await pool.request("POST", server.url + "/silent", {}, b"", QUICK)
    assert await (await pool.request("POST", server.url + "/ok", {}, b"", QUICK)).read() == b"ok"
    with pytest.raises(ConnectionBroken):  # a reused connection, but the answer had begun
        await (await pool.request("POST", server.url + "/half", {}, b"", QUICK)).read()
    assert seen == [b"/silent", b"/ok", b"/half"]
    await pool.close()


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\nX-Endless: " + b"a" * 70_000,  # one header line with no end
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
    ],
    ids=["endless-header", "unasked-upgrade"],
)
async def test_an_answer_that_never_ends_its_head_or_switches_protocols_fails_at_once(
    serve, reply: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    async def odd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply)
        await writer.drain()
        await reader.read()  # the connection stays open until the client drops it

    server = await serve(odd)
    pool = Http1Pool(server.url, limit=1, idle_seconds=30)
    with pytest.raises(ConnectionBroken):  # not a read timeout later
        await pool.request("POST", server.url + "/", {}, b"", QUICK)
    assert pool._busy == 0 and pool._idle == []
    assert not [r for r in caplog.records if r.name == "asyncio"]  # no "Fatal error" there
    await pool.close()


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/a b", {}),
        ("/a\r\nX-Evil: 1", {}),
        ("/", {"X-A: injected": "v"}),
        ("/", {"": "v"}),
        ("/", {"X-Nul": "a\x00b"}),
        ("/", {"X-Split": "a\r\nX-Evil: 1"}),
    ],
)
async def test_a_request_head_that_is_not_http_is_refused_before_sending(
    serve, path: str, headers: dict[str, str]
) -> None:
    async def never(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    server = await serve(never)
    pool = Http1Pool(server.url, limit=1, idle_seconds=30)
    with pytest.raises(ValueError):
        await pool.request("POST", server.url + path, headers, b"", QUICK)
    assert server.connections == 0 and pool._busy == 0
    await pool.close()


async def test_the_requests_of_one_loop_turn_leave_together_at_its_end() -> None:
    """A server's process is woken once for the requests of a turn, not once each: on the
    server's side of two kept-alive connections, no byte has come while the turn that
    sent both requests still runs (a request written at once would be there), and each
    request is there whole after it."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    pool = Http1Pool(url, limit=2, idle_seconds=30)
    accepted: list[socket.socket] = []

    def accept() -> bool:
        with contextlib.suppress(BlockingIOError):
            sock, _ = listener.accept()
            sock.setblocking(False)
            accepted.append(sock)
        return len(accepted) == 2

    def received(sock: socket.socket) -> bytes:
        try:
            return sock.recv(65536)
        except BlockingIOError:
            return b""

    def send_two() -> list[asyncio.Task[UpstreamResponse]]:
        return [
            asyncio.create_task(pool.request("POST", url + "/v1/x", {}, b"{}", QUICK))
            for _ in range(2)
        ]

    # two connections, kept alive after one answer each
    first = send_two()
    await until(accept, what="two connections")
    got = [b"", b""]
    await until(lambda: all(g.endswith(b"{}") for g in _add(got, accepted, received)))
    for sock in accepted:
        sock.sendall(answer(b"ok"))
    for resp in await asyncio.gather(*first):
        assert await resp.read() == b"ok"

    # the two steps of the tasks run in the next turn, then this check, in that order
    during: list[bytes] = []
    second = send_two()
    asyncio.get_running_loop().call_soon(lambda: during.extend(map(received, accepted)))
    await until(lambda: len(during) == 2)
    assert during == [b"", b""]
    got = [b"", b""]
    await until(lambda: all(g.endswith(b"{}") for g in _add(got, accepted, received)))
    assert all(g.startswith(b"POST /v1/x HTTP/1.1\r\n") for g in got)
    for sock in accepted:
        sock.sendall(answer(b"again"))
    for resp in await asyncio.gather(*second):
        assert await resp.read() == b"again"
    await pool.close()
    for sock in (*accepted, listener):
        sock.close()


def _add(
    got: list[bytes], socks: list[socket.socket], received: Callable[[socket.socket], bytes]
) -> list[bytes]:
    """What each socket has received so far, with what came since the last call."""
    for i, sock in enumerate(socks):
        got[i] += received(sock)
    return got
