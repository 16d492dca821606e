"""What an upstream failure is, what it costs the deployment, and what a client gets when
every candidate failed.

One table of outcomes (`docs/routing.md`, "Every fault"): refused connections and
timeouts are severe (they open the circuit at `timeout_threshold`, 1 by default); resets,
5xx, invalid JSON and broken streams count toward `failure_threshold`; a 429 only cools the
deployment down; a 5xx with `Retry-After` cools it down too, but as an outage, never as a
rate limit; client errors (4xx, context-length 400s) cost the deployment nothing.
"""

from __future__ import annotations

import math
import time

import orjson

from fleetgate.config.schema import CircuitConfig
from fleetgate.errors import GatewayError, retry_after_header
from fleetgate.execute.http1 import ConnectFailed, ConnectTimedOut
from fleetgate.execute.outcome import (
    CONNECT,
    CONTEXT_EXCEEDED,
    RATE_LIMITED,
    RESET,
    RETRYABLE,
    SKIPPED,
    STREAM_BROKEN,
    TIMEOUT,
    Attempt,
    classify_status,
    error_message,
    failure_of,
)
from fleetgate.routing.filters.capability import explain_narrowing
from fleetgate.routing.plan import RoutePlan
from fleetgate.state.runtime import RETRY_LATER, RuntimeState

SEVERE = frozenset({CONNECT, TIMEOUT})
OVERLOADED = 529  # Anthropic's "overloaded_error"

# an in-stream error event that states no status: its `type` says it (Anthropic's names)
_TYPE_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": OVERLOADED,
}


def classify_exception(exc: BaseException) -> tuple[str, str, str]:
    """The error class, log message and failure (in a few words: `connect refused`,
    `connect timeout`, `timeout`, `reset`) of an exception raised by an upstream exchange."""
    if isinstance(exc, ConnectTimedOut):
        return CONNECT, f"connect timeout: {exc}", "connect timeout"
    if isinstance(exc, TimeoutError):
        return TIMEOUT, "timed out waiting for the upstream", "timeout"
    if isinstance(exc, ConnectFailed):
        refused = isinstance(exc.__cause__, ConnectionRefusedError)
        return (
            CONNECT,
            f"{type(exc).__name__}: {exc}",
            ("connect refused" if refused else "connect failed"),
        )
    return RESET, f"{type(exc).__name__}: {exc}", "reset"


def error_event(attempt: Attempt, data: bytes) -> None:
    """`attempt` failed with the error event `data` (redacted) in place of its answer: the
    status it carries, its class and its message."""
    attempt.status = status_in_event(data)
    attempt.error_class = classify_status(attempt.status)
    attempt.message = error_message(data)
    attempt.upstream_body = data


def status_in_event(data: bytes) -> int:
    """The HTTP-like status an in-stream error event carries (500 when it says none)."""
    try:
        obj = orjson.loads(data)
        err = obj.get("error")
    except (orjson.JSONDecodeError, AttributeError):
        return 500
    if obj.get("object") == "error" or (not isinstance(err, dict) and obj.get("type") == "error"):
        err = obj  # flat: a Responses `error` event, or SGLang's ErrorResponse
    if isinstance(err, dict):
        for key in ("code", "status"):
            value = err.get(key)
            if isinstance(value, int) and 400 <= value < 600:
                return value
        status = _TYPE_STATUS.get(str(err.get("type")))
        if status is not None:
            return status
        if "context" in str(err.get("message", "")).lower():
            return 400
    return 500


def record_failure(
    state: RuntimeState,
    attempt: Attempt,
    circuit: CircuitConfig,
    now: float | None = None,
    severe: bool | None = None,
) -> None:
    """Charge a failed attempt to its deployment, at `now`: when the failure was seen."""
    now = time.time() if now is None else now
    error_class = attempt.error_class
    dep_id = attempt.deployment_id
    if error_class == RATE_LIMITED:
        state.record_rate_limit(dep_id, now, attempt.retry_after, circuit)
        return
    if error_class not in RETRYABLE and error_class != STREAM_BROKEN:
        state.settle_probe(dep_id)  # the host answered: a probe it was ends here
        return  # the request's fault (a 4xx, a context-length 400), not the host's
    if attempt.retry_after is not None:
        state.record_rate_limit(dep_id, now, attempt.retry_after, circuit, RETRY_LATER)
    severe = error_class in SEVERE if severe is None else severe
    state.record_failure(dep_id, now, circuit, severe, failure_of(attempt) or "")


def client_error(attempt: Attempt) -> GatewayError:
    """A non-retryable upstream 4xx, returned with the upstream's status and message."""
    return GatewayError(
        "upstream_rejected",
        f"{attempt.deployment_id} rejected the request: {attempt.message}",
        status=attempt.status or 400,
        upstream_body=attempt.upstream_body,
    )


def exhausted_error(
    plan: RoutePlan, attempts: list[Attempt], state: RuntimeState, circuit: CircuitConfig
) -> GatewayError:
    """The most useful error once every candidate failed (a retryable one over a 400)."""
    tried = [a for a in attempts if a.error_class != SKIPPED]
    if not tried:
        raise GatewayError(
            "no_route",
            f"No deployment of {plan.requested_model!r} could take the request: every "
            "candidate is being probed after failures. Retry shortly.",
            headers={"Retry-After": "1"},
        )
    summary = "; ".join(
        f"{a.deployment_id}: {a.status or a.error_class} {a.message}".rstrip() for a in tried
    )
    contexts = [a for a in tried if a.error_class == CONTEXT_EXCEEDED]
    if contexts:
        retryable = [a for a in tried if a.retryable]
        if not retryable:
            return client_error(contexts[-1])
        tried = retryable  # a retryable failure of a larger tier beats the 400
    classes = {a.error_class for a in tried}
    if classes == {RATE_LIMITED}:
        now = time.time()
        soonest = min((state.health(a.deployment_id).open_until for a in tried), default=now)
        wait = max(1, round(soonest - now + 0.5))
        lead = explain_narrowing(plan, "rate limited", [a.deployment_id for a in tried])
        lead = lead or f"Every eligible deployment of {plan.requested_model!r} is rate limited"
        return GatewayError(
            "all_routes_rate_limited",
            f"{lead}; retry in {wait}s. ({summary})",
            headers={"Retry-After": str(wait)},
        )
    # an upstream that said when to come back: the soonest of them, relayed, but no later
    # than the gateway tries it again (its cooldown is capped at max_cooldown_seconds)
    waits = [a.retry_after for a in tried if a.retry_after is not None]
    soonest = min(min(waits), circuit.max_cooldown_seconds) if waits else None
    headers = retry_after_header(soonest)
    statuses = {a.status for a in tried}
    if statuses == {OVERLOADED}:
        code = "upstream_overloaded"
    elif classes == {TIMEOUT}:
        code = "upstream_timeout"
    elif classes == {CONNECT}:
        code = "upstream_unreachable"
    else:
        code = "upstream_error"
    return GatewayError(
        code,
        f"All {len(tried)} attempt(s) for {plan.requested_model!r} failed: {summary}",
        headers=headers,
    )


def queue_full_error(plan: RoutePlan, skipped: list[str], state: RuntimeState) -> GatewayError:
    """429 when every candidate's worker was at its limit with a full queue."""
    latencies = [state.health(dep_id).latency_ema for dep_id in skipped]
    known = [t for t in latencies if t is not None]
    wait = max(1, math.ceil(min(known))) if known else 1
    return GatewayError(
        "gateway_queue_full",
        f"Every eligible worker for {plan.requested_model!r} is at its concurrency limit "
        f"with a full queue; retry in {wait}s.",
        headers={"Retry-After": str(wait)},
    )
