"""Drops deployments outside the provider preferences: only, ignore, max_price, quantizations.

Also applies `allow_fallbacks: false` by limiting the plan to its first candidate after
ordering. The allowlist is applied before anything is tried, so failover never leaves it.
"""

from __future__ import annotations

from fleetgate.errors import GatewayError
from fleetgate.routing.plan import Candidate, Dropped, PlanContext, RoutePlan
from fleetgate.routing.preferences import effective_preferences, names_of


class ProviderPreferenceFilter:
    name = "provider_prefs"

    def apply(
        self, ctx: PlanContext, candidates: list[Candidate]
    ) -> tuple[list[Candidate], list[Dropped]]:
        prefs = effective_preferences(ctx)
        if not prefs.active:
            return candidates, []
        if not prefs.allow_fallbacks:
            ctx.max_attempts = 1
        kept: list[Candidate] = []
        dropped: list[Dropped] = []
        for c in candidates:
            dep = c.deployment
            names = names_of(dep)
            quant = (dep.quantization or "unknown").casefold()
            reason = None
            if prefs.only is not None and not prefs.only.intersection(names):
                reason = "not in provider.only"
            elif prefs.ignore.intersection(names):
                reason = "in provider.ignore"
            elif prefs.quantizations is not None and quant not in prefs.quantizations:
                reason = f"quantization {quant} not in provider.quantizations"
            elif prefs.max_prompt_price is not None and dep.price_input > prefs.max_prompt_price:
                reason = (
                    f"input price {dep.price_input:g}/M above provider.max_price.prompt "
                    f"{prefs.max_prompt_price:g}"
                )
            elif (
                prefs.max_completion_price is not None
                and dep.price_output > prefs.max_completion_price
            ):
                reason = (
                    f"output price {dep.price_output:g}/M above provider.max_price.completion "
                    f"{prefs.max_completion_price:g}"
                )
            if reason is None:
                kept.append(c)
            else:
                dropped.append(Dropped(dep.id, self.name, reason))
        return kept, dropped

    def empty_error(self, plan: RoutePlan, now: float) -> GatewayError:
        reasons = "; ".join(
            f"{d.deployment_id}: {d.reason}" for d in plan.dropped if d.filter == self.name
        )
        return GatewayError(
            "no_allowed_provider",
            f"No deployment of {plan.requested_model!r} is allowed by the provider "
            f"preferences in force ({reasons}).",
            param="provider",
            headers=plan.headers,
        )
