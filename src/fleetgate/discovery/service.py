"""The background task that keeps discovered windows fresh (TTL), and on-demand refreshes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

from fleetgate.discovery.background import BackgroundPoller
from fleetgate.discovery.probes import DISCOVERABLE, ProbeCache, probe
from fleetgate.discovery.store import WindowStore
from fleetgate.fleet import Deployment, FleetHolder
from fleetgate.logs import fields

log = logging.getLogger("fleetgate.discovery")

PROBE_TIMEOUT = (5.0, 2.0)  # seconds: a probe in all, and its connect


def discoverable(dep: Deployment) -> bool:
    return dep.provider.discovery and dep.provider.kind in DISCOVERABLE


def _log_window_change(
    dep: Deployment, before: tuple[int | None, str], after: tuple[int | None, str]
) -> None:
    """One line when a deployment's effective window changes (not at every refresh)."""
    if before[0] == after[0]:
        return
    old = f"{before[0]} ({before[1]})" if before[0] is not None else "unknown"
    log.info(
        "discovered window changed: %s: %s -> %s (%s)",
        dep.id,
        old,
        after[0] if after[0] is not None else "unknown",
        after[1],
        extra=fields(
            event="window_changed",
            deployment=dep.id,
            before=before[0],
            after=after[0],
            source=after[1],
        ),
    )


class DiscoveryService(BackgroundPoller):
    timeout = PROBE_TIMEOUT

    def __init__(self, holder: FleetHolder, store: WindowStore) -> None:
        super().__init__()
        self.holder = holder
        self.store = store
        self.refreshes = 0  # completed refresh rounds (tests wait on it)
        # called when a deployment's effective window changed (its tokenizer may now be
        # one the estimate places by: `FingerprintService.wake`)
        self.on_change: Callable[[], None] | None = None
        self._wake = asyncio.Event()
        self._pending: set[str] = set()
        self._lock = asyncio.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await super().start()

    def request_refresh(self, deployment_id: str) -> None:
        """Ask the background task to re-probe one deployment soon (never blocks; callable
        from any thread, e.g. a config swap)."""
        self._pending.add(deployment_id)
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wake.set()
        else:
            loop.call_soon_threadsafe(self._wake.set)

    async def refresh(self, deployment_ids: Iterable[str] | None = None) -> int:
        """Probe the given deployments (default: all discoverable) now; returns how many."""
        fleet = self.holder.fleet
        if deployment_ids is None:
            deps = [d for d in fleet.deployments.values() if discoverable(d)]
        else:
            wanted = set(deployment_ids)
            deps = [d for d in fleet.deployments.values() if d.id in wanted and discoverable(d)]
        if not deps or not self.running:
            return 0
        async with self._lock:
            cache = ProbeCache(self.session())
            results = await asyncio.gather(*(probe(cache, d) for d in deps))
            changed = False
            for dep, evidence in zip(deps, results, strict=True):
                if evidence.error:  # shown by /v1/fleet/windows and logged: no secrets
                    evidence = replace(evidence, error=fleet.redactor.text(evidence.error))
                    log.info("discovery: %s: %s", dep.id, evidence.error)
                before = self.store.effective_window(dep)
                self.store.record(dep.id, evidence)
                after = self.store.effective_window(dep)
                _log_window_change(dep, before, after)
                changed = changed or before[0] != after[0]
            self.refreshes += 1
        if changed and self.on_change is not None:
            self.on_change()
        return len(deps)

    async def _run(self) -> None:
        while True:
            try:
                now = time.time()
                stale = [
                    d.id
                    for d in self.holder.fleet.deployments.values()
                    if discoverable(d) and (d.id in self._pending or self.store.stale(d.id, now))
                ]
                self._pending.clear()
                if stale:
                    await self.refresh(stale)
            except Exception:  # discovery must never take the gateway down
                log.exception("discovery refresh failed")
            self._first_round.set()
            ttl = self.store.capabilities.cache_ttl
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=max(0.5, min(ttl / 4, 30.0)))
