"""The uvicorn front's connection: uvicorn's httptools protocol with the limits of
`limits.py` (header and body deadlines, an early 413, a cap on open connections, one
keep-alive timer per connection, `guard.py`), and two more things:

- A lost connection cancels the handling of its request at once, through a hook the app
  sets in the request's scope (`asgi.DISCONNECT_HOOK`): no task per request waits for it.
- What a response sends in one turn of the loop leaves in one write (`response_cycle.py`).

`server.front: uvicorn` serves through it (`server/run.py`); the default front is
`front.py`'s own protocol.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from fleetgate.server.guard import BODY, DONE, HEAD, ConnectionGuard
from fleetgate.server.limits import declared_length, declared_too_large, limits_of
from fleetgate.server.response_cycle import ResponseCycle
from fleetgate.web.asgi import DISCONNECT_HOOK


class GuardedHttpProtocol(ConnectionGuard, HttpToolsProtocol):
    """uvicorn's httptools protocol plus header and body deadlines, an early 413 and a cap
    on open connections (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits_of(self.app)
        self._phase = 0

    # ---- the connection ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._admit(transport, len(self.connections))

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_clocks()
        super().connection_lost(exc)
        self._tell_app()

    def _tell_app(self) -> None:
        """The current request's client is gone: call what the app hooked on it (the
        cancellation of its handling, `asgi.DisconnectWatch`)."""
        cycle = self.cycle
        if cycle is not None and cycle.disconnected:
            hook = cycle.scope.get(DISCONNECT_HOOK)
            if hook is not None:
                hook()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        cycle = self.cycle
        self._after_read(self._phase, cycle is not None and not cycle.response_complete)

    # ---- the parser's callbacks ---------------------------------------------------------
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._phase = HEAD

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        declared = declared_length(self.headers)
        if declared is not None and declared > self.limits.max_body_bytes:
            self._refuse(413, declared_too_large(self.limits, declared))
            return
        super().on_headers_complete()
        cycle = self.cycle
        if type(cycle) is RequestResponseCycle:
            # uvicorn has just built its cycle; the task that runs the app on it starts at
            # the loop's next turn, so the answer can still go through ours (joined writes)
            cycle.__class__ = ResponseCycle
            cycle.loop = self.loop
        self._phase = BODY
        # the app may hook its disconnect handling here (before it runs: its task starts
        # at the loop's next turn)
        self.scope[DISCONNECT_HOOK] = None  # type: ignore[literal-required]

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        super().on_message_complete()
        self._phase = DONE

    # ---- keep-alive ---------------------------------------------------------------------
    def _unset_keepalive_if_required(self) -> None:
        """uvicorn calls this when bytes arrive: the connection is busy. Its keep-alive
        timer stays armed (`_keep_alive_check` then finds it busy)."""
        self._idle_since = None

    def on_response_complete(self) -> None:
        """uvicorn's, but for the keep-alive timer: armed only when none is."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:  # a pipelined request waits: start it
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self._idle()

    # ---- what a refusal asks (guard.py) ------------------------------------------------
    def _answering(self) -> bool:
        cycle = self.cycle
        return cycle is not None and cycle.response_started and not cycle.response_complete

    def _refused_url(self) -> bytes:
        return getattr(self, "url", b"")

    def _abandon(self) -> None:
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app, if it waits on the body, hears it at once
            cycle.message_event.set()
            self._tell_app()
