"""A loop that asks the workers something in the background, with its own upstream session."""

from __future__ import annotations

import asyncio
import contextlib

from fleetgate.execute.upstream import UpstreamSession


class BackgroundPoller:
    """Started with the gateway and stopped with it: `_run` loops, `session()` asks."""

    timeout = (5.0, 2.0)  # seconds: each ask in all, and its connect

    def __init__(self) -> None:
        self._session: UpstreamSession | None = None
        self._task: asyncio.Task[None] | None = None
        self.running = False
        self._first_round = asyncio.Event()  # set by `_run` when its first round ended

    async def settled(self, wait: float) -> bool:
        """Wait, at most `wait` seconds, for the first round to end; whether it did."""
        try:
            await asyncio.wait_for(self._first_round.wait(), timeout=wait)
        except TimeoutError:
            return False
        return True

    async def start(self) -> None:
        self.running = True
        self._task = asyncio.get_running_loop().create_task(self._run())

    def session(self) -> UpstreamSession:
        """The poller's session, opened at its first ask: a fleet with nothing to ask
        never loads the HTTP library behind it."""
        if self._session is None:
            self._session = UpstreamSession(*self.timeout)
        return self._session

    async def stop(self) -> None:
        self.running = False
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _run(self) -> None:
        raise NotImplementedError
