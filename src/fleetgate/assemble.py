"""How a serving process is put together: the pipeline and its control plane, the ASGI
front over them with the admin API and the dashboard mounted, and uvicorn to run it
(`fleetgate serve`, `fleetgate demo`, the test harness)."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
from typing import TYPE_CHECKING

import uvicorn

from fleetgate.config import FleetConfig, load_config_file
from fleetgate.gc_tuning import tune_gc
from fleetgate.server.run import open_files_for_streams, server_for, uvicorn_kwargs
from fleetgate.store.database import database_url, prepare

if TYPE_CHECKING:
    from fleetgate.control.plane import ControlOptions
    from fleetgate.server.app import App, Gateway

CONFIG_ENV = "FLEETGATE_CONFIG"


def build_gateway(config: FleetConfig, options: ControlOptions | None = None) -> Gateway:
    """A gateway with its control plane: store, request log, keys, admin API, Redis."""
    # imported here: a `--workers N` supervisor never serves, and needs none of it
    from fleetgate.control.build import build_pipeline
    from fleetgate.server.app import Gateway

    pipeline, control = build_pipeline(config, options)

    def admin() -> App:
        from fleetgate.admin.app import create_admin_app

        return create_admin_app(control)

    def dashboard() -> App:
        from fleetgate.ui.assets import Dashboard

        return Dashboard()

    return Gateway(pipeline, control, admin, dashboard)


def gateway_for(config: FleetConfig) -> Gateway:
    """The gateway with its control plane (store, admin API, keys, Redis when set)."""
    return build_gateway(config)


def app_from_env() -> Gateway:
    """Factory for multi-worker mode: each worker loads the config named by FLEETGATE_CONFIG."""
    app = gateway_for(load_config_file(os.environ[CONFIG_ENV]))
    tune_gc()
    return app


def _exit_cleanly_on_sigterm() -> None:
    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal; a graceful stop
    # should end with status 0, as a process manager expects.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))


def serve(config_path: str, host: str | None, port: int | None, workers: int) -> None:
    config = load_config_file(config_path)
    _exit_cleanly_on_sigterm()
    open_files_for_streams()  # before the workers fork: they inherit it
    host = host or config.server.host
    port = config.server.port if port is None else port
    if workers > 1:
        # an unusable store stops the start here, once, with one clear error: workers
        # that failed on their own would leave the supervisor exiting with status 0
        asyncio.run(prepare(database_url(config.storage.database_url, config.storage.data_dir)))
        os.environ[CONFIG_ENV] = os.path.abspath(config_path)
        gc.enable()  # the supervisor lives as long as its workers (each tunes its own)
        uvicorn.run(
            "fleetgate.assemble:app_from_env",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            **uvicorn_kwargs(),
        )
        return
    server = server_for(gateway_for(config), host, port)
    tune_gc()
    server.run()
