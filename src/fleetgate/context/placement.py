"""Where a request fits: effective windows, best-fit order, and the `context_guard`.

Best fit, by the upper bound of what the request needs on each deployment (see
`estimate.py`): deployments whose window holds it come first, smallest window first
(short requests stay on the base fleet; a long host is their failover, not a peer); then
deployments with an unknown window; then those too small, biggest first, so that an
over-estimate can still be served. Within each of the three groups the operator's
`priority` ranks before the window (a request's own `order` / `sort` instead rank after the
window, as they always have: `by_priority=False`); ties keep the order the other orderers
gave. A model whose deployments share one priority routes by window alone.

A window the client asks for (Ollama's `options.num_ctx`, the `wanted` argument) raises the
need placement sorts by to at least that window: a deployment holds the request only when
its window holds both. It is a wish, not evidence of the prompt's size, so the guard
(`fits_nowhere`) and the removal of silent workers never see it. (Native Ollama requests
are never counted exactly, so the refine stage's re-order never meets one.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from fleetgate.context.estimate import ContextEstimate
from fleetgate.errors import GatewayError
from fleetgate.fleet import Deployment, Fleet
from fleetgate.routing.plan import Candidate

ESTIMATE_HEADER = "X-Fleetgate-Context-Estimate"
TIER_HEADER = "X-Fleetgate-Context-Tier"

_FITS, _UNKNOWN, _OVERFLOW = 0, 1, 2
FIT_GROUPS = ("holds the request", "window unknown", "window too small")
# PlanContext.cache: whether best fit ranked by priority inside each group (False when the
# request's `order` / `sort` ranked the candidates), so a re-order after an exact count
# keeps the same keys
FIT_BY_PRIORITY = "fit_by_priority"


# a deployment's window for one request (discovered, clamped; see routing/windows.py)
WindowOf = Callable[[Deployment], int | None]


def effective_window(dep: Deployment) -> int | None:
    """The declared window; None: unknown. Plans built with discovery use `plan.window_of`."""
    return dep.context_window


def known_windows(candidates: Iterable[Candidate], window_of: WindowOf | None = None) -> set[int]:
    of = window_of or effective_window
    windows = set()
    for c in candidates:
        window = of(c.deployment)
        if window is not None:
            windows.add(window)
    return windows


def fit_group(window: int | None, need: int) -> int:
    """0: the window holds the need, 1: the window is unknown, 2: it is too small."""
    if window is None:
        return _UNKNOWN
    return _FITS if window >= need else _OVERFLOW


def _fit_key(
    candidate: Candidate, need: int, of: WindowOf, by_priority: bool
) -> tuple[int, int, int]:
    # whether the window holds the request first (holds, unknown, too small); then the
    # operator's priority; then the capacity rank: the smallest window that holds it, the
    # biggest of those too small. The earlier orderers' order (`order` / `sort`, loaded
    # model, load, config order) decides among the rest via the stable sort
    dep = candidate.deployment
    window = of(dep)
    group = fit_group(window, need)
    priority = dep.priority if by_priority else 0
    if window is None:
        return (group, priority, 0)
    return (group, priority, window if group == _FITS else -window)


def _high(need: int | ContextEstimate) -> Callable[[Deployment], int]:
    if isinstance(need, int):
        return lambda _dep: need
    return need.high


def order_by_fit(
    candidates: list[Candidate],
    need: int | ContextEstimate,
    window_of: WindowOf | None = None,
    wanted: int | None = None,
    by_priority: bool = True,
) -> list[Candidate]:
    """Best-fit order by the request's upper bound on each deployment, raised to the window
    the client asked for (`wanted`) when it names one (stable; inert for one window)."""
    if len(candidates) < 2:
        return candidates
    of = window_of or effective_window
    windows = {of(c.deployment) for c in candidates}
    if len(windows) < 2:
        return candidates  # one capacity: route exactly as without tiers
    high = _high(need)
    if wanted is None:
        return sorted(candidates, key=lambda c: _fit_key(c, high(c.deployment), of, by_priority))
    return sorted(
        candidates, key=lambda c: _fit_key(c, max(high(c.deployment), wanted), of, by_priority)
    )


def fits_nowhere(
    candidates: Iterable[Candidate],
    need: int | ContextEstimate,
    window_of: WindowOf | None = None,
    lower_bound: bool = False,
) -> bool:
    """True when every candidate's window is known and too small: for the upper bound of
    the need, or (with `lower_bound`) even for its fewest tokens, which is evidence."""
    of = window_of or effective_window
    if isinstance(need, int):
        bound: Callable[[Deployment], int] = lambda _dep: need  # noqa: E731
    else:
        bound = need.floor if lower_bound else need.high
    for c in candidates:
        window = of(c.deployment)
        if window is None or window >= bound(c.deployment):
            return False
    return True


def uncertain(
    candidates: Iterable[Candidate],
    estimate: ContextEstimate,
    of: WindowOf,
    min_share: float = 0.0,
) -> bool:
    """Whether some known window lies inside the request's band on its deployment: there
    the estimate alone cannot tell whether it fits, and an exact count can. With
    `min_share`, also a window outside the band where the measured spread gives the
    request at least that chance of fitting, or of not fitting (`estimate.within`): a band
    is the spread's 3 % and 97 % quantiles, and a count that is likely enough to matter
    (`refine.min_change`, 2 % by default) must not be ruled out by the band first."""
    if estimate.exact:
        return False
    seen: set[int] = set()
    for c in candidates:
        window = of(c.deployment)
        if window is None:
            continue
        low, high = estimate.bounds(c.deployment)
        if low <= window < high:
            return True
        if min_share and window not in seen:  # the first deployment at a window speaks
            seen.add(window)
            share = estimate.within(c.deployment, window)
            if share is not None and min_share <= share <= 1.0 - min_share:
                return True
    return False


def first_at_each_window(candidates: Iterable[Candidate], of: WindowOf) -> dict[int, Deployment]:
    """Each known window, on the first candidate that has it."""
    at: dict[int, Deployment] = {}
    for c in candidates:
        window = of(c.deployment)
        if window is not None:
            at.setdefault(window, c.deployment)
    return at


def change_probability(
    candidates: list[Candidate],
    estimate: ContextEstimate,
    of: WindowOf,
    by_priority: bool = True,
) -> float | None:
    """How likely an exact count puts a different deployment first than the estimate does.

    The best-fit order by an exact need N depends only on which known windows hold it, so
    the needs fall into intervals: up to the smallest window, up to each next one, beyond
    the largest. The count changes the first candidate exactly when N lies in an interval
    whose order starts elsewhere. Only a window between two intervals that differ in that
    way matters; how likely N is at most it is read from the measured spread of the
    estimate on its deployment (`ContextEstimate.within`). None when such a window lies
    inside a band no spread was measured for (a family's prior): the band alone then says
    a count could matter."""
    if estimate.exact or len(candidates) < 2:
        return 0.0
    at = first_at_each_window(candidates, of)
    if len(at) < 2:
        return 0.0
    first = order_by_fit(candidates, estimate, of, None, by_priority)[0].deployment
    windows = sorted(at)
    # per interval, whether an exact need in it puts another deployment first
    needs = [*windows, windows[-1] + 1]
    moved = [
        order_by_fit(candidates, need, of, None, by_priority)[0].deployment is not first
        for need in needs
    ]
    # P(changed) = sum over intervals j of moved_j * (F(w_j) - F(w_j-1)), F the chance the
    # need is at most a window: each window weighs as moved on its left minus on its right
    change = float(moved[-1])
    for i, window in enumerate(windows):
        weight = moved[i] - moved[i + 1]
        if weight:
            share = estimate.within(at[window], window)
            if share is None:
                return None
            change += weight * share
    return min(max(change, 0.0), 1.0)


def guard_for(fleet: Fleet, model_id: str) -> str:
    """`reject`, `allow` or `warn`: the model's own guard, else a `model_capabilities` block
    when the config has one (`observe` mode never rejects), else `routing.context.guard`."""
    model = fleet.models.get(model_id)
    if model is not None and model.context_guard is not None:
        return model.context_guard
    config = fleet.config
    if "model_capabilities" in config.model_fields_set:
        caps = config.model_capabilities
        return "warn" if caps.mode == "observe" else caps.context_guard
    return config.routing.context.guard


def context_too_large(model: str, estimate: ContextEstimate, largest: int) -> GatewayError:
    how = "counted exactly" if estimate.exact else "estimated"
    return GatewayError(
        "context_too_large",
        f"The request needs about {estimate.total} tokens ({how}: {estimate.prompt_tokens} "
        f"input + {estimate.output_reserve} output reserve), more than the largest context "
        f"window of {model!r} ({largest} tokens). Shorten the input or lower the output "
        "limit (max_tokens).",
        param="messages",
    )


def record_estimate(
    estimate: ContextEstimate, headers: dict[str, str], notes: dict[str, Any]
) -> None:
    headers[ESTIMATE_HEADER] = estimate.header()
    notes["context_estimate"] = estimate.total
    notes["context_exact"] = estimate.exact
