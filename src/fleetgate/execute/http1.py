"""A lean HTTP/1.1 client for the proxied path (and the gateway's own calls that share its
pools: exact counts, Ollama's listings): one connection pool per provider.

Every proxied request crosses it, so what it costs is paid on every request: aiohttp's
client spends about 100 µs of CPU on one small exchange on a 2-core VM (URL and header
objects, cookie and trace machinery, a timeout context and a payload object per request),
where this one, on the same asyncio transports and the httptools parser the server side
uses, spends about 20. It does what the proxied path needs and no more:

- keep-alive connections, reused last-in first-out, dropped when the server closes them, when
  an answer says `Connection: close` or was not read to its end, and when idle for longer
  than the provider kind's `KeepAlive.idle_seconds` (a server closes its idle ones: a
  connection used just after its close would carry a request into a reset); a kept-alive
  connection that closes under a request before a byte of its answer (the server's close
  crossed the request) has the request sent once more on a new connection, the only resend;
- at most `limit` connections at once per pool; more requests wait for one, and the wait
  is told: on the answer (`pool_wait`) and, once a minute at most, in the log;
- the requests of one event-loop turn are written together at its end (`send_soon`): the
  server's process is woken once for them, not once each;
- bodies of any framing (length, chunked, until the server closes cleanly: a reset cuts the
  body short), gzip (members one after another too) and deflate (zlib, or raw); a
  provider's own `Accept-Encoding` is narrowed to these; a body that decompresses to more
  than 64 MiB and 200 times its size is refused as a bomb;
- answers read whole or chunk by chunk as they arrive, or handed read by read to a sink
  in the connection's own callback (`pipe`: no task woken per read), reading paused
  while 256 KiB wait unread (a slow client slows the upstream, it does not fill memory);
- three deadlines: connect (TCP and TLS), `read` (silence from the server while a read is
  awaited: the first byte, and between chunks), and `total` (the whole exchange, from the
  call: the wait for a free connection, the connect and a resend are inside it); one timer
  per exchange serves all of them;
- no redirect is followed, no cookie kept, no proxy taken from the environment.

Errors are `UpstreamIOError`s: `ConnectFailed` and `ConnectTimedOut` when no connection
could be made, `ReadTimedOut` (a `TimeoutError`), and `ConnectionBroken` for a connection
that closed or sent something that is not HTTP mid-exchange.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import zlib
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

from fleetgate.execute.saturation import Saturation

_PAUSE_AT = 256 * 1024  # unread bytes at which reading from the server pauses
_MAX_HEAD = 64 * 1024  # the most an answer's status line and headers may take
_ZLIB = 15  # zlib wbits: the zlib format (and `deflate`: zlib, or raw, told by its header)
_ENCODINGS = {"gzip": 47, "x-gzip": 47, "deflate": _ZLIB}  # 47: gzip or zlib
_DECODED = frozenset(_ENCODINGS) | {"identity"}  # what an Accept-Encoding may ask for
_INFLATE_STEP = 1 << 20  # the most one decompress call may give
_BOMB_RATIO = 200  # decompressed ÷ compressed above which a large body is a bomb ...
_BOMB_FROM = 64 << 20  # ... once it has given this much (JSON and SSE compress 3-40x)
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # a header name (RFC 9110 token)
_BAD_VALUE = re.compile(r"[\x00\r\n]")  # what a header value may not hold
_BAD_TARGET = re.compile(r"[\x00-\x20\x7f]")  # what a request line's target may not hold


class UpstreamIOError(Exception):
    """An exchange with an upstream failed below HTTP."""


class ConnectFailed(UpstreamIOError):
    """No connection could be opened (refused, unreachable, name or TLS failure)."""


class ConnectTimedOut(UpstreamIOError, TimeoutError):
    """No connection was opened within the connect timeout."""


class ReadTimedOut(UpstreamIOError, TimeoutError):
    """The server was silent for longer than the read timeout, or the exchange took longer
    than the total one."""


class ConnectionBroken(UpstreamIOError):
    """The connection closed, or carried something that is not HTTP, mid-exchange."""


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect: float
    read: float  # silence while a read is awaited: the first byte, and between chunks
    total: float  # the whole exchange, from the request to the answer's end


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a pool's connections go."""

    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: str) -> Origin:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port)

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


class UpstreamResponse:
    """An answer's status and headers (names in lower case); its body read whole
    (`read`) or as it arrives (`chunks`). Once read to its end, its connection goes back
    to the pool; `close` (always safe) drops a connection whose answer was not."""

    __slots__ = (
        "_chunks",
        "_coded",
        "_conn",
        "_decoded",
        "_decoder",
        "_done",
        "_error",
        "_held",
        "_sink",
        "_unread",
        "_waiter",
        "_wbits",
        "headers",
        "pool_wait",
        "status",
    )

    def __init__(self, conn: _Connection, status: int, headers: dict[str, str]) -> None:
        self._conn: _Connection | None = conn
        self.status = status
        self.headers = headers
        self.pool_wait = 0.0  # seconds the request waited for a free connection
        self._chunks: deque[bytes] = deque()
        self._unread = 0
        self._done = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._decoder: zlib._Decompress | None = None  # made at the body's first byte
        self._wbits = 0  # the body's zlib format (0: not compressed)
        self._held = b""  # a deflate body's first byte, until the second tells its format
        self._sink: Callable[[bytes], bool] | None = None  # takes each read (`pipe`)
        self._coded = self._decoded = 0  # a compressed body's bytes in and out so far
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding in _ENCODINGS:
            self._wbits = _ENCODINGS[encoding]
        elif encoding != "identity":
            raise ConnectionBroken(f"unsupported content-encoding {encoding!r}")

    # ---- fed by the connection --------------------------------------------------------
    def _feed(self, data: bytes) -> None:
        if self._wbits:
            try:
                data = self._inflate(data)
            except zlib.error as exc:  # fails the exchange (raised in a parser callback)
                raise ConnectionBroken(f"a body that does not decompress: {exc}") from None
        if not data:  # nothing new (b"" would mean the end to `read_some`)
            return
        sink = self._sink
        if sink is not None:
            if sink(data):  # the sink stops: its caller goes on
                self._sink = None
                self._wake()
            return
        self._chunks.append(data)
        self._unread += len(data)
        if self._unread >= _PAUSE_AT and self._conn is not None:
            self._conn.pause()
        self._wake()

    def _inflate(self, data: bytes) -> bytes:
        """A compressed body's next bytes, decompressed. A gzip body may hold several
        members one after another (RFC 1952): each one's end starts the next."""
        self._coded += len(data)
        parts: list[bytes] = []
        while data:
            decoder = self._decoder
            if decoder is None or decoder.eof:
                wbits = self._wbits
                if wbits == _ZLIB:  # `deflate`: zlib as RFC 9110 says, or raw, as some send
                    data = self._held + data
                    if len(data) < 2:  # the header's two bytes tell which
                        self._held = data
                        break
                    self._held = b""
                    if not _zlib_header(data):
                        wbits = -_ZLIB
                decoder = self._decoder = zlib.decompressobj(wbits)
            while True:  # a step at a time, so a bomb is caught before it fills memory
                out = decoder.decompress(data, _INFLATE_STEP)
                self._decoded += len(out)
                if self._decoded > _BOMB_FROM and self._decoded > _BOMB_RATIO * self._coded:
                    raise zlib.error(
                        f"more than {_BOMB_RATIO} times its compressed size and "
                        f"{_BOMB_FROM >> 20} MiB (a decompression bomb)"
                    )
                parts.append(out)
                if len(out) < _INFLATE_STEP:  # a full step may have left output inside
                    break
                data = decoder.unconsumed_tail
            data = decoder.unused_data
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _finish(self) -> None:
        decoder = self._decoder  # None for an empty body, compressed or not
        if self._held:  # a deflate body of one byte
            self._fail(ConnectionBroken("a compressed body that ends mid-stream"))
            return
        if decoder is not None:
            tail = decoder.flush()
            if tail:
                self._chunks.append(tail)
                self._unread += len(tail)
            if not decoder.eof:
                self._fail(ConnectionBroken("a compressed body that ends mid-stream"))
                return
        self._done = True
        self._wake()

    def _raised(self) -> BaseException:
        """The body's error, to raise: a new one of its class and message each time. The
        one kept here never takes a traceback, whose frames (this response among their
        locals) would make it a cycle with the whole stream for the collector."""
        error = self._error
        assert error is not None
        return type(error)(*error.args) if isinstance(error, UpstreamIOError) else error

    def _fail(self, exc: BaseException) -> None:
        if not self._done and self._error is None:
            self._error = exc
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def _wait(self) -> None:
        conn = self._conn
        if conn is None:
            raise ConnectionBroken("the answer was closed before it was read")
        conn.resume()
        conn.waiting()
        self._waiter = conn.loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    # ---- read by the caller -----------------------------------------------------------
    async def read(self) -> bytes:
        while not self._done:
            if self._error is not None:
                raise self._raised()
            await self._wait()
        self._release()  # all of it has come: the connection may serve another request
        chunks = self._take()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def read_some(self) -> bytes:
        """What has arrived since the last call (all of it joined), once something has;
        b"" at the body's end. A method, not an async generator: a generator its caller
        leaves before the end (a stream's first events) is closed by the event loop in a
        task of its own when it is collected, about 8 µs per stream."""
        while True:
            if self._chunks:
                chunks = self._take()
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
            if self._error is not None:
                raise self._raised()
            if self._done:
                self._release()
                return b""
            await self._wait()

    async def pipe(self, sink: Callable[[bytes], bool]) -> bool:
        """Hands what arrives of the body to `sink` in the connection's own callback, as
        it arrives (what had arrived before first), with no task woken per read, until
        `sink` says stop (True: returned True) or the body ends or fails (False: its end
        or its error is for `read_some`). Silence while it waits counts as a read's."""
        if self._chunks:
            chunks = self._take()
            if sink(chunks[0] if len(chunks) == 1 else b"".join(chunks)):
                return True
        self._sink = sink
        try:
            while self._sink is not None:
                if self._done or self._error is not None:
                    return False
                await self._wait()
        finally:
            self._sink = None
        return True

    def _take(self) -> list[bytes]:
        chunks = list(self._chunks)
        self._chunks.clear()
        self._unread = 0
        return chunks

    def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.finish_exchange(reuse=self._done and self._error is None)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.finish_exchange(reuse=False)


class _Connection(asyncio.Protocol):
    """One connection to the origin; at most one exchange on it at a time."""

    def __init__(self, pool: Http1Pool) -> None:
        self.pool = pool
        self.loop = pool.loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.idle_since = 0.0
        self.closed = False
        self.reusable = True
        self.served = 0  # exchanges this connection has carried to their end
        self._paused = False
        # the exchange under way
        self._head: asyncio.Future[UpstreamResponse] | None = None
        self._response: UpstreamResponse | None = None
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0  # bytes received while the head is awaited
        self._header_bytes = 0  # the head's names and values
        self._interim = False  # a 1xx answer, which a final one follows
        self._timer: asyncio.TimerHandle | None = None
        self._started = 0.0
        self._last_read = 0.0
        self._timeouts: Timeouts | None = None

    # ---- asyncio ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._last_read = self.loop.time()
        if self._head is None and self._response is None:
            self._broken(ConnectionBroken("the server sent bytes nobody asked for"))
            return
        if self._head is not None:  # bytes while the head is awaited (a body's may follow)
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # a 101 nobody asked for: not HTTP/1.1 from here
            self._broken(ConnectionBroken("the server switched protocols unasked"))
            return
        except httptools.HttpParserError as exc:
            if isinstance(exc.__context__, ConnectionBroken):  # raised by a callback below
                self._broken(exc.__context__)
            else:
                self._broken(ConnectionBroken(f"an answer that is not HTTP/1.1: {exc}"))
            return
        if self._head is not None and self._head_bytes > _MAX_HEAD:  # a line with no end
            self._broken(ConnectionBroken(f"an answer whose head exceeds {_MAX_HEAD} bytes"))

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        del self.parser  # its callbacks are this connection's: a cycle for the collector
        self.closed = True
        self.pool.forget_idle(self)
        response = self._response
        if (
            exc is None  # a reset is no end: the body may be cut short
            and response is not None
            and not response._done
            and self._until_close()
        ):
            response._finish()  # a body delimited by the connection's end
            self._end_exchange()
            return
        self._broken(ConnectionBroken(_lost(exc)))

    # ---- the parser's callbacks -------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > _MAX_HEAD:
            raise ConnectionBroken(f"an answer whose headers exceed {_MAX_HEAD} bytes")
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self._head is None:  # bytes after an answer's end that begin another one
            raise ConnectionBroken("the server sent an answer nobody asked for")
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # interim (Early Hints, Continue): the real answer follows
            self._interim = True
            self._headers = []
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in self._headers}
        self._headers = []
        self.reusable = self.reusable and self.parser.should_keep_alive()
        self._response = UpstreamResponse(self, status, headers)  # may refuse the encoding
        head, self._head = self._head, None
        if head is not None and not head.done():
            head.set_result(self._response)

    def on_body(self, body: bytes) -> None:
        response = self._response
        if response is not None:
            sink = response._sink
            if sink is None or response._wbits or not body:
                response._feed(body)
            elif sink(body):  # a piped body's read, as `_feed` would hand it, one call less
                response._sink = None
                response._wake()

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        response = self._response
        if response is not None:
            response._finish()
        self._end_exchange()

    # ---- one exchange -----------------------------------------------------------------
    async def exchange(
        self, request: bytes, body: bytes, timeouts: Timeouts, started: float
    ) -> UpstreamResponse:
        """Send a request; its answer's head. `total` counts from `started` (the pool's
        wait and the connect came first), silence from now."""
        assert self.transport is not None
        self._head = self.loop.create_future()
        self._headers = []
        self._head_bytes = self._header_bytes = 0
        self._timeouts = timeouts
        self._started = started
        self._last_read = now = self.loop.time()
        first = min(now + timeouts.read, started + timeouts.total)
        self._timer = self.loop.call_at(first, self._check)
        self.pool.send_soon(self.transport, (request, body) if body else (request,))
        return await self._head

    def _check(self) -> None:
        """The exchange's one timer: fails it once a deadline has passed, else re-arms
        for the next one. Silence counts only while the caller waits on the server."""
        self._timer = None
        timeouts = self._timeouts
        if timeouts is None:
            return
        now = self.loop.time()
        total_at = self._started + timeouts.total
        if now >= total_at:
            self._broken(ReadTimedOut(f"the exchange took longer than {timeouts.total:g} s"))
            return
        response = self._response
        waiting = self._head is not None or (
            response is not None and response._waiter is not None and not self._paused
        )
        next_at = min(total_at, now + timeouts.read)
        if waiting:
            silent_at = self._last_read + timeouts.read
            if now >= silent_at:
                self._broken(ReadTimedOut(f"no answer from the server for {timeouts.read:g} s"))
                return
            next_at = min(total_at, silent_at)
        self._timer = self.loop.call_at(next_at, self._check)

    def _until_close(self) -> bool:
        """Whether the answer under way ends with the connection (no length, not chunked)."""
        response = self._response
        if response is None:
            return False
        h = response.headers
        return "content-length" not in h and "chunked" not in h.get("transfer-encoding", "").lower()

    def _end_exchange(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timeouts = None

    def _broken(self, exc: UpstreamIOError) -> None:
        head, self._head = self._head, None
        if head is not None and not head.done():
            head.set_exception(exc)
        if self._response is not None:
            self._response._fail(exc)
        self._end_exchange()
        self.reusable = False
        self._close()

    def finish_exchange(self, reuse: bool) -> None:
        """The caller is done with this connection: pooled again (an answer read to its
        end on a connection both sides keep), or closed."""
        response, self._response = self._response, None
        self._head = None
        self._end_exchange()
        if reuse and self.reusable and not self.closed and response is not None:
            self.served += 1
            self.resume()
            self.pool.put_back(self)
        else:
            self._close()
            self.pool.put_back(None)

    def crossed_close(self) -> bool:
        """Whether the exchange that just failed met the server's close of a kept-alive
        connection: the connection had served others, and not a byte of answer came (every
        byte of an answer arrives while its head is awaited)."""
        return self.served > 0 and self._head_bytes == 0

    def waiting(self) -> None:
        """The caller waits on the server from now: silence is counted from here (or from
        the last bytes, if they come later)."""
        now = self.loop.time()
        if now > self._last_read:
            self._last_read = now

    def pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None and not self.closed:
            self._paused = False
            self._last_read = self.loop.time()  # a paused reader's silence is ours
            self.transport.resume_reading()

    def usable(self) -> bool:
        """Whether the connection may carry a request (its close may not have been
        delivered yet while the transport is already closing)."""
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    def _close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


_NAMES: set[str] = set()  # header names seen valid (a provider's few, mostly)


def _valid_name(name: str) -> bool:
    if _TOKEN.fullmatch(name) is None:
        return False
    if len(_NAMES) < 1024:
        _NAMES.add(name)
    return True


def _zlib_header(data: bytes) -> bool:
    """Whether a deflate body begins with a zlib header (RFC 1950: method 8, a window of at
    most 32 KiB, and a check that makes the two bytes a multiple of 31), not raw deflate."""
    return data[0] & 0x0F == 8 and data[0] >> 4 <= 7 and (data[0] << 8 | data[1]) % 31 == 0


def _decodable(accept: str) -> str:
    """An Accept-Encoding value with only the codings this client decodes (an answer in
    `br` or `zstd` it was asked for would be unreadable); `identity` if none is left."""
    kept = [
        part.strip()
        for part in accept.split(",")
        if part.split(";", 1)[0].strip().lower() in _DECODED
    ]
    return ", ".join(kept) or "identity"


def _lost(exc: Exception | None) -> str:
    if exc is None:
        return "the server closed the connection before the answer's end"
    return f"the connection was lost: {type(exc).__name__}: {exc}"


class Http1Pool:
    """Kept-alive connections to one origin, at most `limit` at once. `name` (the
    provider's id) and `capped` (whether `limit` is a configured `max_concurrency`, not a
    kind's bound) are for the log line that says requests wait for a connection."""

    def __init__(
        self,
        base_url: str,
        *,
        limit: int,
        idle_seconds: float,
        loop: asyncio.AbstractEventLoop | None = None,
        name: str = "",
        capped: bool = True,
    ) -> None:
        self.origin = Origin.of(base_url)
        self.limit = max(1, limit)
        self.saturation = Saturation(
            name or self.origin.host_header,
            "connections (max_concurrency)" if capped else "connections",
        )
        self.idle_seconds = idle_seconds
        self.loop: asyncio.AbstractEventLoop = loop  # type: ignore[assignment]  # or at first use
        self._idle: list[_Connection] = []
        self._busy = 0  # connections handed out or being opened
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._targets: dict[str, str] = {}  # URL -> the request line's target
        self._sweeper: asyncio.TimerHandle | None = None
        self._ssl: ssl.SSLContext | None = (
            ssl.create_default_context() if self.origin.scheme == "https" else None
        )
        self._closed = False
        # requests of this loop turn, not yet written: they leave together at its end
        self._unsent: list[tuple[asyncio.Transport, tuple[bytes, ...]]] = []

    # ---- requests ---------------------------------------------------------------------
    async def request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        timeouts: Timeouts,
    ) -> UpstreamResponse:
        """Send one request; its answer's head, once it has come. The caller reads the
        answer to its end (which frees the connection) or closes it."""
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
        head, closes = self._request_head(method, url, headers, body)
        started = self.loop.time()  # `total` counts from here: the wait, connect, answer
        conn, waited = await self._acquire(timeouts, started)
        while True:
            if closes:  # the request asks the server to close after its answer
                conn.reusable = False
            try:
                response = await conn.exchange(head, body, timeouts, started)
                response.pool_wait = waited
                return response
            except BaseException as exc:
                conn.finish_exchange(reuse=False)
                if not (isinstance(exc, ConnectionBroken) and conn.crossed_close()):
                    raise
            # The server closed a kept-alive connection while the request was on its way
            # (its idle or request limit), which a connection cannot tell beforehand: once
            # more, on a new connection (which has served nobody, so this happens once).
            if self.loop.time() >= started + timeouts.total:
                raise ReadTimedOut(f"the exchange took longer than {timeouts.total:g} s")
            conn, more = await self._acquire(timeouts, started, fresh=True)
            waited += more

    def send_soon(self, transport: asyncio.Transport, parts: tuple[bytes, ...]) -> None:
        """Write a request at the end of this loop turn, with the others sent during it.

        Each request written at once, while the gateway's own work for the next ones
        spaces them out, reaches a server whose process went back to sleep after the last
        one: a wake-up each, paid in the writer's system call (on one host, an
        inter-processor interrupt; on this 2-core VM, 13 % of a saturated gateway's CPU).
        Written back to back, a turn's requests to one origin wake it once. A request
        waits for the rest of its turn, no longer; one whose connection closed meanwhile
        is not written (its exchange fails as the close's own would have)."""
        if not self._unsent:
            self.loop.call_soon(self._send_unsent)
        self._unsent.append((transport, parts))

    def _send_unsent(self) -> None:
        unsent, self._unsent = self._unsent, []
        for transport, parts in unsent:
            if transport.is_closing():
                continue
            if len(parts) == 1:
                transport.write(parts[0])
            else:
                transport.writelines(parts)

    def _request_head(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[bytes, bool]:
        """The request's line and headers, and whether they say `Connection: close`."""
        target = self._targets.get(url)
        if target is None:
            parts = urlsplit(url)
            if Origin.of(url) != self.origin:
                raise ValueError(f"{url!r} is not on this pool's origin")
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            target.encode("ascii")  # a URL to send as it is: refused here if it is not
            if _BAD_TARGET.search(url) is not None:  # urlsplit would drop some unseen
                raise ValueError(f"{url!r} holds a space or a control character")
            if len(self._targets) < 256:
                self._targets[url] = target
        own = {
            "host": f"Host: {self.origin.host_header}\r\n",
            "accept-encoding": "Accept-Encoding: gzip, deflate\r\n",
        }
        lines = [f"{method} {target} HTTP/1.1\r\n"]
        closes = False
        joined = "".join(headers.values())  # one scan for all (a `find` each: memchr)
        if "\r" in joined or "\n" in joined or "\0" in joined:
            bad = next(n for n, v in headers.items() if _BAD_VALUE.search(v) is not None)
            raise ValueError(f"the header {bad!r} holds a line break or a NUL")
        for name, value in headers.items():
            if name not in _NAMES and not _valid_name(name):
                raise ValueError(f"the header {name!r} is not a valid HTTP header name")
            lower = name.lower()
            if lower in ("content-length", "transfer-encoding"):
                continue  # the body's framing is the client's own
            if lower == "connection" and "close" in value.lower():
                closes = True
            if lower == "accept-encoding":  # a provider's own, narrowed to what is read
                value = _decodable(value)
            own.pop(lower, None)  # a provider's own Host or Accept-Encoding goes instead
            lines.append(f"{name}: {value}\r\n")
        lines.extend(own.values())
        lines.append(f"Content-Length: {len(body)}\r\n\r\n")
        return "".join(lines).encode("latin-1"), closes

    @property
    def waiting(self) -> int:
        """Requests waiting for a free connection."""
        return sum(1 for w in self._waiters if not w.done())

    # ---- connections ------------------------------------------------------------------
    async def _acquire(
        self, timeouts: Timeouts, started: float, fresh: bool = False
    ) -> tuple[_Connection, float]:
        """A connection for one exchange begun at `started`: the last one to come back
        idle, else a new one (`fresh`: always a new one), once fewer than `limit` are out;
        and the seconds waited for one. The wait and the connect are within the
        exchange's `total`."""
        waited_from: float | None = None  # when the wait for a free connection began
        while True:
            if self._closed:
                raise ConnectionBroken("the pool is closed")
            now = self.loop.time()
            while self._idle and not fresh:
                conn = self._idle.pop()
                if conn.usable() and now - conn.idle_since < self.idle_seconds:
                    self._busy += 1
                    return conn, 0.0 if waited_from is None else now - waited_from
                conn._close()
            if self._busy < self.limit:
                break
            if waited_from is None:
                waited_from = now
                if not self._waiters:  # the first to wait since the pool had room
                    self.saturation.note(self.limit)
            waiter = self.loop.create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout_at(started + timeouts.total):
                    await waiter
            except BaseException as exc:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                elif waiter.done() and not waiter.cancelled():
                    self._wake_one()  # woken, then cancelled: the wake-up goes to the next
                if isinstance(exc, TimeoutError):
                    raise ReadTimedOut(
                        f"no connection to the server came free within {timeouts.total:g} s"
                    ) from None
                raise
        self._busy += 1
        now = self.loop.time()
        waited = 0.0 if waited_from is None else now - waited_from
        left = started + timeouts.total - now
        try:
            return await self._open(max(0.0, min(timeouts.connect, left))), waited
        except BaseException:
            self.put_back(None)
            raise

    async def _open(self, seconds: float) -> _Connection:
        origin = self.origin
        try:
            async with asyncio.timeout(seconds):
                _, conn = await self.loop.create_connection(
                    lambda: _Connection(self),
                    origin.host,
                    origin.port,
                    ssl=self._ssl,
                    server_hostname=origin.host if self._ssl is not None else None,
                )
        except TimeoutError:
            raise ConnectTimedOut(
                f"no connection to {origin.host_header} within {seconds:g} s"
            ) from None
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(
                f"cannot connect to {origin.host_header}: {type(exc).__name__}: {exc}"
            ) from exc
        return conn

    def put_back(self, conn: _Connection | None) -> None:
        """A handed-out connection comes back: kept idle, or (None) it was closed."""
        self._busy -= 1
        if conn is not None:
            if self._closed:
                conn._close()
            else:
                conn.idle_since = self.loop.time()
                self._idle.append(conn)
                if self._sweeper is None:
                    self._sweeper = self.loop.call_later(self.idle_seconds, self._sweep)
        self._wake_one()

    def forget_idle(self, conn: _Connection) -> None:
        """A connection closed; if it was idle, it leaves the pool (a handed-out one
        comes back through `put_back` when its caller is done with it)."""
        if conn in self._idle:
            self._idle.remove(conn)

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _sweep(self) -> None:
        """Close connections idle for longer than `idle_seconds`."""
        self._sweeper = None
        cutoff = self.loop.time() - self.idle_seconds
        keep = []
        for conn in self._idle:
            if conn.idle_since <= cutoff:
                conn._close()
            else:
                keep.append(conn)
        self._idle = keep
        if keep:
            self._sweeper = self.loop.call_later(self.idle_seconds, self._sweep)

    async def close(self) -> None:
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for conn in self._idle:
            conn._close()
        self._idle.clear()
        for waiter in self._waiters:  # each finds the pool closed
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()
