"""`Resolution`: what the resolve step hands the planner (the chain and how it was chosen)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fleetgate.errors import GatewayError
from fleetgate.routing.plan import Candidate, Dropped, RoutePlan


@dataclass(frozen=True, slots=True)
class Resolution:
    # which precedence rule matched: "virtual-model" | "header-tier" | "auto" | "explicit"
    # | "deployment"
    reason: str
    candidates: list[Candidate]
    ordered: bool = False  # True when the chain's order is declared and must be kept
    dropped: list[Dropped] = field(default_factory=list)  # removed while building the chain
    emptied_by: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    on_empty: Callable[[RoutePlan], GatewayError] | None = None
