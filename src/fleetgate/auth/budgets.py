"""Budgets that hold: a request of a key with a budget holds its expected cost before it is
sent and settles its real cost after, so concurrent requests cannot spend past the budget.

A request is admitted while `spent + held < budget`. It holds what the key's previous
request cost, and at least the least it can cost: its estimated prompt at the first
candidate's input price, plus its `max_tokens` (when set) at the output price.
`LocalBudgets` keeps the holds in this process (exact on one
replica); `state/redis_budgets.py` keeps them and the spend in Redis, exact for the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from fleetgate.auth.keys import ClientKey, KeyRing
from fleetgate.context.capabilities import context_settings
from fleetgate.context.estimate import estimate_context_tokens
from fleetgate.fleet import Fleet
from fleetgate.ingress.profile import RequestProfile
from fleetgate.routing.plan import RoutePlan

HOLD_SECONDS_MAX = 3600.0  # a hold a vanished replica left behind expires after at most this


@dataclass(slots=True)
class Hold:
    key_id: str
    amount: float
    token: str  # names the hold where it is kept
    shared: bool = False  # kept in Redis
    settled: bool = False


class Budgets(Protocol):
    async def hold(self, key: ClientKey, amount: float, request_id: str, ttl: float) -> Hold | None:
        """A hold for one request; None when the key has spent (or holds) its budget."""
        ...

    async def settle(self, key: ClientKey, hold: Hold, cost: float) -> None:
        """Replace the hold by the request's real cost (0 when nothing was served)."""
        ...


def expected_cost(plan: RoutePlan, profile: RequestProfile, fleet: Fleet) -> float:
    """What the request may cost at the first candidate's prices: its estimated prompt,
    and its output limit when it sets one (without one, the key's last cost decides)."""
    if not plan.candidates:
        return 0.0
    dep = plan.candidates[0].deployment
    if not dep.price_input and not (dep.price_output and profile.output_reserve):
        return 0.0
    estimate = profile.context or estimate_context_tokens(
        profile.body, profile.endpoint, context_settings(fleet)
    )
    output = profile.output_reserve or 0
    return (estimate.prompt_tokens * dep.price_input + output * dep.price_output) / 1e6


def hold_seconds(plan: RoutePlan) -> float:
    """How long a hold may stand: every candidate tried for its whole total timeout."""
    total = sum(c.deployment.provider.timeouts.total for c in plan.candidates)
    return min(max(total, 1.0), HOLD_SECONDS_MAX)


class LocalBudgets:
    """Holds and spend of this process, on top of the spend the key ring knows."""

    def __init__(self, ring: KeyRing) -> None:
        self.ring = ring
        self._held: dict[str, float] = {}
        self.last: dict[str, float] = {}  # what each key's last served request cost

    def expected(self, key_id: str, amount: float) -> float:
        return max(amount, self.last.get(key_id, 0.0))

    async def hold(self, key: ClientKey, amount: float, request_id: str, ttl: float) -> Hold | None:
        return self.hold_now(key, amount, request_id)

    def hold_now(self, key: ClientKey, amount: float, request_id: str) -> Hold | None:
        held = self._held.get(key.id, 0.0)
        if key.budget is None or self.ring.spent(key) + held >= key.budget:
            return None
        amount = self.expected(key.id, amount)
        self._held[key.id] = held + amount
        return Hold(key.id, amount, request_id)

    async def settle(self, key: ClientKey, hold: Hold, cost: float) -> None:
        self.settle_now(key, hold, cost)

    def settle_now(self, key: ClientKey, hold: Hold, cost: float) -> None:
        if hold.settled:
            return
        hold.settled = True
        if not hold.shared:
            left = self._held.get(key.id, 0.0) - hold.amount
            if left > 1e-12:
                self._held[key.id] = left
            else:
                self._held.pop(key.id, None)
        self.ring.add_spend(key.id, cost)
        if cost:
            self.last[key.id] = cost
