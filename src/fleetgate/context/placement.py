"""Where a request fits: effective windows, best-fit order, and the `context_guard`.

Best fit, by the upper bound of what the request needs on each deployment (see
`estimate.py`): deployments whose window holds it come first, smallest window first
(short requests stay on the base fleet; a long host is their failover, not a peer); then
deployments with an unknown window; then those too small, biggest first, so that an
over-estimate can still be served. Within each of the three groups an explicit `priority`
still ranks first; ties keep the order the other orderers gave.

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


def _fit_key(candidate: Candidate, need: int, of: WindowOf) -> tuple[int, int]:
    # capacity first, as the design's Order stage says: the smallest window that holds the
    # request, unknown windows next, overflow last (biggest first); the strategy orderers'
    # order (priority, load, loaded model, config order) decides among equal windows via
    # the stable sort
    window = of(candidate.deployment)
    if window is None:
        return (_UNKNOWN, 0)
    if window >= need:
        return (_FITS, window)
    return (_OVERFLOW, -window)


def _high(need: int | ContextEstimate) -> Callable[[Deployment], int]:
    if isinstance(need, int):
        return lambda _dep: need
    return need.high


def order_by_fit(
    candidates: list[Candidate],
    need: int | ContextEstimate,
    window_of: WindowOf | None = None,
    wanted: int | None = None,
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
        return sorted(candidates, key=lambda c: _fit_key(c, high(c.deployment), of))
    return sorted(candidates, key=lambda c: _fit_key(c, max(high(c.deployment), wanted), of))


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


def uncertain(candidates: Iterable[Candidate], estimate: ContextEstimate, of: WindowOf) -> bool:
    """Whether some known window lies inside the request's band on its deployment: there
    the estimate alone cannot tell whether it fits, and an exact count can."""
    if estimate.exact:
        return False
    for c in candidates:
        window = of(c.deployment)
        if window is not None:
            low, high = estimate.bounds(c.deployment)
            if low <= window < high:
                return True
    return False


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
