"""`fleetgate epp`: the picker's gRPC server and, in the same process and loop, the HTTP side
(admin API, /metrics, dashboard, /readyz, request log), served as `fleetgate serve` serves
them: an operator manages a picker exactly like a proxy."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from fleetgate.epp.endpoints import EndpointBook
from fleetgate.epp.interim import GatewayStages
from fleetgate.epp.picker import Picker
from fleetgate.epp.protocol import EXT_PROC_SERVICE
from fleetgate.epp.service import add_to_server

if TYPE_CHECKING:
    from fleetgate.server.app import Gateway

log = logging.getLogger("fleetgate.epp")

SWEEP_SECONDS = 10.0
# the names a probe may ask about: the whole server (""), and these
HEALTH_NAMES = ("", "liveness", "readiness", EXT_PROC_SERVICE)


class PickerServer:
    """The gRPC side of one picker, over a gateway whose HTTP side serves the rest."""

    def __init__(self, gateway: Gateway, host: str = "0.0.0.0", port: int = 9002) -> None:
        self.gateway = gateway
        self.host, self.port = host, port
        self.book = EndpointBook(gateway.holder)
        self.picker = Picker(GatewayStages(gateway), self.book)
        self.health = health.aio.HealthServicer()
        self._server: grpc.aio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> int:
        """Listen; returns the port (useful with port 0)."""
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        add_to_server(server, self.picker)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        self.port = server.add_insecure_port(f"{self.host}:{self.port}")
        await self.book.start()
        await server.start()
        self._server = server
        serving = health_pb2.HealthCheckResponse.SERVING
        await self.health.set("liveness", serving)
        await self.mark_ready(self.gateway.ready)
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        return self.port

    async def mark_ready(self, ready: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if ready
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", "readiness", EXT_PROC_SERVICE):
            await self.health.set(name, status)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            gone = self.picker.sweep()
            if gone:
                log.debug("%d picks ended unobserved", gone)

    async def stop(self, grace: float | None = None) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        await self.book.stop()
        if self._server is not None:
            await self.health.enter_graceful_shutdown()
            await self._server.stop(grace)
            self._server = None


async def serve_picker(
    config_path: str, host: str, port: int, http_host: str | None, http_port: int
) -> None:
    from fleetgate.config import load_config_file
    from fleetgate.server.run import gateway_for, server_for

    config = load_config_file(config_path)
    gateway = gateway_for(config)
    http = server_for(gateway, http_host or config.server.host, http_port)
    picker = PickerServer(gateway, host, port)
    http_task = asyncio.get_running_loop().create_task(http.serve())
    while not http.started:  # the HTTP side's start-up runs the gateway's (store, state)
        if http_task.done():
            await http_task
            return
        await asyncio.sleep(0.01)
    await picker.start()
    log.warning("fleetgate epp: gRPC on %s:%d, HTTP on port %d", host, picker.port, http_port)
    try:
        await http_task
    finally:
        await picker.stop(grace=5)


def run(config_path: str, host: str, port: int, http_host: str | None, http_port: int) -> None:
    from fleetgate.gc_tuning import tune_gc
    from fleetgate.server.accept import new_event_loop

    loop = new_event_loop()
    tune_gc()
    try:
        loop.run_until_complete(serve_picker(config_path, host, port, http_host, http_port))
    finally:
        loop.close()
