"""What a request needs on each deployment: its estimate as a (low, high) band.

The family of each deployment (`tokenizer_family`, or inferred from the model name) costs
the request's tally; the deployment's calibration (or, until it has one, the family's
measured spread) gives the factors that bound the true count, clamped to the configured
`refine.band_low` / `band_high`. One tally, one dot product per family, a cache per
deployment.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from fleetgate.config.schema import ContextConfig
from fleetgate.context.calibration import CalibrationBook
from fleetgate.context.estimate import (
    BoundsOf,
    ContextEstimate,
    media_tokens,
    output_reserve,
    text_tokens,
)
from fleetgate.context.families import FAMILIES
from fleetgate.context.tally import MESSAGES, Tally, tally_body
from fleetgate.fleet import Deployment


def family_tokens(tally: Tally, family: str, settings: ContextConfig) -> int:
    """The family's central estimate of the text and template tokens (no media)."""
    fam = FAMILIES[family]
    tokens = text_tokens(tally, fam, settings)
    if settings.message_overhead is not None:  # the operator's per-message cost instead
        tokens += round(
            tally.counts[MESSAGES] * (settings.message_overhead - fam.weights[MESSAGES])
        )
    return max(tokens, 0)


def bounds_function(
    tally: Tally, reserve: int, settings: ContextConfig, book: CalibrationBook | None
) -> tuple[BoundsOf, dict[str, int]]:
    """(bounds per deployment, the central estimate per family asked so far)."""
    raw: dict[str, int] = {}
    cache: dict[str, tuple[int, int]] = {}
    media = media_tokens(tally, settings)
    band_low, band_high = settings.refine.band_low, settings.refine.band_high

    def bounds(dep: Deployment) -> tuple[int, int]:
        found = cache.get(dep.id)
        if found is not None:
            return found
        family = dep.tokenizer_family
        tokens = raw.get(family)
        if tokens is None:
            tokens = raw[family] = family_tokens(tally, family, settings)
        prior = FAMILIES[family].spread
        low, high = book.factors(dep.id, prior) if book is not None else prior
        low, high = max(low, band_low), min(high, band_high)
        found = (
            math.floor(tokens * low) + media + reserve,
            math.ceil(tokens * high) + media + reserve,
        )
        cache[dep.id] = found
        return found

    return bounds, raw


def estimate_need(
    body: dict[str, Any],
    endpoint: str,
    settings: ContextConfig,
    deployments: list[Deployment],
    book: CalibrationBook | None,
) -> tuple[ContextEstimate, dict[str, int]]:
    """The request's estimate for these deployments: the header shows the largest upper
    bound among them; `bounds(dep)` gives each one's band."""
    tally = tally_body(body, endpoint)
    reserve = output_reserve(body, endpoint, settings.default_output_reserve)
    bounds, raw = bounds_function(tally, reserve, settings, book)
    high = max((bounds(d)[1] for d in deployments), default=reserve)
    estimate = ContextEstimate(
        high - reserve,
        reserve,
        media_parts=tally.images + tally.audio,
        tally=tally,
        bounds_of=bounds,
        floor_of=_floor_function(body, endpoint, reserve, settings, book),
    )
    return estimate, raw


def _floor_function(
    body: dict[str, Any],
    endpoint: str,
    reserve: int,
    settings: ContextConfig,
    book: CalibrationBook | None,
) -> Callable[[Deployment], int]:
    """The low bound of the body tallied with its runs collapsed, walked on first use only
    (a refusal or a silent worker's exclusion is in question, not every request)."""
    made: list[BoundsOf] = []

    def floor(dep: Deployment) -> int:
        if not made:
            collapsed = tally_body(body, endpoint, collapsed=True)
            made.append(bounds_function(collapsed, reserve, settings, book)[0])
        return made[0](dep)[0]

    return floor
