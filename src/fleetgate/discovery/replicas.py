"""The names among the providers' `endpoints`, resolved now and then: when what a name
resolves to changes, the fleet is rebuilt with one replica per address
(`config/replicas.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable

from fleetgate.config.replicas import RESOLVED, replica_names
from fleetgate.config.schema import FleetConfig

log = logging.getLogger("fleetgate.replicas")

REFRESH_SECONDS = 5.0


async def resolve_names(names: set[str]) -> dict[str, tuple[str, ...]]:
    loop = asyncio.get_running_loop()
    out: dict[str, tuple[str, ...]] = {}
    for name in sorted(names):
        try:
            infos = await loop.getaddrinfo(name, None, type=socket.SOCK_STREAM)
        except OSError as exc:
            log.warning("replicas: cannot resolve %s: %s", name, exc)
            continue
        out[name] = tuple(sorted({str(info[4][0]) for info in infos}))
    return out


class NamesRefresher:
    """Resolves names when started, then every `REFRESH_SECONDS` until stopped: `refresh`
    says what is resolved and what follows from it. A refresh that fails is logged and the
    loop goes on."""

    _task: asyncio.Task[None] | None = None

    async def refresh(self) -> object:
        raise NotImplementedError

    async def start(self) -> None:
        await self.refresh()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_SECONDS)
            try:
                await self.refresh()
            except Exception:  # a bad answer must not end the loop
                log.exception("%s: refresh failed", type(self).__name__)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


class ReplicaNames(NamesRefresher):
    """Resolves the fleet's replica names now and then; `rebuild()` swaps in the fleet built
    again from the holder's config when they resolve to other addresses."""

    def __init__(self, config: Callable[[], FleetConfig], rebuild: Callable[[], None]) -> None:
        self._config = config
        self._rebuild = rebuild

    async def refresh(self) -> bool:
        """Resolve once; True when the replicas changed (and the fleet was rebuilt)."""
        names = replica_names(self._config())
        if not names:
            return False
        found = await resolve_names(names)
        changed = any(RESOLVED.get(name) != addresses for name, addresses in found.items())
        if changed:
            RESOLVED.update(found)
            self._rebuild()
        return changed
