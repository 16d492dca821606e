"""One process serving the gateway on its own front, without uvicorn's process machinery.

`fleetgate serve` (one process), `fleetgate epp`'s HTTP side, the demo and the test harness
run the gateway's own front (`front.py`) under this server: it starts the gateway, binds the
listeners (`accept.py`'s loop), keeps the `date` header each answer carries, stops on
SIGINT or SIGTERM, and shuts down gracefully. uvicorn still runs `--workers N` and the
`server.front: uvicorn` front; importing it (its command line, its logging configuration,
multiprocessing) would cost every single-process gateway about 2 MB and part of its start.

The graceful shutdown, as uvicorn's: the listeners close, each connection closes once its
answer has ended (an idle one at once), the server waits up to `graceful_seconds` for them
and then cancels what is left, and the gateway stops (its store, its writer). A second
SIGINT stops waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
import time
from email.utils import formatdate
from typing import TYPE_CHECKING, Any

from fleetgate.server.accept import new_event_loop
from fleetgate.server.front import FrontProtocol

if TYPE_CHECKING:
    from fleetgate.server.app import Gateway

log = logging.getLogger("fleetgate.server")

BACKLOG = 2048  # connections the kernel queues before they are accepted (as uvicorn's)
GRACEFUL_SECONDS = 10.0
SERVER_HEADER = (b"server", b"fleetgate")
_POLL_SECONDS = 0.1  # how often a graceful shutdown looks whether connections are done


class ServerState:
    """What every connection of one server shares (the front reads it as uvicorn's)."""

    def __init__(self) -> None:
        self.connections: set[Any] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.total_requests = 0
        self.default_headers: list[tuple[bytes, bytes]] = []

    def date_now(self) -> None:
        date = formatdate(time.time(), usegmt=True).encode()
        self.default_headers = [(b"date", date), SERVER_HEADER]


class _AppHolder:
    """The front takes its app from a settings object (uvicorn's `Config` when uvicorn
    serves it): this one only holds the app."""

    loaded = True

    def __init__(self, app: Gateway) -> None:
        self.loaded_app = app

    def load(self) -> None:
        return None


class Server:
    """Serves one gateway on `host:port` (or on the sockets given to `serve`)."""

    def __init__(
        self, app: Gateway, host: str, port: int, graceful_seconds: float = GRACEFUL_SECONDS
    ) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.graceful_seconds = graceful_seconds
        self.server_state = ServerState()
        self.started = False
        self.force_exit = False
        self._should_exit = False
        self._exit: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._servers: list[asyncio.AbstractServer] = []

    # ---- stopping, from any thread -------------------------------------------------------
    @property
    def should_exit(self) -> bool:
        return self._should_exit

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._should_exit = value
        loop, event = self._loop, self._exit
        if value and loop is not None and event is not None and not loop.is_closed():
            loop.call_soon_threadsafe(event.set)

    def _on_signal(self, sig: int) -> None:
        if self._should_exit and sig == signal.SIGINT:
            self.force_exit = True  # a second Ctrl-C: stop waiting for connections
        self.should_exit = True

    # ---- running -------------------------------------------------------------------------
    def run(self) -> None:
        """Serve until SIGINT or SIGTERM, then shut down gracefully (the process's main)."""
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            runner.run(self.serve())

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._exit = asyncio.Event()
        if self._should_exit:  # asked to stop before it started
            return
        with self._signals():  # a signal during the start stops it once started
            await self.app.startup()
            try:
                await self._listen(sockets)
            except OSError:  # the address is taken or not this host's: the caller says so
                await self.app.shutdown()
                raise
            self.started = True
            ticking = self._loop.create_task(self._keep_date())
            try:
                await self._exit.wait()
            finally:
                ticking.cancel()
            await self._shut_down(sockets)

    async def _listen(self, sockets: list[socket.socket] | None) -> None:
        loop = asyncio.get_running_loop()
        holder = _AppHolder(self.app)

        def front() -> asyncio.Protocol:
            return FrontProtocol(holder, self.server_state, {}, loop)

        self.server_state.date_now()
        if sockets:
            for sock in sockets:
                self._servers.append(await loop.create_server(front, sock=sock, backlog=BACKLOG))
        else:
            self._servers.append(
                await loop.create_server(front, host=self.host, port=self.port, backlog=BACKLOG)
            )

    async def _keep_date(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.server_state.date_now()

    @contextlib.contextmanager
    def _signals(self) -> Any:
        loop = self._loop
        assert loop is not None
        if threading.current_thread() is not threading.main_thread():
            yield  # a server in a thread is stopped through `should_exit`
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        for sig in handled:
            loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            yield
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)

    async def _shut_down(self, sockets: list[socket.socket] | None) -> None:
        for server in self._servers:
            server.close()
        for sock in sockets or ():
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        state = self.server_state
        try:
            async with asyncio.timeout(self.graceful_seconds):
                # the front adds and drops its connections and tasks in its own callbacks:
                # a stop looks ten times a second rather than hook into each of them
                while (state.connections or state.tasks) and not self.force_exit:  # noqa: ASYNC110
                    await asyncio.sleep(_POLL_SECONDS)
        except TimeoutError:
            log.error(
                "graceful shutdown took more than %.0f s: cancelling %d unfinished request(s)",
                self.graceful_seconds,
                len(state.tasks),
            )
            for task in list(state.tasks):
                task.cancel()
        for server in self._servers:
            await server.wait_closed()
        if not self.force_exit:
            await self.app.shutdown()
