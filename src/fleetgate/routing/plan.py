"""The route plan: candidates in the order they will be tried, and every dropped one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from fleetgate.fleet import Deployment, Fleet
from fleetgate.ingress.profile import RequestProfile
from fleetgate.state.runtime import RuntimeState

if TYPE_CHECKING:
    from fleetgate.discovery.engine_load import EngineLoads
    from fleetgate.discovery.store import WindowStore
    from fleetgate.errors import GatewayError
    from fleetgate.routing.sticky import StickyTiers
    from fleetgate.state.affinity import MemoryAffinity


@dataclass(frozen=True, slots=True)
class Candidate:
    deployment: Deployment
    scope: str = "deployment"  # where its parameter overrides come from
    key_label: str | None = None
    params: dict[str, Any] | None = None  # body overrides for this route
    # body fields removed for this route: sampling knobs the deployment does not support
    drop_params: tuple[str, ...] = ()
    virtual_model: str | None = None  # the virtual model whose chain holds this route
    tier: str | None = None  # the named tier whose chain holds this route
    # the head of a virtual's `default` part: kept when cooling down (credentials still count)
    last_resort: bool = False


@dataclass(frozen=True, slots=True)
class Dropped:
    deployment_id: str
    filter: str
    reason: str
    retry_at: float | None = None  # wall-clock time its cooldown or open circuit ends
    rate_limited: bool = False  # out because it answered 429


@dataclass(slots=True)
class PlanContext:
    profile: RequestProfile
    fleet: Fleet
    state: RuntimeState
    now: float
    sticky: StickyTiers | None = None  # auto's per-conversation tier memory
    windows: WindowStore | None = None  # discovered windows (None: declared windows only)
    # this request's window per deployment (discovered, clamped, `num_ctx`); None: declared
    window_of: Callable[[Deployment], int | None] | None = None
    affinity: MemoryAffinity | None = None  # which deployment last served each prefix
    loads: EngineLoads | None = None  # the engines' own load, polled (None: not polled)
    # the plan's own headers and notes dicts, so filters and orderers can fill them
    headers: dict[str, str] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    cache: dict[str, Any] = field(default_factory=dict)  # data one stage derives for others
    max_attempts: int | None = None  # set by a stage to cut the plan after ordering


@dataclass(slots=True)
class RoutePlan:
    requested_model: str
    resolution: str  # which precedence rule matched: "explicit" | "deployment" | ...
    candidates: list[Candidate]
    dropped: list[Dropped] = field(default_factory=list)
    emptied_by: str | None = None  # the filter that removed the last candidate
    # response headers a stage wants the client to see (e.g. X-Fleetgate-Context-Tier)
    headers: dict[str, str] = field(default_factory=dict)
    # facts a stage wants recorded with the request (numbers and ids only)
    notes: dict[str, Any] = field(default_factory=dict)
    # the error an empty plan answers with, when resolution has a more precise one
    on_empty: Callable[[RoutePlan], GatewayError] | None = None
    window_of: Callable[[Deployment], int | None] | None = None  # as PlanContext.window_of
    # PlanContext.cache: what stages derived, for the errors built later (never shown)
    cache: dict[str, Any] = field(default_factory=dict)
    # per position, the key that ranked it before the next (routing/ranked_by.py); called
    # only when the plan is described
    ranked_by: Callable[[list[Candidate]], list[str | None]] | None = None

    def describe(self) -> dict[str, Any]:
        """The plan as the explain endpoint and CLI show it."""
        ranks = self.ranked_by(self.candidates) if self.ranked_by is not None else []
        return {
            "model": self.requested_model,
            "resolution": self.resolution,
            "candidates": [
                {
                    "position": i,
                    "deployment": c.deployment.id,
                    "provider": c.deployment.provider.id,
                    "upstream_model": c.deployment.upstream_model,
                    "context_window": (
                        self.window_of(c.deployment)
                        if self.window_of is not None
                        else c.deployment.context_window
                    ),
                    "tier": c.deployment.tier,
                    "scope": c.scope,
                    "key_label": c.key_label,
                    "params": c.params,
                    "drop_params": list(c.drop_params),
                    "virtual_model": c.virtual_model,
                    "chain_tier": c.tier,  # the named tier whose chain holds this route
                    # the key that put it ahead of the next candidate (docs/routing.md)
                    "ranked_by": ranks[i] if i < len(ranks) else None,
                }
                for i, c in enumerate(self.candidates)
            ],
            "dropped": [
                {"deployment": d.deployment_id, "filter": d.filter, "reason": d.reason}
                for d in self.dropped
            ],
            "emptied_by": self.emptied_by,
            "headers": self.headers,
            "notes": self.notes,
        }


class CandidateFilter(Protocol):
    """Keeps the candidates that can serve the request; says why it drops each other one.

    A filter may also define `empty_error(plan, now) -> GatewayError | None`: the error a
    client gets when this filter removed the last candidate (`require_route` uses it;
    None falls back to `no_route`).
    """

    name: str

    def apply(
        self, ctx: PlanContext, candidates: list[Candidate]
    ) -> tuple[list[Candidate], list[Dropped]]: ...


class CandidateOrderer(Protocol):
    """Ranks the surviving candidates; must keep every one of them."""

    name: str

    def order(self, ctx: PlanContext, candidates: list[Candidate]) -> list[Candidate]: ...
