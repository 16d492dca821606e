"""Estimates the context a request needs and applies `context_guard: reject`.

It drops nothing: a deployment too small for the estimate is still a candidate (sorted
last by the best-fit orderer), because the estimate errs on the large side. With the guard
set to `reject`, a request that fits no deployment is refused with `context_too_large`
before any upstream call — unless an exact count could still change that, in which case
the refine stage decides. A model whose deployments declare no window is left alone.
"""

from __future__ import annotations

from fleetgate.context.capabilities import context_settings
from fleetgate.context.estimate import estimate_context_tokens
from fleetgate.context.placement import (
    context_too_large,
    fits_nowhere,
    guard_for,
    known_windows,
    near_boundary,
    record_estimate,
)
from fleetgate.routing.plan import Candidate, Dropped, PlanContext
from fleetgate.translate.registry import unserved_reason

GUARD_PENDING = "context_guard_pending"
# `context_guard: warn`: the request fits no window; the value is the largest window
OVERFLOW_HEADER = "X-Fleetgate-Context-Overflow"


class ContextFitFilter:
    name = "context_fit"

    def apply(
        self, ctx: PlanContext, candidates: list[Candidate]
    ) -> tuple[list[Candidate], list[Dropped]]:
        of = ctx.window_of
        windows = known_windows(candidates, of)
        if not windows:
            return candidates, []
        profile = ctx.profile
        # per-deployment window, for the attempts' `provider_ctx` metric label
        ctx.notes["provider_ctx"] = {
            c.deployment.id: (of(c.deployment) if of else c.deployment.context_window)
            or "unbounded"
            for c in candidates
        }
        guard = guard_for(ctx.fleet, profile.model)
        if guard == "allow" and len(set(windows)) < 2 and profile.context is None:
            # one capacity and no guard: nothing here could change the plan, so the
            # request routes exactly as it would without tiers, and skips the estimate
            return candidates, []
        settings = context_settings(ctx.fleet)
        estimate = profile.context
        if estimate is None:
            estimate = estimate_context_tokens(profile.body, profile.endpoint, settings)
            profile.context = estimate
        record_estimate(estimate, ctx.headers, ctx.notes)
        if guard == "warn":
            # routed anyway (biggest window first, by the best-fit order), and flagged
            if fits_nowhere(candidates, estimate.total, of):
                ctx.headers[OVERFLOW_HEADER] = str(max(windows))
                ctx.notes["context_overflow"] = True
            return candidates, []
        if guard != "reject":
            return candidates, []
        # judged against every deployment of the model, so that a big host in cooldown
        # gives a retryable no_route later rather than a permanent context_too_large
        model = ctx.fleet.models.get(profile.model)
        everyone = (  # only those serving the endpoint
            [
                Candidate(d)
                for d in model.deployments
                if unserved_reason(profile.endpoint, profile.body, d.provider) is None
            ]
            if model
            else candidates
        )
        if not fits_nowhere(everyone, estimate.total, of):
            return candidates, []
        windows = known_windows(everyone, of)
        refine = settings.refine
        if (
            refine.enabled
            and not estimate.exact
            and len(windows) >= 2
            and near_boundary(estimate.total, [max(windows)], refine.band_low, refine.band_high)
        ):
            ctx.notes[GUARD_PENDING] = True  # an exact count may still fit it
            return candidates, []
        raise context_too_large(profile.model, estimate, max(windows))
