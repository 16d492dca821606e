"""How the gateway is served. Each connection is the front that `server.front` names: the
gateway's own (`front.py`, the default) or uvicorn's httptools protocol with the same
limits (`connections.py`). One process on the gateway's own front runs under
`serving.Server` (listeners, start, signals, graceful shutdown); uvicorn's `Server` runs
the uvicorn front and `--workers N`. Both run on uvloop with `server/accept.py`'s
listeners."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import uvicorn

    from fleetgate.server.app import Gateway
    from fleetgate.server.serving import Server

FRONTS = {
    "fleetgate": "fleetgate.server.front:FrontProtocol",
    "uvicorn": "fleetgate.server.connections:GuardedHttpProtocol",
}
DEFAULT_FRONT = "fleetgate"


def uvicorn_kwargs(front: str = DEFAULT_FRONT) -> dict[str, object]:
    return {
        "loop": "fleetgate.server.accept:new_event_loop",  # uvloop; a burst is accepted at once
        "http": FRONTS[front],  # httptools, with header/body deadlines and caps
        "lifespan": "on",
        "ws": "none",  # no WebSocket endpoints: nothing to import for them
        "access_log": False,  # fleetgate's own (`server.access_log`) says more
        "log_level": "warning",  # `fleetgate.logs.configure` sets the levels it serves with
        "timeout_graceful_shutdown": 10,
        "proxy_headers": False,  # no X-Forwarded-* rewriting layer on every request
    }


def uvicorn_config(app: Gateway, **overrides: Any) -> uvicorn.Config:
    """The uvicorn settings fleetgate runs uvicorn with: `--workers N` and the uvicorn front,
    in `fleetgate serve` and the test harness alike."""
    import uvicorn  # only where uvicorn serves: its package costs a process about 2 MB

    front = app.pipeline.holder.fleet.config.server.front if app is not None else DEFAULT_FRONT
    return uvicorn.Config(app, **{**uvicorn_kwargs(front), **overrides})


def open_files_for_streams() -> int:
    """Raise this process's soft limit of open files to its hard limit; the new soft limit.

    Each proxied stream holds two sockets (the client's and the upstream's), and a
    provider's pool grows to thousands of connections: the soft limit many systems start
    a process with (1,024) would refuse connections at about 500 streams."""
    import resource  # POSIX only, and needed at start-up only

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):  # a container may refuse it: keep what was given
            pass
    return soft


def server_for(app: Gateway, host: str, port: int) -> Server | uvicorn.Server:
    """The server of one process: the gateway's own on its own front, else uvicorn's. Both
    have `run()`, `serve(sockets)`, `started` and `should_exit`."""
    if app.pipeline.holder.fleet.config.server.front == DEFAULT_FRONT:
        from fleetgate.server.serving import Server

        return Server(app, host, port)
    import uvicorn

    # the lines go through `fleetgate.logs.configure`, not uvicorn's logging configuration
    return uvicorn.Server(uvicorn_config(app, host=host, port=port, log_config=None))
