"""Test harness: fake engines and the gateway on loopback, in a background event loop.

Tests drive them from the main thread through real clients (the openai SDK, aiohttp).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from fleetgate.assemble import build_gateway
from fleetgate.config import validate_config
from fleetgate.control.plane import ControlOptions
from fleetgate.fleet import FleetHolder, build_fleet
from fleetgate.pipeline.core import Pipeline
from fleetgate.server.accept import new_event_loop as serving_loop
from fleetgate.server.app import Gateway
from fleetgate.server.run import server_for
from fleetgate.testing import FakeAnthropic, FakeEngine, FakeOllama

T = TypeVar("T")


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "") -> None:
    """Wait for a condition, failing the test when it does not hold within `timeout`."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {what}")
        time.sleep(0.005)


def wait_for_own_fits(gateway: Gateway, deployments: tuple[str, ...], timeout: float) -> None:
    """Wait until each deployment's estimate runs on its own fit (its fingerprint, or
    enough answers), not its family's table."""
    book = gateway.pipeline.state.calibration
    wait_until(
        lambda: all(book.own_fit(d) is not None for d in deployments),
        timeout,
        f"{', '.join(deployments)} on their own fit",
    )


async def until(predicate: Callable[[], bool], within: float = 5.0, what: str = "") -> None:
    """`wait_until` for a test that runs on the loop itself."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within}s: {what}")
        await asyncio.sleep(0.005)


def client_requests(engine: FakeEngine) -> list[Any]:
    """What an engine received from clients, through the gateway: the gateway's own asks
    left out (its health checks, `GET /health`, and the model listing a tokenizer
    fingerprint reads the engine's identity from, `GET /v1/models`)."""
    return [
        r
        for r in engine.requests
        if r.path != "/health" and (r.method, r.path) != ("GET", "/v1/models")
    ]


class LoopThread:
    def __init__(self) -> None:
        self.loop = serving_loop()  # the loop `fleetgate serve` runs on (uvloop)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def fleet_config(data: dict[str, Any]) -> Any:
    config, problems = validate_config(data)
    assert config is not None, [str(p) for p in problems]
    return config


class Stack:
    """Some fake engines and one gateway in front of them."""

    def __init__(self, lt: LoopThread) -> None:
        self.lt = lt
        self.engines: dict[str, FakeEngine] = {}
        self.workers: dict[str, FakeOllama] = {}
        self.apis: dict[str, FakeAnthropic] = {}
        self.gateway: Gateway | None = None
        self._server: Any = None  # `server_for`'s: the gateway's own, or uvicorn's
        self._task: asyncio.Future[Any] | None = None
        self.url = ""

    def engine(self, name: str, **kwargs: Any) -> FakeEngine:
        engine = FakeEngine(name, **kwargs)
        self.lt.run(engine.start())
        self.engines[name] = engine
        return engine

    def ollama(self, name: str, *models: Any, **kwargs: Any) -> FakeOllama:
        worker = FakeOllama(name, list(models) or None, **kwargs)
        self.lt.run(worker.start())
        self.workers[name] = worker
        return worker

    def anthropic(self, name: str, **kwargs: Any) -> FakeAnthropic:
        api = FakeAnthropic(name, **kwargs)
        self.lt.run(api.start())
        self.apis[name] = api
        return api

    def start_gateway(
        self, config: dict[str, Any], options: ControlOptions | None = None
    ) -> Gateway:
        """Serve a gateway; with `options` it runs with its control plane (store, admin)."""
        if options is None:
            gateway = Gateway(Pipeline(FleetHolder(build_fleet(fleet_config(config)))))
        else:
            gateway = build_gateway(fleet_config(config), options)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = server_for(gateway, "127.0.0.1", port)  # as `fleetgate serve` runs it
        self._task = asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), self.lt.loop)
        task = self._task
        wait_until(lambda: server.started or task.done(), 20, "gateway started")
        if not server.started:
            task.result()  # start-up failed: raise its error
            raise AssertionError("the gateway exited during start-up")
        self.gateway, self._server = gateway, server
        self.url = f"http://127.0.0.1:{port}"
        return gateway

    def stop_gateway(self) -> None:
        """Shut the gateway down gracefully (lifespan shutdown included)."""
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            self._task.result(15)
        self._server = self._task = None

    def close(self) -> None:
        self.stop_gateway()
        for engine in self.engines.values():
            self.lt.run(engine.stop())
        for worker in self.workers.values():
            self.lt.run(worker.stop())
        for api in self.apis.values():
            self.lt.run(api.stop())


def gateway_on_one_engine(stack: Stack, **server: Any) -> None:
    """A gateway with `server` settings in front of one fake engine (`a`, model `m`)."""
    engine = stack.engine("a")
    stack.start_gateway(
        {
            "server": server,
            "providers": [provider("pa", engine)],
            "deployments": [deployment("m", "pa")],
        }
    )


def raw_connection(stack: Stack) -> socket.socket:
    """A plain TCP connection to the gateway, for bytes no HTTP client would send."""
    host, port = stack.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class Recording:
    """A transport that keeps what each write call sent (no socket under it)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def writelines(self, parts: Any) -> None:
        self.writes.append(b"".join(parts))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...


class Served(Protocol):
    """An upstream on loopback: a fake engine, or one of the tests' own servers."""

    @property
    def url(self) -> str: ...


def provider(name: str, engine: Served, **extra: Any) -> dict[str, Any]:
    return {"id": name, "kind": "vllm", "base_url": engine.url + "/v1", **extra}


def deployment(model: str, provider_id: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "provider": provider_id, "id": provider_id, **extra}


def ollama_provider(name: str, worker: Served, **extra: Any) -> dict[str, Any]:
    return {"id": name, "kind": "ollama", "base_url": worker.url, **extra}


def anthropic_provider(name: str, api: Served, **extra: Any) -> dict[str, Any]:
    return {"id": name, "kind": "anthropic", "base_url": api.url + "/v1", "api_key": "k", **extra}
