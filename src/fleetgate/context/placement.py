"""Where a request fits: effective windows, best-fit order, and the `context_guard`.

Best fit: deployments whose window holds the request come first, smallest window first
(short requests stay on the base fleet; a long host is their failover, not a peer); then
deployments with an unknown window; then those too small, biggest first, so that an
over-estimate can still be served. Within each of the three groups an explicit `priority`
still ranks first; ties keep the order the other orderers gave.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fleetgate.context.estimate import ContextEstimate
from fleetgate.errors import GatewayError
from fleetgate.fleet import Deployment, Fleet
from fleetgate.routing.plan import Candidate

ESTIMATE_HEADER = "X-Fleetgate-Context-Estimate"
TIER_HEADER = "X-Fleetgate-Context-Tier"

_FITS, _UNKNOWN, _OVERFLOW = 0, 1, 2


def effective_window(dep: Deployment) -> int | None:
    """The window routing trusts: the declared one (discovery will clamp it); None: unknown."""
    return dep.context_window


def known_windows(candidates: Iterable[Candidate]) -> set[int]:
    windows = set()
    for c in candidates:
        window = effective_window(c.deployment)
        if window is not None:
            windows.add(window)
    return windows


def _fit_key(candidate: Candidate, need: int) -> tuple[int, int, int]:
    # fit decides first (can it hold the request at all), then the operator's explicit
    # priority, then the window (best fit); load and config order come from the stable sort
    dep = candidate.deployment
    window = effective_window(dep)
    if window is None:
        return (_UNKNOWN, dep.priority, 0)
    if window >= need:
        return (_FITS, dep.priority, window)
    return (_OVERFLOW, dep.priority, -window)


def order_by_fit(candidates: list[Candidate], need: int) -> list[Candidate]:
    """Best-fit order for a request needing `need` tokens (stable; inert for one window)."""
    if len(candidates) < 2:
        return candidates
    windows = {effective_window(c.deployment) for c in candidates}
    if len(windows) < 2:
        return candidates  # one capacity: route exactly as without tiers
    return sorted(candidates, key=lambda c: _fit_key(c, need))


def fits_nowhere(candidates: Iterable[Candidate], need: int) -> bool:
    """True when every candidate's window is known and too small."""
    for c in candidates:
        window = effective_window(c.deployment)
        if window is None or window >= need:
            return False
    return True


def guard_for(fleet: Fleet, model_id: str) -> str:
    model = fleet.models.get(model_id)
    if model is not None and model.context_guard is not None:
        return model.context_guard
    return fleet.config.routing.context.guard


def near_boundary(need: int, windows: Iterable[int], low: float, high: float) -> bool:
    return any(low * w <= need <= high * w for w in windows)


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
