"""A pipeline with its control plane, as every front runs it: state in memory, or shared
through Redis when one is configured."""

from __future__ import annotations

import os

from fleetgate.config.schema import FleetConfig
from fleetgate.control.plane import REDIS_URL_ENV, ControlOptions, ControlPlane
from fleetgate.fleet import FleetHolder, build_fleet
from fleetgate.pipeline.core import Pipeline
from fleetgate.state.affinity import MemoryAffinity
from fleetgate.state.runtime import MemoryState, RuntimeState


def build_pipeline(
    config: FleetConfig, options: ControlOptions | None = None
) -> tuple[Pipeline, ControlPlane]:
    options = options or ControlOptions()
    state: RuntimeState = MemoryState()
    affinity = MemoryAffinity(config.routing.balancing.affinity)
    if options.redis_url or os.environ.get(REDIS_URL_ENV) or config.storage.redis_url:
        from fleetgate.state.affinity import RedisAffinity
        from fleetgate.state.redis_state import RedisState

        state = RedisState()
        affinity = RedisAffinity(config.routing.balancing.affinity)
    pipeline = Pipeline(FleetHolder(build_fleet(config)), state, affinity)
    control = ControlPlane(pipeline, config, options)
    if config.auth.enabled:  # with auth off the hot path does not even look at keys
        pipeline.guard = control.guard
    return pipeline, control
