"""The uvicorn settings of the gateway: uvloop (with `server/accept.py`'s listeners) and
httptools."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import uvicorn

from fleetgate.server.connections import GuardedHttpProtocol

if TYPE_CHECKING:
    from fleetgate.server.app import Gateway


def uvicorn_kwargs() -> dict[str, object]:
    return {
        "loop": "fleetgate.server.accept:new_event_loop",  # uvloop; a burst is accepted at once
        "http": GuardedHttpProtocol,  # httptools, with header/body deadlines and caps
        "lifespan": "on",
        "ws": "none",  # no WebSocket endpoints: nothing to import for them
        "access_log": False,
        "log_level": os.environ.get("FLEETGATE_LOG_LEVEL", "warning"),
        "timeout_graceful_shutdown": 10,
        "proxy_headers": False,  # no X-Forwarded-* rewriting layer on every request
    }


def uvicorn_config(app: Gateway, **overrides: Any) -> uvicorn.Config:
    """The uvicorn settings every fleetgate server runs with: `fleetgate serve` and the
    test harness alike."""
    return uvicorn.Config(app, **{**uvicorn_kwargs(), **overrides})


def server_for(app: Gateway, host: str, port: int) -> uvicorn.Server:
    return uvicorn.Server(uvicorn_config(app, host=host, port=port))
