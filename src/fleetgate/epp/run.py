"""The picker's gRPC server: the ext_proc service and gRPC health, over a pipeline.

`fleetgate epp` (commands/epp.py) runs it beside the HTTP side of the same pipeline."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fleetgate.epp.endpoints import EndpointBook
from fleetgate.epp.grpc_calls import NOT_SERVING, SERVING, Dispatcher, Health
from fleetgate.epp.http2 import Http2Connection
from fleetgate.epp.picker import Picker
from fleetgate.epp.protocol import EXT_PROC_SERVICE
from fleetgate.epp.service import methods
from fleetgate.pipeline.core import Pipeline

log = logging.getLogger("fleetgate.epp")

SWEEP_SECONDS = 10.0
# the names a probe may ask about: the whole server (""), and these
HEALTH_NAMES = ("", "liveness", "readiness", EXT_PROC_SERVICE)


class PickerServer:
    """The gRPC side of one picker, over the process's pipeline."""

    def __init__(
        self,
        pipeline: Pipeline,
        host: str = "0.0.0.0",
        port: int = 9002,
        max_endpoints: int | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.host, self.port = host, port
        self.book = EndpointBook(pipeline.holder)
        self.picker = Picker(pipeline, self.book, max_endpoints)
        self.health = Health()
        self.dispatch = Dispatcher({**methods(self.picker), **self.health.methods()})
        self.connections: set[Http2Connection] = set()
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> int:
        """Listen; returns the port (useful with port 0)."""
        await self.book.start()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Http2Connection(self.dispatch, self.connections), self.host, self.port
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self.health.set("liveness", SERVING)
        await self.mark_ready(self.pipeline.ready)
        self._sweeper = loop.create_task(self._sweep())
        return self.port

    async def mark_ready(self, ready: bool) -> None:
        for name in ("", "readiness", EXT_PROC_SERVICE):
            self.health.set(name, SERVING if ready else NOT_SERVING)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            gone = self.picker.sweep()
            if gone:  # the data plane's observe path fails (it fails open)
                log.warning(
                    "%d picks ended with no answer seen past their provider's timeout; "
                    "is the data plane's observe filter reaching the picker?",
                    gone,
                )

    async def stop(self, grace: float | None = None) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        await self.book.stop()
        if self._server is None:
            return
        for name in self.health.statuses:
            self.health.set(name, NOT_SERVING)
        self._server.close()
        self._server = None
        for conn in list(self.connections):
            conn.goaway()  # no new calls; those under way may end within the grace
        idle = [conn.idle() for conn in self.connections]
        if idle and grace:
            await asyncio.wait(idle, timeout=grace)
        for conn in list(self.connections):
            conn.close()
