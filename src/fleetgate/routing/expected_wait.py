"""Expected wait: how long a new request would wait on an engine before it starts.

The requests ahead of it per slot, times the engine's recent time per request. Ahead: what
waits in the engine's queue (as routing counts it now) plus what runs, beyond its free
slots, shared by its slots. A llama.cpp engine reports its slots (`/slots`); vLLM and
SGLang do not report their batch size, but an engine with a queue is full, so what runs
is its batch (and without a queue a new request joins the batch at once: nothing ahead).
The time per request is the gateway's own EMA of each answer's whole time on that
deployment (`latency_ema`), else the median of its tied peers'; with none measured, waits
are in requests (a time per request of 1). So one rule serves a one-slot llama.cpp, where
one request running is a whole answer of wait, and a 256-sequence vLLM, where two waiting
are a few hundredths of one.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetgate.discovery.engine_metrics import EngineLoad
from fleetgate.routing.plan import PlanContext

WAITS = "expected_wait"  # ctx.cache: deployment id -> Wait, for the tied candidates polled


@dataclass(frozen=True, slots=True)
class Wait:
    ahead: float  # requests ahead of a new one, per slot
    per_request: float | None  # seconds one request takes there (None: none measured)

    @property
    def seconds(self) -> float:
        """The wait, in seconds (in requests when no time per request is known)."""
        return self.ahead * (self.per_request if self.per_request is not None else 1.0)


def ahead_per_slot(sample: EngineLoad, inflight: int) -> float | None:
    """Requests ahead of a new one, per slot (None: the engine reports too little), as they
    stand now: `inflight` is the gateway's own count to it now (see `EngineLoad.queue_now`)."""
    waiting = sample.queue_now(inflight)
    if sample.slots:  # llama.cpp: its slots and how many are busy
        busy = sample.busy_now(inflight)
        if waiting is None or busy is None:
            return None
        return max(0.0, waiting + busy + 1 - sample.slots) / sample.slots
    if waiting is None:
        return None
    if waiting <= 0:
        return 0.0  # room in the batch, as far as the engine says
    running = sample.running or 0.0
    return (waiting + 1) / max(running, 1.0)  # a queue: the batch is what runs


def expected_waits(ctx: PlanContext, samples: dict[str, EngineLoad]) -> dict[str, Wait]:
    """The wait on each sampled deployment of one run of tied candidates, now."""
    health = ctx.state.health
    measured = {d: health(d).latency_ema for d in samples}
    known = sorted(v for v in measured.values() if v is not None)
    prior = known[len(known) // 2] if known else None
    out: dict[str, Wait] = {}
    for dep_id, sample in samples.items():
        ahead = ahead_per_slot(sample, max(0, health(dep_id).inflight))
        if ahead is not None:
            per_request = measured[dep_id] if measured[dep_id] is not None else prior
            out[dep_id] = Wait(ahead, per_request)
    return out
