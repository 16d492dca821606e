"""How a serving process is put together: the pipeline and its control plane, the ASGI
front over them with the admin API and the dashboard mounted, and uvicorn to run it
(`fleetgate serve`, `fleetgate demo`, the test harness)."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

from fleetgate import __version__
from fleetgate.config import FleetConfig, load_config_file
from fleetgate.gc_tuning import tune_gc
from fleetgate.logs import DEFAULT_LEVEL, configure, fields
from fleetgate.server.run import open_files_for_streams, server_for, uvicorn_kwargs
from fleetgate.store.database import database_url, prepare

if TYPE_CHECKING:
    from fleetgate.control.plane import ControlOptions
    from fleetgate.server.app import App, Gateway

log = logging.getLogger("fleetgate")

CONFIG_ENV = "FLEETGATE_CONFIG"
LOG_LEVEL_ENV = "FLEETGATE_LOG_LEVEL"


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


def gateway_for(config: FleetConfig, path: str | None = None) -> Gateway:
    """The gateway with its control plane (store, admin API, keys, Redis when set);
    `path`: its fleet file, which SIGHUP and `POST /admin/reload` read again."""
    from fleetgate.control.plane import ControlOptions

    return build_gateway(config, ControlOptions(config_path=path))


def announce(gateway: Gateway, host: str, port: int, workers: int = 1) -> None:
    """Log the start line once the gateway is ready (`server/start_line.py`)."""
    from fleetgate.server.start_line import start_line

    def ready() -> None:
        control = gateway.control
        log.info(
            start_line(
                gateway.pipeline.holder.fleet,
                f"http://{host}:{port}",
                admin=bool(control is not None and control.admin_key),
                auth=bool(control is not None and control.guard.enabled),
                store=control.db.shown_url if control else None,
                redis=bool(control is not None and control.redis_url),
                workers=workers,
            ),
            extra=fields(event="start", version=__version__, address=f"{host}:{port}"),
        )

    gateway.on_ready = ready


def log_level() -> str:
    """`--log-level`, else FLEETGATE_LOG_LEVEL, else info."""
    return os.environ.get(LOG_LEVEL_ENV, DEFAULT_LEVEL).lower()


def app_from_env() -> Gateway:
    """Factory for multi-worker mode: each worker loads the config named by FLEETGATE_CONFIG."""
    path = os.environ[CONFIG_ENV]
    config = load_config_file(path)
    configure(log_level(), config.server.log_format)
    app = gateway_for(config, path)
    tune_gc()
    return app


def _exit_cleanly_on_sigterm() -> None:
    # uvicorn (`--workers N`, the uvicorn front) shuts down gracefully on SIGTERM, then
    # re-raises the signal; a graceful stop should end with status 0, as a process manager
    # expects. The gateway's own server ends with 0 by itself.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))


def serve(
    config_path: str,
    host: str | None,
    port: int | None,
    workers: int,
    level: str | None = None,
) -> None:
    if level is not None:
        os.environ[LOG_LEVEL_ENV] = level  # the workers of `--workers N` read it too
    config = load_config_file(config_path)
    configure(log_level(), config.server.log_format)
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
        import uvicorn  # its supervisor runs the workers; one process runs without it

        uvicorn.run(
            "fleetgate.assemble:app_from_env",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            # the lines go through `configure`
            **{**uvicorn_kwargs(config.server.front), "log_config": None},
        )
        return
    gateway = gateway_for(config, os.path.abspath(config_path))
    announce(gateway, host, port)
    server = server_for(gateway, host, port)
    tune_gc()
    try:
        server.run()
    except OSError as exc:  # from binding: one line that says what to do, not a traceback
        print(
            f"fleetgate serve: cannot listen on {host}:{port}: {exc.strerror or exc}. "
            "Pick a free port with --port (or server.port), or stop the process that holds it.",
            file=sys.stderr,
        )
        sys.exit(1)
