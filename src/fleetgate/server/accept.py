"""The serving event loop: uvloop, with TCP listeners that accept every waiting connection
in each loop turn.

libuv (under uvloop) accepts one connection per readiness event of a listening socket since
libuv 1.45 (libuv/libuv#3696), so one per loop turn. Under load a turn carries the work of
every open connection, so a burst of new connections (a client's pool opening, a load
balancer reconnecting, a batch job starting) was admitted one per turn: the 64th of 64
waited 64 turns, about a second at c64 on streams (`benchmarks/README.md`), while requests
on open connections were served at once. asyncio's own loop accepts up to `backlog` per
turn (bpo-27906) for that reason; this loop does the same for fleetgate's listeners, so a
new connection waits one turn like any other ready socket.

Only plain TCP servers take this path. TLS and Unix-socket servers stay uvloop's own, and
so does everything else on the loop (uvicorn's protocol, the upstream client, timers).
`server/run.py` names this factory as uvicorn's `loop`, for `fleetgate serve`, its workers
and the test harness alike.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable, Iterable
from typing import Any

import uvloop

log = logging.getLogger(__name__)

ACCEPT_BATCH = 128  # most connections taken per turn: with workers sharing one socket, the
# least busy worker (the first to wake) takes a burst, and a turn stays bounded
_RETRY_SECONDS = 1.0  # out of file descriptors or memory: accepting pauses this long
_RESOURCE_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)

ProtocolFactory = Callable[[], asyncio.BaseProtocol]


class _Listener:
    """One listening socket: each readiness event accepts every waiting connection (up to
    `ACCEPT_BATCH`) and hands each to the loop's transport for the protocol."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, factory: ProtocolFactory
    ) -> None:
        self.loop = loop
        self.sock = sock
        self.factory = factory
        self.serving = False
        self.closed = False
        self._opening: set[asyncio.Task[Any]] = set()  # connections being wrapped

    def start(self) -> None:
        if not (self.serving or self.closed):  # closed: e.g. during a pause after EMFILE
            self.serving = True
            self.loop.add_reader(self.sock.fileno(), self._accept)

    def stop(self) -> None:
        if self.serving:
            self.serving = False
            self.loop.remove_reader(self.sock.fileno())

    def close(self) -> None:
        self.stop()
        self.closed = True
        self.sock.close()

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return  # nothing more waits
            except ConnectionAbortedError:
                continue  # the client gave up before we got to it
            except OSError as exc:
                if exc.errno not in _RESOURCE_ERRORS:
                    raise
                log.error(
                    "accepting connections failed (%s); pausing for %.0f s. Raise the "
                    "process's open-file limit (ulimit -n) or lower server.max_connections.",
                    exc,
                    _RETRY_SECONDS,
                )
                self.stop()
                self.loop.call_later(_RETRY_SECONDS, self.start)
                return
            conn.setblocking(False)
            task = self.loop.create_task(self._open(conn))
            self._opening.add(task)
            task.add_done_callback(self._opening.discard)

    async def _open(self, conn: socket.socket) -> None:
        try:
            await self.loop.connect_accepted_socket(self.factory, conn)
        except OSError as exc:  # reset before it could be wrapped: nothing to serve
            log.debug("a new connection failed before its first read: %s", exc)
            conn.close()


class BatchAcceptServer(asyncio.AbstractServer):
    """What `create_server` returns for plain TCP: the listening sockets and close()."""

    def __init__(self, loop: asyncio.AbstractEventLoop, listeners: list[_Listener]) -> None:
        self._loop = loop
        self._listeners = listeners

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(listener.sock for listener in self._listeners)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return any(listener.serving for listener in self._listeners)

    async def start_serving(self) -> None:
        for listener in self._listeners:
            listener.start()

    def close(self) -> None:
        """Stop accepting and close the listening sockets; open connections stay (the
        server above them shuts those down)."""
        for listener in self._listeners:
            listener.close()

    async def wait_closed(self) -> None:
        return None  # nothing of its own outlives close(); uvicorn waits for connections


def _bound(
    host: str | Iterable[str] | None, port: int | None, family: int, flags: int, reuse: bool
) -> list[socket.socket]:
    """Sockets bound to every address `host` names (all interfaces when None), as asyncio's
    create_server binds them."""
    hosts: list[str | None] = [host] if host is None or isinstance(host, str) else list(host)
    infos = {
        info
        for name in hosts
        for info in socket.getaddrinfo(
            name or None, port, family=family, type=socket.SOCK_STREAM, flags=flags
        )
    }
    sockets: list[socket.socket] = []
    try:
        for af, kind, proto, _, address in sorted(infos, key=lambda i: (i[0], str(i[4]))):
            sock = socket.socket(af, kind, proto)
            sockets.append(sock)
            if reuse:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if af == socket.AF_INET6:  # one socket per family, as asyncio does
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                raise OSError(
                    exc.errno,
                    f"error while attempting to bind on address {address!r}: {exc.strerror}",
                ) from None
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class Loop(uvloop.Loop):  # type: ignore[misc]
    """uvloop whose plain TCP servers accept every waiting connection each turn."""

    async def create_server(  # type: ignore[override]
        self,
        protocol_factory: ProtocolFactory,
        host: str | Iterable[str] | None = None,
        port: int | None = None,
        *,
        family: int = socket.AF_UNSPEC,
        flags: int = socket.AI_PASSIVE,
        sock: socket.socket | None = None,
        backlog: int = 100,
        ssl: Any = None,
        reuse_address: bool | None = None,
        start_serving: bool = True,
        **others: Any,
    ) -> asyncio.AbstractServer:
        if ssl is not None or others or (sock is not None and sock.family == socket.AF_UNIX):
            return await super().create_server(  # type: ignore[no-any-return]
                protocol_factory,
                host,
                port,
                family=family,
                flags=flags,
                sock=sock,
                backlog=backlog,
                ssl=ssl,
                reuse_address=reuse_address,
                start_serving=start_serving,
                **others,
            )
        if sock is not None:
            sockets = [sock]
        else:
            sockets = _bound(host, port, family, flags, reuse_address is not False)
        listeners = []
        for listening in sockets:
            listening.setblocking(False)
            listening.listen(backlog)
            listeners.append(_Listener(self, listening, protocol_factory))
        server = BatchAcceptServer(self, listeners)
        if start_serving:
            await server.start_serving()
        return server


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvicorn's loop factory (`loop="fleetgate.server.accept:new_event_loop"`)."""
    return Loop()
