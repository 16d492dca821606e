"""Runtime state of each deployment: circuit breaker, cooldowns, in-flight count, EMAs.

It lives apart from the immutable fleet. `MemoryState` keeps it in this process; a shared
implementation keeps the same interface and mirrors writes to other replicas. Reads are
synchronous so the routing filters never await.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Protocol

from fleetgate.config.schema import CircuitConfig
from fleetgate.context.calibration import CalibrationBook
from fleetgate.logs import fields

log = logging.getLogger("fleetgate.state")

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
    open_cause: str = ""  # what opened it: `connect refused`, `503`, `timeout`, ...
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
    last_error: str = ""  # this replica's last failed attempt on it, in a few words
    last_error_at: float = 0.0  # wall-clock time of it

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
        self,
        deployment_id: str,
        now: float,
        circuit: CircuitConfig,
        severe: bool = False,
        cause: str = "",
    ) -> None: ...

    def recover(self, deployment_id: str, how: str) -> bool: ...

    def keep_out(self, deployment_id: str, until: float, cause: str) -> None: ...

    async def claim_check(self, provider_id: str, hold_seconds: float) -> bool: ...

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
            log.info(
                "circuit half-open: %s: a request probes it",
                deployment_id,
                extra=fields(event="circuit_half_open", deployment=deployment_id),
            )
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
        if h.consecutive_failures and h.open_until:
            _log_closed(deployment_id, h, "answered a request")
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
        self,
        deployment_id: str,
        now: float,
        circuit: CircuitConfig,
        severe: bool = False,
        cause: str = "",
    ) -> None:
        """Count a failure seen at `now`; `severe`: a timeout or a refused connection;
        `cause`: what failed, in a few words (`connect refused`, `503`, ...)."""
        h = self.health(deployment_id)
        h.failures += 1
        h.consecutive_failures += 1
        if cause:
            h.last_error, h.last_error_at = cause, now
        if h.probing or h.consecutive_failures >= threshold(circuit, severe):
            was_out = h.open_until > now and h.open_reason == CIRCUIT_OPEN
            h.open_until = max(h.open_until, now + circuit.cooldown_seconds)
            h.open_reason = CIRCUIT_OPEN
            h.open_cause = cause or h.open_cause
            if not was_out:
                _log_opened(deployment_id, h, now)
        h.probing = False

    def keep_out(self, deployment_id: str, until: float, cause: str) -> None:
        """A health check found the deployment still down: its open circuit stays open until
        `until` (the next check), so no client request probes a host known to be down."""
        h = self.health(deployment_id)
        if h.open_reason != CIRCUIT_OPEN or until <= h.open_until:
            return
        h.open_until = until
        h.last_error, h.last_error_at = cause, time.time()

    async def claim_check(self, provider_id: str, hold_seconds: float) -> bool:
        """Whether this replica runs the provider's next health check (one process:
        always; `RedisState`: one replica of the cluster per interval)."""
        return True

    def recover(self, deployment_id: str, how: str) -> bool:
        """Close the deployment's circuit and end its cooldown (a health check it answered,
        or an operator's reset); `how` says which, for the log. False when it was in."""
        h = self.health(deployment_id)
        if not (h.consecutive_failures or h.open_until):
            return False
        _log_closed(deployment_id, h, how)
        h.consecutive_failures = 0
        h.open_until = 0.0
        h.open_reason = ""
        h.open_cause = ""
        h.probing = False
        return True

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
        if reason == RATE_LIMITED:
            h.last_error, h.last_error_at = "429", now
        wait = retry_after if retry_after is not None else circuit.rate_limit_cooldown_seconds
        wait = min(max(wait, 0.0), circuit.max_cooldown_seconds)
        if now + wait > h.open_until:
            if h.open_until <= now:
                log.info(
                    "cooling down: %s (%s) for %.1fs",
                    deployment_id,
                    reason,
                    wait,
                    extra=fields(
                        event="cooldown", deployment=deployment_id, reason=reason, seconds=wait
                    ),
                )
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


def _log_opened(deployment_id: str, h: DeploymentHealth, now: float) -> None:
    cause = h.open_cause or "failures"
    log.warning(
        "circuit open: %s (%s; %d failure(s) in a row); out for %gs",
        deployment_id,
        cause,
        h.consecutive_failures,
        round(h.open_until - now, 1),
        extra=fields(
            event="circuit_open",
            deployment=deployment_id,
            reason=cause,
            failures=h.consecutive_failures,
            seconds=round(h.open_until - now, 3),
        ),
    )


def _log_closed(deployment_id: str, h: DeploymentHealth, how: str) -> None:
    log.info(
        "circuit closed: %s %s",
        deployment_id,
        how,
        extra=fields(event="circuit_closed", deployment=deployment_id, reason=how),
    )
