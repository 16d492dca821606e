"""Refine: an exact token count when the estimate alone cannot decide the plan.

The estimate is a band per deployment (see `need.py`). A count is asked for only when a
known window lies inside it and that could matter: a plan with two or more distinct
windows, a `context_guard: reject` refusal in doubt, or a worker that truncates silently
whose window the request may not fit. Where the estimate's spread was measured (a fitted
tokenizer's residuals, a usage calibration), a count is made only when it is likely to
change what happens: to put another deployment first, or to refuse
(`placement.change_probability`, `refine.min_change`). The count comes from a base-tier
deployment that can count (a local tokenizer first, then an engine; see `counts.py`), under
a time budget and a cap on counts in flight; when the cap is full, on timeout or on any
failure, the estimate stands. Requests with image or audio parts keep the estimate
(counting them would make the engine fetch and process the media).

Afterwards: a refusal happens only on evidence (an exact count, of which a scaffolding the
family estimated is left out, or a lower bound that fits nowhere); silent workers the
request does not fit are removed.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from dataclasses import replace

import orjson

from fleetgate.config.schema import ContextConfig
from fleetgate.context.capabilities import context_settings
from fleetgate.context.counts import (
    COUNTABLE_ENDPOINTS,
    TOKENIZING_KINDS,
    WHOLE_COUNTING_KINDS,
    Counted,
    ExactCounter,
    TokenizeError,
    can_count,
    count_prompt,
)

__all__ = ["TOKENIZING_KINDS", "ContextRefiner", "TokenizeError"]
from fleetgate.context.estimate import ContextEstimate
from fleetgate.context.placement import (
    FIT_BY_PRIORITY,
    WindowOf,
    change_probability,
    context_too_large,
    effective_window,
    first_at_each_window,
    fits_nowhere,
    known_windows,
    order_by_fit,
    record_estimate,
    uncertain,
)
from fleetgate.execute.http1 import UpstreamIOError
from fleetgate.execute.upstream import UpstreamPool
from fleetgate.fleet import Deployment, Fleet
from fleetgate.ingress.profile import RequestProfile
from fleetgate.routing.filters.context_fit import (
    GUARD_PENDING,
    SILENT_PENDING,
    TOP_PENDING,
    silent_reason,
)
from fleetgate.routing.plan import Candidate, Dropped, RoutePlan
from fleetgate.routing.planner import require_route

COUNTED_BY = "context_counted_by"  # note: the deployment whose tokenizer counted
COUNT_CALLS = "context_count_calls"  # note: engine calls the count took (none: cached)
# note: how likely a count was to put another deployment first (when it was weighed)
CHANGE_NOTE = "context_change_probability"
# note: what the answer's usage teaches the template costs ({key, text}; counts.py)
TEMPLATE_NOTE = "context_template"


class ContextRefiner:
    """Exact counts under a budget and a concurrency cap; one per gateway."""

    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool
        self.counter = ExactCounter(pool)
        self.inflight = 0

    def wants(self, plan: RoutePlan, profile: RequestProfile, settings: ContextConfig) -> bool:
        """Whether an exact count could change this plan (cheap; no I/O)."""
        estimate = profile.context
        refine = settings.refine
        if estimate is None or estimate.exact or estimate.media_parts or not refine.enabled:
            return False
        if profile.endpoint not in COUNTABLE_ENDPOINTS:
            return False
        # an answer cut short is in question, not a larger window than needed: counted
        # whatever the measured spread says (its tail is what is in doubt)
        if plan.notes.get(SILENT_PENDING) or plan.notes.get(TOP_PENDING):
            return True
        guard = bool(plan.notes.get(GUARD_PENDING))
        of = plan.window_of or effective_window
        if not guard and (
            len(known_windows(plan.candidates, of)) < 2
            or not uncertain(plan.candidates, estimate, of, refine.min_change)
        ):
            return False
        if not refine.min_change:
            return True
        change = _change(plan, estimate, of, guard)
        if change is None:  # a band no spread was measured for: it is all we know
            return True
        plan.notes[CHANGE_NOTE] = round(change, 3)
        return change >= refine.min_change

    async def refine(self, plan: RoutePlan, profile: RequestProfile, fleet: Fleet) -> None:
        """Re-order the plan by an exact count when it could matter; never raises for I/O."""
        settings = context_settings(fleet)
        counted = None
        if self.wants(plan, profile, settings):
            counted = await self._refine(plan, profile, settings)
        estimate = profile.context
        of = plan.window_of or effective_window
        if plan.notes.pop(SILENT_PENDING, False) and estimate is not None:
            _drop_silent(plan, estimate, of)
        plan.notes.pop(TOP_PENDING, None)
        if plan.notes.pop(GUARD_PENDING, False):
            assert estimate is not None
            model = fleet.models.get(profile.model)
            everyone = [Candidate(d) for d in model.deployments] if model else plan.candidates
            # the evidence: what was counted (an estimated scaffolding left out)
            evidence = estimate
            if counted is not None and counted.estimated:
                evidence = replace(estimate, prompt_tokens=counted.tokens - counted.estimated)
            if estimate.exact and fits_nowhere(everyone, evidence, of):
                raise context_too_large(profile.model, evidence, max(known_windows(everyone, of)))
            if not estimate.exact:
                plan.notes["context_guard"] = "not_counted"  # no evidence: not refused
            elif evidence is not estimate and fits_nowhere(everyone, estimate, of):
                plan.notes["context_guard"] = "scaffolding_estimated"  # not refused either

    async def count(
        self,
        dep: Deployment,
        profile: RequestProfile,
        settings: ContextConfig,
        headers: Mapping[str, str] | None = None,
    ) -> int:
        """The exact prompt count of a chat or completions request on `dep` (tools counted),
        each engine call with `headers`; raises on any failure. `POST
        /v1/messages/count_tokens` uses it."""
        return (await count_prompt(self.counter, dep, profile, settings, headers)).tokens

    async def _refine(
        self, plan: RoutePlan, profile: RequestProfile, settings: ContextConfig
    ) -> Counted | None:
        """The count, applied to the plan (None: the estimate stands)."""
        estimate = profile.context
        assert estimate is not None
        counter = _counter_for(plan.candidates, plan.window_of or effective_window)
        if counter is None:
            plan.notes["context_refine"] = "no_tokenizer"
            return None
        if self.inflight >= settings.refine.max_concurrency:
            plan.notes["context_refine"] = "skipped_busy"
            return None
        self.inflight += 1
        trace = profile.trace  # the count's calls join the request's trace
        headers = trace.count_headers() if trace is not None else None
        try:
            # wait_for, not asyncio.timeout: the plan may be stepped outside a task (the
            # picker answers in the turn the body came); the count runs in a task of its own
            counting = self._count(plan, counter, profile, settings, headers)
            counted = await asyncio.wait_for(counting, settings.refine.timeout_seconds)
        except TimeoutError:
            plan.notes["context_refine"] = "timeout"
            return None
        except (UpstreamIOError, TokenizeError, orjson.JSONDecodeError, ValueError, OSError):
            plan.notes["context_refine"] = "failed"
            return None
        finally:
            self.inflight -= 1
            if trace is not None and trace.sampled:
                trace.marks["counted"] = time.perf_counter()
        exact = replace(estimate, prompt_tokens=counted.tokens, exact=True)
        profile.context = exact
        plan.notes["context_refine"] = "exact"
        if counted.calls:
            plan.notes[COUNT_CALLS] = counted.calls
        if counted.basis is not None:
            key, text = counted.basis
            plan.notes[TEMPLATE_NOTE] = {"key": list(key), "text": text}
        plan.notes["context_estimated"] = estimate.total
        plan.notes[COUNTED_BY] = counter.id
        record_estimate(exact, plan.headers, plan.notes)
        by_priority = plan.cache.get(FIT_BY_PRIORITY, True)
        plan.candidates = order_by_fit(plan.candidates, exact, plan.window_of, None, by_priority)
        return counted

    async def _count(
        self,
        plan: RoutePlan,
        counter: Deployment,
        profile: RequestProfile,
        settings: ContextConfig,
        headers: dict[str, str] | None,
    ) -> Counted:
        estimate = profile.context
        assert estimate is not None
        counted = await count_prompt(self.counter, counter, profile, settings, headers)
        if (
            counted.estimated
            and counter.provider.kind in WHOLE_COUNTING_KINDS
            and _in_doubt(plan, estimate, counted)
        ):
            counted = await self.counter.settle(counter, profile, counted, headers)
        return counted


def _change(plan: RoutePlan, estimate: ContextEstimate, of: WindowOf, guard: bool) -> float | None:
    """How likely a count changes what happens to the request: puts another deployment
    first, or, with a refusal pending (`guard`), shows that it fits no window (then it is
    refused, where uncounted it would be routed to the largest); None: not measured."""
    by_priority = plan.cache.get(FIT_BY_PRIORITY, True)
    change = change_probability(plan.candidates, estimate, of, by_priority)
    if change is None or not guard:
        return change
    at = first_at_each_window(plan.candidates, of)
    if not at:
        return None
    largest = max(at)
    fits = estimate.within(at[largest], largest)
    return None if fits is None else min(change + 1.0 - fits, 1.0)


def _in_doubt(plan: RoutePlan, estimate: ContextEstimate, counted: Counted) -> bool:
    """Whether a known window lies between the need by the counted text alone and by the
    text plus twice its guessed scaffolding: then only the engine's own count decides."""
    low = counted.tokens - counted.estimated + estimate.output_reserve
    band = (low, low + 2 * counted.estimated)
    guessed = replace(estimate, exact=False, bounds_of=lambda _dep: band)
    return uncertain(plan.candidates, guessed, plan.window_of or effective_window)


def _drop_silent(plan: RoutePlan, estimate: ContextEstimate, of: WindowOf) -> None:
    """Silent workers whose window the request does not fit (exact, else upper bound)."""
    kept = []
    for c in plan.candidates:
        dep = c.deployment
        window = of(dep)
        need = estimate.high(dep)
        if dep.provider.truncates == "silently" and window is not None and need > window:
            plan.dropped.append(Dropped(dep.id, "context_fit", silent_reason(need, window)))
            continue
        kept.append(c)
    emptied = not kept and plan.candidates
    plan.candidates = kept
    if emptied:
        plan.emptied_by = "context_fit"
        require_route(plan)


def _counter_for(candidates: list[Candidate], of: WindowOf) -> Deployment | None:
    """A base-tier deployment (smallest known window) that can count: a local tokenizer
    before an engine."""
    able = [c.deployment for c in candidates if can_count(c.deployment)]
    if not able:
        return None
    return min(able, key=lambda d: (d.tokenizer is None, of(d) or math.inf, d.index))
