"""The key check on the hot path: who is calling, may they use this model, are they in limits."""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Coroutine, Iterable
from typing import Any

from fleetgate.auth.budgets import Budgets, Hold, LocalBudgets, expected_cost, hold_seconds
from fleetgate.auth.keys import ClientKey, KeyRing
from fleetgate.auth.limits import Limiter, MemoryLimiter, retry_after
from fleetgate.errors import GatewayError
from fleetgate.execute.outcome import Attempt
from fleetgate.fleet import Fleet
from fleetgate.ingress.profile import RequestProfile
from fleetgate.record.recorder import RequestRecord
from fleetgate.routing.plan import RoutePlan

# a request's headers as the servers give them: lower-cased names, raw bytes
RawHeaders = Iterable[tuple[bytes, bytes]]


# the only headers a key is read from
CREDENTIAL_HEADERS = ("authorization", "x-api-key")


def presented_secrets(headers: RawHeaders) -> list[str]:
    """The keys a request presents: its first `Authorization: Bearer <key>` and its first
    `x-api-key: <key>`, in the order they came. Clients may send both (Claude Code sends
    `Authorization` for `ANTHROPIC_AUTH_TOKEN` and `x-api-key` for `ANTHROPIC_API_KEY`, which
    may be a key of another service): either may be the gateway's."""
    bearer: str | None = None
    api_key: str | None = None
    order: list[str] = []
    for name, value in headers:
        if name == b"authorization" and bearer is None:
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                bearer = token.strip()
                order.append(bearer)
        elif name == b"x-api-key" and api_key is None and value.strip():
            api_key = value.decode("latin-1").strip()
            order.append(api_key)
    return order


def presents(headers: RawHeaders, expected: str | None) -> bool:
    """Whether the request carries `expected` (an admin or metrics key); constant-time."""
    if not expected:
        return False
    want = expected.encode()
    # every presented key is compared, so the time does not tell which one matched
    matches = [hmac.compare_digest(secret.encode(), want) for secret in presented_secrets(headers)]
    return any(matches)


class Guard:
    def __init__(self, ring: KeyRing, enabled: bool, limiter: Limiter | None = None) -> None:
        self.ring = ring
        self.enabled = enabled
        self.limiter: Limiter = limiter or MemoryLimiter()
        self.local_budgets = LocalBudgets(ring)
        self.budgets: Budgets = self.local_budgets  # cluster-wide with Redis
        self._tasks: set[asyncio.Task[Any]] = set()

    def identify(self, headers: RawHeaders, model: str | None = None) -> ClientKey | None:
        """The caller's key (401 when none), allowed to use `model` (403); no limits counted.
        None when auth is off."""
        if not self.enabled:
            return None
        secrets = presented_secrets(headers)
        key = next(filter(None, map(self.ring.lookup, secrets)), None)
        if key is None:
            what = "is not valid" if secrets else "is missing"
            raise GatewayError(
                "invalid_api_key",
                f"The API key {what}. Send `Authorization: Bearer <key>` or `x-api-key` "
                "with a key made through the admin API.",
            )
        if model is not None and not key.allows(model):
            raise GatewayError(
                "model_not_allowed",
                f"This key may not use {model!r}; it may use: "
                f"{', '.join(sorted(key.allowed_models or ())) or 'nothing'}.",
                param="model",
            )
        return key

    async def admit(self, headers: RawHeaders, model: str) -> ClientKey | None:
        """The caller's key, or a 401/403/429 GatewayError; None when auth is off."""
        key = self.identify(headers, model)
        if key is None:
            return None
        now = time.time()
        if key.budget is not None and self.ring.spent(key) >= key.budget:
            raise _over_budget(key)  # known here already; `hold` decides the rest
        if key.rpm is not None and not await self.limiter.hit(f"rpm:{key.id}", key.rpm, now):
            raise self._limited(f"{key.rpm} requests per minute", now)
        if key.tpm is not None and await self.limiter.used(f"tpm:{key.id}", now) >= key.tpm:
            raise self._limited(f"{key.tpm} tokens per minute", now)
        return key

    @staticmethod
    def _limited(what: str, now: float) -> GatewayError:
        wait = max(1, round(retry_after(now) + 0.5))
        return GatewayError(
            "rate_limited",
            f"This key is over its limit of {what}; retry in {wait}s.",
            headers={"Retry-After": str(wait)},
        )

    async def hold(
        self, key: ClientKey, plan: RoutePlan, profile: RequestProfile, fleet: Fleet
    ) -> Hold | None:
        """Before dispatch: hold the request's expected cost against the key's budget
        (429 `budget_exceeded` when spent and held reach it). None: the key has no budget."""
        if key.budget is None:
            return None
        amount = expected_cost(plan, profile, fleet)
        hold = await self.budgets.hold(key, amount, profile.request_id, hold_seconds(plan))
        if hold is None:
            raise _over_budget(key)
        return hold

    async def release(self, key: ClientKey, hold: Hold, cost: float) -> None:
        """Settle a hold now (before the answer is sent, so a next request sees it)."""
        await self.budgets.settle(key, hold, cost)

    def settle(self, key: ClientKey, tokens: int, cost: float, hold: Hold | None = None) -> None:
        """After a request: count its tokens and spend, off the response path."""
        if hold is not None:
            if not hold.settled:
                self._spawn(self.budgets.settle(key, hold, cost))
        elif cost:
            self.ring.add_spend(key.id, cost)
        if key.tpm is not None and tokens:
            self._spawn(self.limiter.add(f"tpm:{key.id}", tokens, time.time()))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _over_budget(key: ClientKey) -> GatewayError:
    return GatewayError(
        "budget_exceeded",
        f"This key has spent its budget of {key.budget:g}; ask an operator to raise it.",
    )


def record_usage(record: RequestRecord, fleet: Fleet) -> tuple[int, float]:
    """Tokens a request used and what they cost at its deployment's prices."""
    return usage(record.attempts, record.deployment_id, record.notes, fleet)


def usage(
    attempts: list[Attempt], deployment_id: str | None, notes: dict[str, Any], fleet: Fleet
) -> tuple[int, float]:
    """Tokens the serving attempt used and what they cost at its deployment's prices."""
    if not attempts or deployment_id is None:
        return 0, 0.0
    last = attempts[-1]
    if last.deployment_id != deployment_id:  # a cut answer served after later failures
        last = next((a for a in reversed(attempts) if a.deployment_id == deployment_id), last)
    estimate = notes.get("context_estimate")
    # streams carry no usage here: count the gateway's own prompt estimate then
    prompt = last.prompt_tokens or (estimate if isinstance(estimate, int) else 0)
    completion = last.completion_tokens or 0
    dep = fleet.deployments.get(deployment_id)
    if dep is None:
        return prompt + completion, 0.0
    cost = (prompt * dep.price_input + completion * dep.price_output) / 1e6
    return prompt + completion, cost
