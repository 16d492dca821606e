"""What a client connection keeps of `limits.py`, in both server fronts' protocols
(`front.py`, `connections.py`): the cap on open connections, the header and body
deadlines of the request under way, the keep-alive timer of an idle connection, and the
refusal that answers a broken limit and closes the connection.

The clocks cost nothing on the common path: a deadline is armed only while a request's head or
body is incomplete after a read, which a client that sends its request at once never sees;
the keep-alive timer is one per connection that re-arms itself while the connection is
busy (uvicorn made a timer when each response ended and cancelled it when the next
request arrived, ~2 µs a request).
"""

from __future__ import annotations

import asyncio

from fleetgate.errors import GatewayError
from fleetgate.server.limits import (
    ConnectionLimits,
    close_refused,
    no_delay,
    refusal_bytes,
    timed_out,
    too_many_connections,
)

HEAD, BODY, DONE = 1, 2, 3  # where the current request stands (0: none begun yet)


class ConnectionGuard:
    """Mixed into a protocol that has `loop`, `transport` and `limits`, and says what its
    request under way is doing (`_answering`, `_abandon`, `_refused_url`)."""

    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    limits: ConnectionLimits
    _deadline: asyncio.TimerHandle | None = None
    _deadline_for = 0  # the phase the armed deadline guards
    _idle_since: float | None = None  # when the last response ended; None: busy
    timeout_keep_alive_task: asyncio.TimerHandle | None = None
    _refused = False

    # ---- what the protocol says -------------------------------------------------------
    def _answering(self) -> bool:
        """Whether an answer has started and not ended."""
        raise NotImplementedError

    def _abandon(self) -> None:
        """The request under way, if any, will get no more of its client: tell it."""
        raise NotImplementedError

    def _refused_url(self) -> bytes:
        """The target of the request being read (its path picks the error's shape)."""
        raise NotImplementedError

    # ---- a new connection -------------------------------------------------------------
    def _admit(self, transport: asyncio.BaseTransport, open_connections: int) -> None:
        """A new connection: refused past `max_connections`, else its header deadline
        runs (a silent connection is a slow one)."""
        no_delay(transport)
        if open_connections > self.limits.max_connections:
            self._refuse(503, too_many_connections(self.limits))
            return
        self._arm(HEAD, self.limits.header_timeout)

    def _refuse(self, status: int, exc: GatewayError) -> None:
        """Answer `exc` (when no answer is under way) and close the connection."""
        self._refused = True
        self._disarm()
        busy = self._answering()
        if not busy:
            self.transport.write(refusal_bytes(status, exc, self._refused_url()))
        self._abandon()
        if busy:
            self.transport.close()
        else:
            close_refused(self.transport, self.loop)

    def _after_read(self, phase: int, answering: bool) -> None:
        """Arm the deadline of what a read left incomplete; `answering`: the request is
        whole and its answer under way (the app may take its time)."""
        if phase == HEAD:
            if self._deadline_for != HEAD:
                self._arm(HEAD, self.limits.header_timeout)
        elif phase == BODY:
            if self._deadline_for != BODY:
                self._arm(BODY, self.limits.body_timeout)
        elif phase == DONE and answering:
            self._disarm()
        elif self._deadline is None:
            self._arm(HEAD, self.limits.header_timeout)  # bytes that begin no request

    def _arm(self, phase: int, seconds: float) -> None:
        self._disarm()
        self._deadline_for = phase
        self._deadline = self.loop.call_later(seconds, self._expired, phase)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._deadline_for = 0

    def _expired(self, phase: int) -> None:
        self._deadline = None
        self._deadline_for = 0
        if not self.transport.is_closing():
            self._refuse(408, timed_out(self.limits, phase == HEAD))

    # ---- keep-alive ---------------------------------------------------------------------
    def _idle(self) -> None:
        """The last response ended and nothing waits: the keep-alive time runs from now."""
        self._idle_since = now = self.loop.time()
        if self.timeout_keep_alive_task is None:
            self.timeout_keep_alive_task = self.loop.call_at(
                now + self.limits.keep_alive, self._keep_alive_check
            )

    def _keep_alive_check(self) -> None:
        """Close the connection if it has been idle for the keep-alive time, else wait for
        when it may have been (a busy one is armed again when its response ends)."""
        self.timeout_keep_alive_task = None
        since = self._idle_since
        if since is None or self.transport.is_closing():
            return
        due = since + self.limits.keep_alive
        if self.loop.time() < due:
            self.timeout_keep_alive_task = self.loop.call_at(due, self._keep_alive_check)
        else:
            self.transport.close()

    def _stop_clocks(self) -> None:
        self._disarm()
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
