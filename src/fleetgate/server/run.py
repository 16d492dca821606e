"""Running the gateway under uvicorn: uvloop (with `server/accept.py`'s listeners) and
httptools."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

import uvicorn

from fleetgate.config import FleetConfig, load_config_file
from fleetgate.gc_tuning import tune_gc
from fleetgate.logs import DEFAULT_LEVEL, configure
from fleetgate.server.connections import GuardedHttpProtocol
from fleetgate.store.database import database_url, prepare

if TYPE_CHECKING:
    from fleetgate.server.app import Gateway

CONFIG_ENV = "FLEETGATE_CONFIG"
LOG_LEVEL_ENV = "FLEETGATE_LOG_LEVEL"


def _uvicorn_kwargs() -> dict[str, object]:
    return {
        "loop": "fleetgate.server.accept:new_event_loop",  # uvloop; a burst is accepted at once
        "http": GuardedHttpProtocol,  # httptools, with header/body deadlines and caps
        "lifespan": "on",
        "ws": "none",  # no WebSocket endpoints: nothing to import for them
        "access_log": False,  # fleetgate's own (`server.access_log`) says more
        "log_level": "warning",  # `fleetgate.logs.configure` sets the levels it serves with
        "timeout_graceful_shutdown": 10,
        "proxy_headers": False,  # no X-Forwarded-* rewriting layer on every request
    }


def gateway_for(config: FleetConfig) -> Gateway:
    """The gateway with its control plane (store, admin API, keys, Redis when set)."""
    # imported here: a `--workers N` supervisor never serves, and needs none of it
    from fleetgate.server.control import build_gateway

    return build_gateway(config)


def log_level() -> str:
    """`--log-level`, else FLEETGATE_LOG_LEVEL, else info."""
    return os.environ.get(LOG_LEVEL_ENV, DEFAULT_LEVEL).lower()


def app_from_env() -> Gateway:
    """Factory for multi-worker mode: each worker loads the config named by FLEETGATE_CONFIG."""
    config = load_config_file(os.environ[CONFIG_ENV])
    configure(log_level(), config.server.log_format)
    app = gateway_for(config)
    tune_gc()
    return app


def uvicorn_config(app: Gateway, **overrides: Any) -> uvicorn.Config:
    """The uvicorn settings every fleetgate server runs with: `fleetgate serve` and the
    test harness alike."""
    return uvicorn.Config(app, **{**_uvicorn_kwargs(), **overrides})


def server_for(app: Gateway, host: str, port: int, **overrides: Any) -> uvicorn.Server:
    return uvicorn.Server(uvicorn_config(app, host=host, port=port, **overrides))


def _exit_cleanly_on_sigterm() -> None:
    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal; a graceful stop
    # should end with status 0, as a process manager expects.
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
    host = host or config.server.host
    port = config.server.port if port is None else port
    if workers > 1:
        # an unusable store stops the start here, once, with one clear error: workers
        # that failed on their own would leave the supervisor exiting with status 0
        asyncio.run(prepare(database_url(config.storage.database_url, config.storage.data_dir)))
        os.environ[CONFIG_ENV] = os.path.abspath(config_path)
        gc.enable()  # the supervisor lives as long as its workers (each tunes its own)
        uvicorn.run(
            "fleetgate.server.run:app_from_env",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            **{**_uvicorn_kwargs(), "log_config": None},  # the lines go through `configure`
        )
        return
    server = server_for(gateway_for(config), host, port, log_config=None)
    tune_gc()
    server.run()
