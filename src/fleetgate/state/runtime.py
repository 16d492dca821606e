"""Runtime state of each deployment: circuit breaker, cooldowns, in-flight count, EMAs.

It lives apart from the immutable fleet. `MemoryState` keeps it in this process; a shared
implementation keeps the same interface and mirrors writes to other replicas. Reads are
synchronous so the routing filters never await.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from fleetgate.config.schema import CircuitConfig
from fleetgate.context.calibration import CalibrationBook

EMA_ALPHA = 0.2

# why a deployment is out (`DeploymentHealth.open_reason`)
CIRCUIT_OPEN = "circuit open"
RATE_LIMITED = "rate limited"  # a 429: only this cooldown makes `all_routes_rate_limited`
RETRY_LATER = "asked to retry later"  # a 5xx with Retry-After: an outage, not a rate limit
MAX_PROBE_HOLD = 60.0  # seconds a half-open probe holds its host, if its end goes unheard


@dataclass(slots=True)
class DeploymentHealth:
    consecutive_failures: int = 0
    open_until: float = 0.0  # wall-clock seconds; the deployment is out until then
    open_reason: str = ""  # CIRCUIT_OPEN | RATE_LIMITED | RETRY_LATER
    probing: bool = False  # a half-open probe is in flight
    probe_since: float = 0.0  # wall-clock time it began
    inflight: int = 0
    ttft_ema: float | None = None  # seconds
    tps_ema: float | None = None  # completion tokens per second
    latency_ema: float | None = None  # seconds, whole exchange
    measured_at: float = 0.0  # wall-clock time of the last EMA update
    tried_at: float = 0.0  # wall-clock time this replica last began an attempt on it
    successes: int = 0
    failures: int = 0

    @property
    def circuit(self) -> str:
        if self.consecutive_failures == 0 and not self.open_until:
            return "closed"
        if self.open_until > time.time():
            return "open"
        return "half-open" if self.open_until else "closed"


class RuntimeState(Protocol):
    calibration: CalibrationBook  # the context estimate's per-deployment calibration

    def health(self, deployment_id: str) -> DeploymentHealth: ...

    def unavailable_reason(self, deployment_id: str, now: float) -> str | None: ...

    def try_begin(self, deployment_id: str, now: float) -> bool: ...

    async def claim_probe(self, deployment_id: str, hold_seconds: float) -> bool: ...

    def abandon_probe(self, deployment_id: str) -> None: ...

    def settle_probe(self, deployment_id: str) -> None: ...

    def end(self, deployment_id: str) -> None: ...

    def record_success(
        self, deployment_id: str, ttft: float | None, latency: float, tokens: int | None
    ) -> None: ...

    def record_failure(
        self, deployment_id: str, now: float, circuit: CircuitConfig, severe: bool = False
    ) -> None: ...

    def record_rate_limit(
        self,
        deployment_id: str,
        now: float,
        retry_after: float | None,
        circuit: CircuitConfig,
        reason: str = RATE_LIMITED,
    ) -> float: ...


def _ema(old: float | None, new: float) -> float:
    return new if old is None else old + EMA_ALPHA * (new - old)


class MemoryState:
    """Runtime state for one process."""

    def __init__(self) -> None:
        self._health: dict[str, DeploymentHealth] = {}
        self.calibration = CalibrationBook()

    def health(self, deployment_id: str) -> DeploymentHealth:
        h = self._health.get(deployment_id)
        if h is None:
            h = self._health[deployment_id] = DeploymentHealth()
        return h

    def unavailable_reason(self, deployment_id: str, now: float) -> str | None:
        h = self._health.get(deployment_id)
        if h is None or h.open_until <= now:
            return None
        return f"{h.open_reason} for {h.open_until - now:.1f}s more"

    def try_begin(self, deployment_id: str, now: float) -> bool:
        """Claim a slot for an attempt; False when a half-open probe is already out."""
        h = self.health(deployment_id)
        if h.open_until and h.open_until <= now and h.consecutive_failures:
            # a probe whose end went unheard (its client left) no longer holds the host
            if h.probing and now - h.probe_since < MAX_PROBE_HOLD:
                return False
            h.probing = True
            h.probe_since = now
        h.inflight += 1
        h.tried_at = now
        return True

    async def claim_probe(self, deployment_id: str, hold_seconds: float) -> bool:
        """After `try_begin` made this attempt the half-open probe: whether it may go (the
        only probe of the cluster). One process: always."""
        return True

    def settle_probe(self, deployment_id: str) -> None:
        """The probe was answered with the request's own fault (a 4xx): the host is up but
        said nothing of its health; the next request probes again."""
        self.health(deployment_id).probing = False

    def abandon_probe(self, deployment_id: str) -> None:
        """Undo a `try_begin` whose probe another replica has already sent."""
        h = self.health(deployment_id)
        h.probing = False
        h.inflight -= 1

    def end(self, deployment_id: str) -> None:
        h = self.health(deployment_id)
        h.inflight -= 1

    def record_success(
        self, deployment_id: str, ttft: float | None, latency: float, tokens: int | None
    ) -> None:
        h = self.health(deployment_id)
        h.successes += 1
        h.consecutive_failures = 0
        h.open_until = 0.0
        h.open_reason = ""
        h.probing = False
        h.latency_ema = _ema(h.latency_ema, latency)
        h.measured_at = time.time()
        if ttft is not None:
            h.ttft_ema = _ema(h.ttft_ema, ttft)
            if tokens and latency > ttft:
                h.tps_ema = _ema(h.tps_ema, tokens / (latency - ttft))

    def record_failure(
        self, deployment_id: str, now: float, circuit: CircuitConfig, severe: bool = False
    ) -> None:
        """Count a failure seen at `now`; `severe`: a timeout or a refused connection."""
        h = self.health(deployment_id)
        h.failures += 1
        h.consecutive_failures += 1
        if h.probing or h.consecutive_failures >= threshold(circuit, severe):
            h.open_until = max(h.open_until, now + circuit.cooldown_seconds)
            h.open_reason = CIRCUIT_OPEN
        h.probing = False

    def record_rate_limit(
        self,
        deployment_id: str,
        now: float,
        retry_after: float | None,
        circuit: CircuitConfig,
        reason: str = RATE_LIMITED,
    ) -> float:
        """Put the deployment in a cooldown; returns when it ends."""
        h = self.health(deployment_id)
        h.failures += 1
        wait = retry_after if retry_after is not None else circuit.rate_limit_cooldown_seconds
        wait = min(max(wait, 0.0), circuit.max_cooldown_seconds)
        if now + wait > h.open_until:
            h.open_until = now + wait
            h.open_reason = reason
        h.probing = False
        return h.open_until


def threshold(circuit: CircuitConfig, severe: bool) -> int:
    """Consecutive failures that open the circuit when the last one is (not) severe."""
    return (
        min(circuit.failure_threshold, circuit.timeout_threshold)
        if severe
        else (circuit.failure_threshold)
    )
