"""The picker's gRPC server: the ext_proc service and gRPC health, over a pipeline.

`fleetgate epp` (commands/epp.py) runs it beside the HTTP side of the same pipeline."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from fleetgate.epp.endpoints import EndpointBook
from fleetgate.epp.picker import Picker
from fleetgate.epp.protocol import EXT_PROC_SERVICE
from fleetgate.epp.service import add_to_server
from fleetgate.pipeline.core import Pipeline

log = logging.getLogger("fleetgate.epp")

SWEEP_SECONDS = 10.0
# the names a probe may ask about: the whole server (""), and these
HEALTH_NAMES = ("", "liveness", "readiness", EXT_PROC_SERVICE)


class PickerServer:
    """The gRPC side of one picker, over the process's pipeline."""

    def __init__(self, pipeline: Pipeline, host: str = "0.0.0.0", port: int = 9002) -> None:
        self.pipeline = pipeline
        self.host, self.port = host, port
        self.book = EndpointBook(pipeline.holder)
        self.picker = Picker(pipeline, self.book)
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
        await self.mark_ready(self.pipeline.ready)
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
