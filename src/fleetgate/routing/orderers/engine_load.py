"""Engine load: among deployments of equal rank, a busy engine ranks after its peers.

Busy means the engine's own metrics, polled in the background (discovery/engine_load.py),
say that a new request would wait there longer than on its tied peers: its expected wait
(routing/expected_wait.py: requests ahead per slot x its recent time per request) exceeds
the shortest among them by more than `routing.balancing.engine_load.max_wait` times the
peers' time per request; or (when `max_queue` is set) that more than `max_queue` requests
wait in its queue beyond the shortest queue among them, whatever its size; or that its KV
cache is at least `max_kv_cache` full.
Measuring against the peers keeps a fleet that is busy everywhere from herding onto
whichever engine was a little less busy at the last poll. Only a fresh sample counts; the
order inside the busy and the idle part is kept. The signals of every tied candidate are
recorded in the plan's notes (`engine_load`), with the reason for each one moved.
"""

from __future__ import annotations

from typing import Any

from fleetgate.config.schema import EngineLoadConfig
from fleetgate.discovery.engine_metrics import EngineLoad
from fleetgate.routing.expected_wait import WAITS, Wait, expected_waits
from fleetgate.routing.plan import Candidate, PlanContext
from fleetgate.routing.ties import tied_runs

BUSY = "engine_busy"  # ctx.cache: ids of the deployments this orderer moved back


def busy_reason(
    sample: EngineLoad, config: EngineLoadConfig, shortest: float, queue: float | None = None
) -> str | None:
    """Why the engine is busy (None: it is not); `shortest` is its peers' shortest queue,
    `queue` its own as routing counts it now (the sample's, by default)."""
    queue = sample.waiting if queue is None else queue
    if config.max_queue is not None and queue is not None and queue - shortest > config.max_queue:
        beyond = f" ({shortest:g} at the shortest)" if shortest else ""
        return f"queue {queue:g} > {config.max_queue}{beyond}"
    if sample.kv_cache is not None and sample.kv_cache >= config.max_kv_cache:
        return f"kv cache {sample.kv_cache:.0%} >= {config.max_kv_cache:.0%}"
    return None


def wait_reason(
    wait: Wait, shortest: float, unit: float | None, config: EngineLoadConfig
) -> str | None:
    """Why the engine's expected wait makes it busy (None: it does not); `shortest` is its
    peers' shortest wait, `unit` their time per request (seconds; None: waits in requests)."""
    if config.max_wait is None:
        return None
    if wait.seconds - shortest <= config.max_wait * (unit if unit is not None else 1.0):
        return None
    if unit is None:
        return (
            f"expected wait {wait.seconds:.3g} requests > {shortest:.3g} at the shortest "
            f"+ {config.max_wait:g}"
        )
    return (
        f"expected wait {wait.seconds:.3g}s > {shortest:.3g}s at the shortest "
        f"+ {config.max_wait:g} x {unit:.3g}s a request"
    )


class EngineLoadOrderer:
    name = "engine_load"

    def order(self, ctx: PlanContext, candidates: list[Candidate]) -> list[Candidate]:
        loads = ctx.loads
        config = ctx.fleet.config.routing.balancing.engine_load
        if loads is None or not config.enabled or len(candidates) < 2:
            return candidates
        runs = tied_runs(ctx, candidates)
        if not runs:
            return candidates
        out = list(candidates)
        signals: dict[str, dict[str, Any]] = {}
        busy: set[str] = set()
        all_waits: dict[str, Wait] = {}
        for start, end in runs:
            group = out[start:end]
            samples = {
                c.deployment.id: s
                for c in group
                if (s := loads.fresh(c.deployment.id, ctx.now)) is not None
            }
            # each queue as it stands now: the sample's, plus what this gateway sent since
            # (without it, a poll interval's traffic herds onto the one engine that was not
            # busy at the last poll, whatever its share of the requests in flight)
            now_queue = {
                dep_id: s.queue_now(max(0, ctx.state.health(dep_id).inflight))
                for dep_id, s in samples.items()
            }
            queues = [q for q in now_queue.values() if q is not None]
            shortest = min(queues) if len(queues) > 1 else 0.0
            waits = expected_waits(ctx, samples)
            all_waits.update(waits)
            # the peers' wait and time per request; a lone sampled engine is against none
            shortest_wait = min(w.seconds for w in waits.values()) if len(waits) > 1 else 0.0
            units = sorted(w.per_request for w in waits.values() if w.per_request is not None)
            unit = units[len(units) // 2] if units else None
            reasons: dict[str, str] = {}
            for dep_id, sample in samples.items():
                signals[dep_id] = _signal(sample)
                queue = now_queue[dep_id]
                if queue is not None and queue != sample.waiting:
                    signals[dep_id]["queue_now"] = queue
                wait = waits.get(dep_id)
                if wait is not None:
                    signals[dep_id]["expected_wait"] = round(wait.seconds, 4)
                reason = busy_reason(sample, config, shortest, queue)
                if reason is None and wait is not None and len(waits) > 1:
                    reason = wait_reason(wait, shortest_wait, unit, config)
                if reason is not None:
                    reasons[dep_id] = reason
            if reasons and len(reasons) < len(group):  # some peer is not busy: it goes first
                out[start:end] = [c for c in group if c.deployment.id not in reasons] + [
                    c for c in group if c.deployment.id in reasons
                ]
                for dep_id, reason in reasons.items():
                    signals[dep_id]["moved_back"] = reason
                busy.update(reasons)
        if signals:
            ctx.notes["engine_load"] = signals
        ctx.cache[BUSY] = busy
        ctx.cache[WAITS] = all_waits
        return out


def _signal(sample: EngineLoad) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("waiting", "running", "kv_cache", "slots", "busy_slots"):
        value = getattr(sample, name)
        if value is not None:
            out[name] = value
    return out
