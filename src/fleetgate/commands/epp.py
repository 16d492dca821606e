"""`fleetgate epp`: the endpoint picker's process. One pipeline with its control plane; over
it, in one event loop, the picker's gRPC server and the proxy's own HTTP app on
`--http-port` (admin API, /metrics, dashboard, /readyz, the request log, with the same keys
as `fleetgate serve`): an operator manages a picker exactly like a proxy."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

log = logging.getLogger("fleetgate.epp")


@dataclass(frozen=True, slots=True)
class PickerArgs:
    """What `fleetgate epp` is told on its command line."""

    config_path: str
    host: str
    port: int
    http_host: str | None
    http_port: int
    endpoints: int | None = None  # the most endpoints a pick names (None: every one)


async def serve_picker(args: PickerArgs) -> None:
    from fleetgate.assemble import gateway_for
    from fleetgate.config import load_config_file
    from fleetgate.epp.run import PickerServer
    from fleetgate.server.run import server_for

    config = load_config_file(args.config_path)
    gateway = gateway_for(config)
    http = server_for(gateway, args.http_host or config.server.host, args.http_port)
    picker = PickerServer(gateway.pipeline, args.host, args.port, max_endpoints=args.endpoints)
    http_task = asyncio.get_running_loop().create_task(http.serve())
    # the HTTP side's start-up starts the pipeline and its control plane (store, state);
    # uvicorn says it is done only through `started`
    while not http.started:
        if http_task.done():
            await http_task  # it failed to start: its error
            return
        await asyncio.sleep(0.01)
    await picker.start()
    log.warning(
        "fleetgate epp: gRPC on %s:%d, HTTP on port %d", args.host, picker.port, args.http_port
    )
    try:
        await http_task
    finally:
        await picker.stop(grace=5)


def run(args: PickerArgs) -> None:
    from fleetgate.gc_tuning import tune_gc
    from fleetgate.server.accept import new_event_loop

    loop = new_event_loop()
    tune_gc()
    try:
        loop.run_until_complete(serve_picker(args))
    finally:
        loop.close()
