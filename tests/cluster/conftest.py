"""Replicas and outages for the cluster tests: more gateways on the shared loop, and the
real PostgreSQL behind a loopback TCP proxy that a test can cut and restore."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import pytest

from tests.harness import LoopThread, Stack


def _replica() -> Iterator[Stack]:
    """A gateway on an event loop (and thread) of its own, as a replica in another
    process would be: nothing it does is ordered with the others' work by a shared loop."""
    lt = LoopThread()
    s = Stack(lt)
    try:
        yield s
    finally:
        s.close()
        lt.close()


@pytest.fixture
def replica_b() -> Iterator[Stack]:
    yield from _replica()


@pytest.fixture
def replica_c() -> Iterator[Stack]:
    yield from _replica()


class TcpProxy:
    """Forwards a loopback port to `target`. `cut()` is an outage as a client sees one:
    every open connection is aborted and new ones are refused (nothing listens) until
    `restore()` listens on the same port again."""

    def __init__(self, lt: LoopThread, host: str, port: int) -> None:
        self.lt = lt
        self.target = (host, port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    def start(self) -> None:
        self.lt.run(self._listen())

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._open |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        self._open -= {writer, up_writer}

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.transport.abort()

    def cut(self) -> None:
        self.lt.run(self._cut())

    async def _cut(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._open):
            writer.transport.abort()
        self._server = None

    def restore(self) -> None:
        self.start()

    def close(self) -> None:
        if self._server is not None:
            self.cut()


@pytest.fixture
def pg_outage(pg_url: str, loop_thread: LoopThread) -> Iterator[tuple[str, TcpProxy]]:
    """A fresh PostgreSQL database reached through a proxy: (URL through it, the proxy)."""
    hostport, _, name = pg_url.rpartition("/")
    host, _, port = hostport.rpartition("@")[2].partition(":")
    proxy = TcpProxy(loop_thread, host, int(port or 5432))
    proxy.start()
    user = hostport.partition("//")[2].rpartition("@")[0]
    at = f"{user}@" if user else ""
    yield f"postgresql://{at}127.0.0.1:{proxy.port}/{name}", proxy
    proxy.close()
