"""Drops deployments that are cooling down, have an open circuit, or lack credentials."""

from __future__ import annotations

from fleetgate.routing.plan import Candidate, Dropped, PlanContext


def credentials_problem(candidate: Candidate) -> str | None:
    """Why the candidate's credential (its key label's, or the provider's) is missing."""
    label = candidate.key_label
    credential = candidate.deployment.provider.credential(label)
    if credential is None:
        return f"no credentials (key label {label!r} is not configured)"
    key, env = credential
    if env is None or key is not None:
        return None
    if label is None:
        return f"no credentials ({env} is not set)"
    return f"no credentials ({env} for key label {label!r} is not set)"


def unavailable_reason(ctx: PlanContext, candidate: Candidate) -> str | None:
    reason = credentials_problem(candidate)
    if reason is None and not candidate.last_resort:
        reason = ctx.state.unavailable_reason(candidate.deployment.id, ctx.now)
    return reason


class AvailabilityFilter:
    name = "availability"

    def apply(
        self, ctx: PlanContext, candidates: list[Candidate]
    ) -> tuple[list[Candidate], list[Dropped]]:
        kept: list[Candidate] = []
        dropped: list[Dropped] = []
        for c in candidates:
            reason = unavailable_reason(ctx, c)
            if reason is None:
                kept.append(c)
            else:
                dropped.append(Dropped(c.deployment.id, self.name, reason))
        return kept, dropped
