"""Provider preferences: merging the layers into the one set a plan follows (the parsing of
each layer is `config/preferences.py`).

Layers, widest first: the gateway's environment, the model's config, the request's
`provider` object. Restrictions combine (`only` intersects, `ignore` unites, `max_price`
takes the lower bound, `quantizations` intersects), so a narrower layer can never leave a
wider layer's allowlist; choices (`order`, `sort`, `allow_fallbacks`,
`require_parameters`) are taken from the narrowest layer that sets them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleetgate.config.schema import ProviderPreferences, SortSpec

if TYPE_CHECKING:
    from fleetgate.fleet import Deployment
    from fleetgate.routing.plan import PlanContext


@dataclass(frozen=True, slots=True)
class EffectivePreferences:
    only: frozenset[str] | None = None  # casefolded provider or deployment ids
    ignore: frozenset[str] = frozenset()
    order: tuple[str, ...] = ()
    allow_fallbacks: bool = True
    sort: SortSpec | None = None
    max_prompt_price: float | None = None
    max_completion_price: float | None = None
    quantizations: frozenset[str] | None = None
    require_parameters: bool = False
    sources: tuple[str, ...] = ()  # the layers that set anything: env, model, request

    @property
    def active(self) -> bool:
        return bool(self.sources)

    def describe(self) -> dict[str, Any]:
        """The set in force, for the plan's notes and every attempt's provenance."""
        out: dict[str, Any] = {"sources": list(self.sources)}
        if self.only is not None:
            out["only"] = sorted(self.only)
        if self.ignore:
            out["ignore"] = sorted(self.ignore)
        if self.order:
            out["order"] = list(self.order)
        out["allow_fallbacks"] = self.allow_fallbacks
        if self.sort is not None:
            out["sort"] = {"by": self.sort.by, "partition": self.sort.partition}
        if self.max_prompt_price is not None or self.max_completion_price is not None:
            out["max_price"] = {
                "prompt": self.max_prompt_price,
                "completion": self.max_completion_price,
            }
        if self.quantizations is not None:
            out["quantizations"] = sorted(self.quantizations)
        out["require_parameters"] = self.require_parameters
        return out


def names_of(dep: Deployment) -> tuple[str, str]:
    """What an `only` / `ignore` / `order` entry may name: the provider or the deployment."""
    return dep.provider.id.casefold(), dep.id.casefold()


def _fold(values: Iterable[str]) -> list[str]:
    return [v.strip().casefold() for v in values if v.strip()]


def _lower(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def merge(layers: Iterable[tuple[str, ProviderPreferences | None]]) -> EffectivePreferences:
    """Combine the layers, widest first (see the module docstring)."""
    eff = EffectivePreferences()
    for source, prefs in layers:
        if prefs is None or not prefs.model_fields_set:
            continue
        only = eff.only
        if prefs.only:  # an empty list sets nothing (clients often send defaults)
            mine = frozenset(_fold(prefs.only))
            only = mine if only is None else only & mine
        quants = eff.quantizations
        if prefs.quantizations:
            mine = frozenset(_fold(prefs.quantizations))
            quants = mine if quants is None else quants & mine
        price = prefs.max_price
        eff = EffectivePreferences(
            only=only,
            ignore=eff.ignore | frozenset(_fold(prefs.ignore or ())),
            order=tuple(_fold(prefs.order)) if prefs.order else eff.order,
            allow_fallbacks=(
                eff.allow_fallbacks if prefs.allow_fallbacks is None else prefs.allow_fallbacks
            ),
            sort=prefs.sort or eff.sort,
            max_prompt_price=_lower(eff.max_prompt_price, price and price.prompt),
            max_completion_price=_lower(eff.max_completion_price, price and price.completion),
            quantizations=quants,
            require_parameters=(
                eff.require_parameters
                if prefs.require_parameters is None
                else prefs.require_parameters
            ),
            sources=(*eff.sources, source),
        )
    return eff


def effective_preferences(ctx: PlanContext) -> EffectivePreferences:
    """The merged preferences for this plan, computed once and shared by the stages."""
    cached = ctx.cache.get("preferences")
    if cached is None:
        model = ctx.fleet.models.get(ctx.profile.model)
        if model is None:  # the name pinned a deployment: its model's preferences apply
            dep = ctx.fleet.deployments.get(ctx.profile.model)
            model = ctx.fleet.models.get(dep.model) if dep is not None else None
        cached = merge(
            [
                ("env", ctx.fleet.env_preferences),
                ("model", model.preferences if model is not None else None),
                ("request", ctx.profile.preferences),
            ]
        )
        ctx.cache["preferences"] = cached
        if cached.active:
            ctx.notes["preferences"] = cached.describe()
    return cached
