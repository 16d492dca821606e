"""Estimates the context a request needs and applies `context_guard: reject`.

A deployment too small for the estimate stays a candidate (sorted last by the best-fit
orderer), because an engine that refuses an over-long prompt tells so with a context 400,
and the estimate may be high. A worker that truncates silently (Ollama, `truncates:
silently`) is removed instead when the request cannot fit its window. With the guard set
to `reject`, a request is refused with `context_too_large` before any upstream call only on
evidence: an exact count, or, without one, more words than any window holds (a word is a
token at least); in doubt the refine stage counts first, and where nothing can count, the
request is routed and the engine decides. A model whose deployments declare no window is
left alone.
"""

from __future__ import annotations

from typing import Any

from fleetgate.config.schema import ContextConfig
from fleetgate.context.capabilities import context_settings
from fleetgate.context.counts import COUNTABLE_ENDPOINTS, can_count
from fleetgate.context.estimate import ContextEstimate
from fleetgate.context.need import estimate_need
from fleetgate.context.placement import (
    WindowOf,
    context_too_large,
    effective_window,
    first_at_each_window,
    fits_nowhere,
    guard_for,
    known_windows,
    record_estimate,
)
from fleetgate.errors import GatewayError
from fleetgate.ingress.profile import RequestProfile
from fleetgate.routing.plan import Candidate, Dropped, PlanContext, RoutePlan
from fleetgate.translate.registry import unserved_reason

GUARD_PENDING = "context_guard_pending"
SILENT_PENDING = "context_silent_pending"  # a silent worker's fit waits for the count
# with the guard `reject`: the upper bound lies near the largest window, so whether the
# request fits any window (else it is refused) is in doubt, whatever the spread says
TOP_PENDING = "context_top_pending"
# how far from the upper bound (either side) the largest window may lie and be in doubt:
# replayed on six real vocabularies (held-out and foreign text, 200 answers in), 4-9 % of
# requests needed more than their upper bound, 57 % of them by at most 3 %, 75 % by 5 %;
# each point of margin costs the counts of the requests bounded that near (5 % took Falcon's
# `reject` run from 0.257 to 0.297 counts a request, against a budget of 0.3)
TOP_MARGIN = 0.03
RAW_NOTE = "context_raw"  # the central estimate per tokenizer family (numbers only)
TALLY_NOTE = "context_tally"  # the request's tally (numbers only): what the fits learn from
# `context_guard: warn`: the request fits no window; the value is the largest window
OVERFLOW_HEADER = "X-Fleetgate-Context-Overflow"


class ContextFitFilter:
    name = "context_fit"

    def apply(
        self, ctx: PlanContext, candidates: list[Candidate]
    ) -> tuple[list[Candidate], list[Dropped]]:
        of = ctx.window_of or effective_window
        windows = known_windows(candidates, of)
        if not windows:
            return candidates, []
        profile = ctx.profile
        # per-deployment window, for the attempts' `provider_ctx` metric label
        ctx.notes["provider_ctx"] = {
            c.deployment.id: of(c.deployment) or "unbounded" for c in candidates
        }
        guard = guard_for(ctx.fleet, profile.model)
        silent = any(c.deployment.provider.truncates == "silently" for c in candidates)
        if guard == "allow" and len(windows) < 2 and not silent and profile.context is None:
            # one capacity, no guard, no silent worker: nothing here could change the plan,
            # so the request routes exactly as it would without tiers, and skips the estimate
            return candidates, []
        settings = context_settings(ctx.fleet)
        estimate = profile.context
        if estimate is None:
            book = getattr(ctx.state, "calibration", None)
            model = ctx.fleet.models.get(profile.model)
            deps = [c.deployment for c in candidates]
            if model is not None:
                deps.extend(d for d in model.deployments if d not in deps)
            estimate, raw = estimate_need(profile.body, profile.endpoint, settings, deps, book)
            profile.context = estimate
            if not estimate.media_parts:
                ctx.notes[RAW_NOTE] = raw  # what calibration compares the usage with
                assert estimate.tally is not None
                ctx.notes[TALLY_NOTE] = estimate.tally.counts
        record_estimate(estimate, ctx.headers, ctx.notes)
        if guard == "warn":  # the operator asked to route what does not fit anyway
            kept, dropped = candidates, []
        else:
            kept, dropped = _without_silent_overflow(candidates, estimate, of, ctx.notes)
        if guard == "warn":
            # routed anyway (biggest window first, by the best-fit order), and flagged
            if fits_nowhere(candidates, estimate, of):
                ctx.headers[OVERFLOW_HEADER] = str(max(windows))
                ctx.notes["context_overflow"] = True
            return kept, dropped
        if guard != "reject":
            return kept, dropped
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
        beyond = fits_nowhere(everyone, estimate, of)
        near = _near_the_top(everyone, estimate, of)
        if not beyond and not near:
            return kept, dropped
        if beyond and (estimate.exact or _beyond_on_evidence(everyone, estimate, of)):
            raise context_too_large(profile.model, estimate, max(known_windows(everyone, of)))
        if _countable(profile, estimate, kept, settings):
            ctx.notes[GUARD_PENDING] = True  # in doubt: an exact count decides
            if near:
                ctx.notes[TOP_PENDING] = True
        elif beyond:  # no evidence, no count: routed (biggest window first), the engine decides
            ctx.notes["context_guard"] = "not_counted"
        return kept, dropped

    def empty_error(self, plan: RoutePlan, now: float) -> GatewayError | None:
        """The last candidates were workers that truncate silently and cannot hold the
        request: its size is the cause (400), not the fleet's state. When another
        deployment is only out for now (a cooldown), `no_route` says when to come back."""
        if not plan.dropped or any(d.filter != self.name for d in plan.dropped):
            return None
        reasons = "; ".join(f"{d.deployment_id}: {d.reason}" for d in plan.dropped)
        return GatewayError(
            "context_too_large",
            f"No worker of {plan.requested_model!r} can hold this request without cutting "
            f"it short ({reasons}); shorten the input or lower the output budget.",
            headers=plan.headers,
        )


def _countable(
    profile: RequestProfile,
    estimate: ContextEstimate,
    candidates: list[Candidate],
    settings: ContextConfig,
) -> bool:
    """Whether the refine stage can count the request exactly. Then a lower bound that fits
    nowhere refuses nothing by itself: it is a quantile of what usage showed (the family's
    spread, a deployment's calibration), and a few requests in a hundred lie below it (a
    JSON request of 2,010 tokens, estimated at 2,434, was refused from a 2,048 window)."""
    return (
        settings.refine.enabled
        and not estimate.media_parts
        and profile.endpoint in COUNTABLE_ENDPOINTS
        and any(can_count(c.deployment) for c in candidates)
    )


def _near_the_top(candidates: list[Candidate], estimate: ContextEstimate, of: WindowOf) -> bool:
    """Whether the largest window lies within `TOP_MARGIN` of the request's upper bound
    there (above or below it), every window being known. The bound is a quantile of what
    the estimate's evidence showed, and the measured spread reads its tail no better: a
    request a little beyond it, routed uncounted to a window it does not fit, gets an
    answer cut short where the guard would have refused it."""
    if estimate.exact:
        return False
    at = first_at_each_window(candidates, of)
    if not at or any(of(c.deployment) is None for c in candidates):
        return False
    largest = max(at)
    return abs(largest - estimate.high(at[largest])) < TOP_MARGIN * largest


def _beyond_on_evidence(
    candidates: list[Candidate], estimate: ContextEstimate, of: WindowOf
) -> bool:
    """Whether evidence without a count puts the request beyond every window: the rule
    that a word is a token at least (`ContextEstimate.least`), or every deployment's own
    fitted tokenizer (a fingerprint or enough answers; never a family's table) with room
    to spare (`ContextEstimate.fitted_floor`). The fit's band alone is not enough: it is a
    quantile of the text it has seen, and a text unlike that (one long word said again
    and again) fell outside it; its floor is the lowest residual of the text's kind with a
    fifth to spare, for text its evidence covers and that does not say the same thing
    over and over."""
    if fits_nowhere(candidates, estimate.least(), of):
        return True
    for c in candidates:
        window = of(c.deployment)
        if window is None:
            return False
        floor = estimate.fitted_floor(c.deployment)
        if floor is None or floor <= window:
            return False
    return True


def _without_silent_overflow(
    candidates: list[Candidate], estimate: ContextEstimate, of: WindowOf, notes: dict[str, Any]
) -> tuple[list[Candidate], list[Dropped]]:
    """Workers that truncate silently (Ollama) never get a request their window cannot
    hold: removed when even the fewest tokens it can be do not fit; when only the upper bound does
    not, the refine stage decides (an exact count, else the upper bound)."""
    kept: list[Candidate] = []
    dropped: list[Dropped] = []
    for c in candidates:
        dep = c.deployment
        window = of(dep)
        if dep.provider.truncates != "silently" or window is None:
            kept.append(c)
            continue
        low, high = estimate.bounds(dep)
        if low > window and estimate.floor(dep) > window:
            dropped.append(Dropped(dep.id, "context_fit", silent_reason(low, window)))
            continue
        if high > window:
            notes[SILENT_PENDING] = True
        kept.append(c)
    return kept, dropped


def silent_reason(need: int, window: int) -> str:
    return f"truncates silently; its window {window} cannot hold the request ({need} tokens)"
