"""A loop that asks the workers something in the background, with its own upstream session."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp

from fleetgate.execute.upstream import UpstreamSession


class BackgroundPoller:
    """Started with the gateway and stopped with it: `_run` loops, `_session` asks."""

    timeout = aiohttp.ClientTimeout(total=5.0, connect=2.0)

    def __init__(self) -> None:
        self._session: UpstreamSession | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._session = UpstreamSession(timeout=self.timeout)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
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
