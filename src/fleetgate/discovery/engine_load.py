"""The background task that polls each engine's own load (queue, running, KV cache), and
the store routing reads it from.

Only engines that can matter are polled: vLLM, SGLang and llama.cpp providers of a
deployment that has a peer of equal rank (same model, priority, declared window and tier);
a deployment without one has nobody to rank against. Each provider is asked once per
interval, off the hot path, through an `UpstreamSession` (which never follows a redirect);
a failed poll keeps the error and no numbers, so it never demotes anyone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace

import orjson

from fleetgate.discovery.background import BackgroundPoller
from fleetgate.discovery.engine_metrics import (
    GAUGES,
    EngineLoad,
    parse_llamacpp_slots,
    parse_metrics,
)
from fleetgate.discovery.probes import provider_headers, provider_url
from fleetgate.fleet import Deployment, Fleet, FleetHolder, Provider

log = logging.getLogger("fleetgate.engine_load")

POLL_TIMEOUT = (2.0, 1.0)  # seconds: a poll in all, and its connect
STALE_INTERVALS = 3  # a sample older than this many intervals no longer counts
_MIN_STALE = 2.0  # seconds, whatever the interval


class EngineLoads:
    """The latest sample per deployment. Routing reads it synchronously."""

    def __init__(self) -> None:
        self._samples: dict[str, EngineLoad] = {}
        self.interval = 1.0

    def record(self, deployment_id: str, sample: EngineLoad) -> None:
        self._samples[deployment_id] = sample

    def get(self, deployment_id: str) -> EngineLoad | None:
        return self._samples.get(deployment_id)

    def fresh(self, deployment_id: str, now: float) -> EngineLoad | None:
        """The sample, when it is recent enough to act on and carries numbers."""
        sample = self._samples.get(deployment_id)
        if sample is None or sample.error is not None:
            return None
        if now - sample.fetched_at > max(STALE_INTERVALS * self.interval, _MIN_STALE):
            return None
        return sample

    def keep_only(self, deployment_ids: set[str]) -> None:
        for dep_id in set(self._samples) - deployment_ids:
            del self._samples[dep_id]


def polled(fleet: Fleet) -> dict[str, list[Deployment]]:
    """Provider id -> its deployments worth polling (see the module docstring)."""
    out: dict[str, list[Deployment]] = defaultdict(list)
    for model in fleet.models.values():
        peers: dict[tuple[int, int | None, str], list[Deployment]] = defaultdict(list)
        for dep in model.deployments:
            peers[(dep.priority, dep.context_window, dep.tier)].append(dep)
        for group in peers.values():
            if len(group) < 2:
                continue
            for dep in group:
                if dep.provider.kind in GAUGES:
                    out[dep.provider.id].append(dep)
    return out


class EngineLoadPoller(BackgroundPoller):
    timeout = POLL_TIMEOUT

    def __init__(
        self,
        holder: FleetHolder,
        loads: EngineLoads,
        inflight: Callable[[str], int] | None = None,
    ) -> None:
        super().__init__()
        self.holder = holder
        self.loads = loads
        self.inflight = inflight  # the gateway's own in-flight count per deployment
        self.rounds = 0  # completed poll rounds (tests wait on it)

    async def poll_once(self) -> int:
        """Poll every engine worth polling now; returns how many providers were asked."""
        fleet = self.holder.fleet
        config = fleet.config.routing.balancing.engine_load
        self.loads.interval = config.interval_seconds
        targets = polled(fleet) if config.enabled else {}
        self.loads.keep_only({d.id for deps in targets.values() for d in deps})
        if targets and self.running:
            await asyncio.gather(
                *(self._poll(fleet.providers[pid], deps) for pid, deps in targets.items())
            )
        self.rounds += 1
        return len(targets)

    async def _poll(self, provider: Provider, deps: list[Deployment]) -> None:
        import aiohttp  # loaded by the session that polls

        now = time.time()
        text: str | None = None
        slots: tuple[int, int] | None = None
        error: str | None = None
        try:
            text = await self._get(provider, "/metrics")
        except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError, ValueError) as exc:
            error = _describe(exc)
        if provider.kind == "llamacpp":  # `/slots` still answers without `--metrics`
            try:
                slots = parse_llamacpp_slots(orjson.loads(await self._get(provider, "/slots")))
            except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError, ValueError) as exc:
                error = error or _describe(exc)
        for dep in deps:  # with the gateway's count as the engine answered (no await since)
            sample = _sample(provider.kind, dep, text, slots, error, now)
            if self.inflight is not None and sample.error is None:
                sample = replace(sample, inflight=max(0, self.inflight(dep.id)))
            self.loads.record(dep.id, sample)

    async def _get(self, provider: Provider, path: str) -> str:
        async with self.session().get(
            provider_url(provider, path),
            headers=provider_headers(provider),
        ) as resp:  # never follows a redirect: a 3xx is an error here
            if resp.status >= 300:
                raise ValueError(f"{path}: HTTP {resp.status}")
            return await resp.text()

    async def _run(self) -> None:
        while True:
            try:
                await self.poll_once()
            except Exception:  # polling must never take the gateway down
                log.exception("engine load poll failed")
            config = self.holder.fleet.config.routing.balancing.engine_load
            await asyncio.sleep(config.interval_seconds)


def _sample(
    kind: str,
    dep: Deployment,
    text: str | None,
    slots: tuple[int, int] | None,
    error: str | None,
    now: float,
) -> EngineLoad:
    if text is None and slots is None:
        return EngineLoad(fetched_at=now, error=error or "no answer")
    sample = EngineLoad(fetched_at=now)
    if text is not None:
        try:
            sample = parse_metrics(kind, text, dep.upstream_model, now)
        except ValueError as exc:  # not the Prometheus text format
            if slots is None:
                return EngineLoad(fetched_at=now, error=_describe(exc))
    if slots is None:
        return sample
    running = sample.running if sample.running is not None else float(slots[1])
    return replace(sample, running=running, slots=slots[0], busy_slots=slots[1])


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
