"""The serving loop accepts a burst of new connections at once (server/accept.py).

Found by a per-request timeline under load (`benchmarks/README.md`): uvloop accepted one
connection per loop turn, so 64 connections opened together while 64 others streamed were
admitted over about a second, and the last ones' first requests waited that long (wrk's
stream-c64 p99 585-644 ms, the gateway's own view of the same requests at most 89 ms).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import time
from collections.abc import Callable

import pytest

from fleetgate.server import accept
from fleetgate.server.run import uvicorn_config
from tests.harness import Stack, deployment, provider


class _Counted(asyncio.Protocol):
    """Notes the loop turn each connection is made in; `all_made` is set at `expected`."""

    made: list[int]
    turn: Callable[[], int]
    expected: int
    all_made: asyncio.Event

    @classmethod
    def reset(cls, expected: int, turn: Callable[[], int] = lambda: 0) -> list[int]:
        cls.made, cls.turn, cls.expected = [], staticmethod(turn), expected  # type: ignore[assignment]
        cls.all_made = asyncio.Event()
        return cls.made

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.made.append(self.turn())
        if len(self.made) >= self.expected:
            self.all_made.set()


def _busy_turns(loop: asyncio.AbstractEventLoop, seconds: float) -> Callable[[], int]:
    """Make every loop turn take `seconds` of CPU (as open connections' work does under
    load); returns the count of turns so far."""
    turns = [0]

    def burn() -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
        turns[0] += 1
        loop.call_soon(burn)

    loop.call_soon(burn)
    return lambda: turns[0]


def _burst(port: int, n: int) -> list[socket.socket]:
    clients = []
    for _ in range(n):
        client = socket.socket()
        client.setblocking(False)
        with contextlib.suppress(BlockingIOError):  # the connection completes meanwhile
            client.connect(("127.0.0.1", port))
        clients.append(client)
    return clients


async def _accept_burst(n: int, **server: object) -> list[int]:
    loop = asyncio.get_running_loop()
    made = _Counted.reset(n, _busy_turns(loop, 0.002))
    srv = await loop.create_server(_Counted, **server)  # type: ignore[arg-type]
    port = srv.sockets[0].getsockname()[1]
    clients = _burst(port, n)
    try:
        await asyncio.wait_for(_Counted.all_made.wait(), 10)
    finally:
        srv.close()
        await srv.wait_closed()
        for client in clients:
            client.close()
    return made


@pytest.mark.parametrize("bind", ["host", "sock"])
def test_a_burst_of_connections_is_accepted_within_a_few_busy_turns(bind: str) -> None:
    if bind == "host":
        server: dict[str, object] = {"host": "127.0.0.1", "port": 0, "backlog": 2048}
    else:  # a socket bound beforehand, as `--workers N` and the test harness pass it
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = {"sock": sock, "backlog": 2048}
    loop = accept.new_event_loop()
    try:
        made = loop.run_until_complete(_accept_burst(64, **server))
    finally:
        loop.close()
    # uvloop's own server: one connection per turn, 64 turns
    assert max(made) - min(made) <= 3, made


def test_the_gateway_serves_on_the_batch_accepting_loop() -> None:
    factory = uvicorn_config(app=None).get_loop_factory()  # type: ignore[arg-type]
    assert factory is not None
    loop = factory()
    try:
        assert isinstance(loop, accept.Loop)
    finally:
        loop.close()


def test_a_closed_server_accepts_nothing_more() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        assert srv.is_serving()
        srv.close()
        await srv.wait_closed()
        assert not srv.is_serving()
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)

    loop = accept.new_event_loop()
    try:
        loop.run_until_complete(run())
    finally:
        loop.close()


class _OutOfFiles:
    """A listening socket whose first accept() fails as with a full descriptor table."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.failed = False
        self.failure: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def fileno(self) -> int:
        return self.sock.fileno()

    def accept(self) -> tuple[socket.socket, object]:
        if not self.failed:
            self.failed = True
            self.failure.set_result(None)
            raise OSError(errno.EMFILE, "Too many open files")
        return self.sock.accept()


def test_out_of_file_descriptors_pauses_accepting_then_resumes(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(accept, "_RETRY_SECONDS", 0.05)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        _Counted.reset(1)
        srv = await loop.create_server(_Counted, "127.0.0.1", 0)
        (listener,) = srv._listeners  # type: ignore[attr-defined]
        failing = _OutOfFiles(listener.sock)
        listener.sock = failing
        port = failing.sock.getsockname()[1]
        _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
        await asyncio.wait_for(_Counted.all_made.wait(), 5)  # accepted after the pause
        assert failing.failed and listener.serving
        writer.close()
        listener.sock = failing.sock
        srv.close()

    loop = accept.new_event_loop()
    try:
        loop.run_until_complete(run())
    finally:
        loop.close()
    assert any("ulimit -n" in r.getMessage() for r in caplog.records)


def test_a_server_closed_during_a_pause_stays_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accept, "_RETRY_SECONDS", 0.01)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0)
        (listener,) = srv._listeners  # type: ignore[attr-defined]
        failing = _OutOfFiles(listener.sock)
        listener.sock = failing
        port = failing.sock.getsockname()[1]
        _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
        await asyncio.wait_for(failing.failure, 5)  # paused, its restart due in 10 ms
        listener.sock = failing.sock
        srv.close()
        resumed = loop.create_future()
        loop.call_later(0.05, resumed.set_result, None)  # past the restart's time
        await resumed
        assert not srv.is_serving()
        writer.close()

    loop = accept.new_event_loop()
    errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    try:
        loop.run_until_complete(run())
    finally:
        loop.close()
    assert errors == []


def test_the_gateway_answers_every_connection_of_a_burst(stack: Stack) -> None:
    engine = stack.engine("a")
    stack.start_gateway(
        {"providers": [provider("pa", engine)], "deployments": [deployment("m", "pa")]}
    )
    port = int(stack.url.rsplit(":", 1)[1])
    request = b"GET /healthz HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"
    clients = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(32)]
    try:
        for client in clients:
            client.sendall(request)
        for client in clients:
            data = b""
            while chunk := client.recv(65536):
                data += chunk
            assert data.startswith(b"HTTP/1.1 200"), data[:100]
    finally:
        for client in clients:
            client.close()
