"""What the pipeline says back beside the body: the routing headers of an answer, the
headers of an exhausted chain, the flags of a cut answer, and a refusal in the client's
protocol."""

from __future__ import annotations

from fleetgate.context.placement import TIER_HEADER
from fleetgate.errors import GatewayError
from fleetgate.execute.executor import Outcome
from fleetgate.execute.outcome import Attempt
from fleetgate.pipeline.error_shapes import error_body, error_status, upstream_error_body
from fleetgate.redact import Redactor
from fleetgate.routing.plan import RoutePlan
from fleetgate.web.asgi import Headers


def routing_headers(plan: RoutePlan, outcome: Outcome, overhead: float) -> Headers:
    dep = outcome.candidate.deployment
    tried = len(outcome.attempts)
    extra = [(k.lower().encode(), v.encode()) for k, v in plan.headers.items()]
    extra.extend((k.lower().encode(), v.encode()) for k, v in outcome.extra_headers.items())
    return [
        *extra,
        (b"x-fleetgate-route", dep.id.encode()),
        (b"x-fleetgate-provider", dep.provider.id.encode()),
        (b"x-fleetgate-attempts", str(tried).encode()),
        (b"x-fleetgate-fallback-count", str(tried - 1).encode()),
        (b"x-fleetgate-overhead-ms", f"{overhead * 1000:.3f}".encode()),
    ]


def exhausted_headers(plan: RoutePlan, attempts: list[Attempt]) -> Headers:
    """The headers of a chain that ran out: the plan's own, and what was tried."""
    extra = [(k.lower().encode(), v.encode()) for k, v in plan.headers.items()]
    if attempts:
        extra.extend(
            [
                (b"x-fleetgate-attempts", str(len(attempts)).encode()),
                (b"x-fleetgate-fallback-count", str(len(attempts) - 1).encode()),
                (b"x-fleetgate-fallback-exhausted", b"true"),
            ]
        )
    return extra


def flag_cut(plan: RoutePlan, outcome: Outcome) -> None:
    """An answer a window cut goes out flagged: header (sent unless streamed) and note."""
    found = outcome.cut
    if found is not None:
        outcome.extra_headers[found.header] = found.header_value()
        plan.notes[found.note] = found.detail


def note_context_tier(plan: RoutePlan, outcome: Outcome) -> None:
    """Which tier served a request whose plan weighed context windows (header + notes)."""
    if "context_estimate" not in plan.notes:
        return
    dep = outcome.candidate.deployment
    outcome.extra_headers[TIER_HEADER] = dep.tier
    plan.notes["context_tier"] = dep.tier


def refusal(protocol: str, exc: GatewayError, redactor: Redactor) -> tuple[int, bytes, Headers]:
    """A refusal in the client's protocol: status, body and the error's own headers. Upstream
    text may quote a credential: it is scrubbed first."""
    exc.message = redactor.text(exc.message)
    if exc.upstream_body:
        exc.upstream_body = redactor.bytes(exc.upstream_body)
    body = error_body(protocol, exc)
    if exc.code == "upstream_rejected" and exc.upstream_body:
        body = upstream_error_body(protocol, exc.upstream_body) or body
    headers = [(k.lower().encode(), v.encode()) for k, v in exc.headers.items()]
    return error_status(protocol, exc), body, headers
