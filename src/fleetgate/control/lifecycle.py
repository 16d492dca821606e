"""Starting and stopping a pipeline with its control plane, in the one order every front
needs: the store before the first request, the last records flushed before the store
closes, the upstream pool last."""

from __future__ import annotations

from fleetgate.control.plane import ControlPlane
from fleetgate.pipeline.core import Pipeline


async def start(pipeline: Pipeline, control: ControlPlane | None) -> None:
    if control is not None:
        await control.start()
    await pipeline.start()
    if control is not None:
        control.serving()


async def stop(pipeline: Pipeline, control: ControlPlane | None) -> None:
    await pipeline.stop()  # flushes the last records into the store
    if control is not None:
        await control.stop()
    await pipeline.close()
