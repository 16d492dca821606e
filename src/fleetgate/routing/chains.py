"""Turning declared routes (of a virtual model or a tier) into candidates, in their order."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fleetgate.fleet import Deployment
from fleetgate.fleet.routes import Route
from fleetgate.routing.plan import Candidate, Dropped


def merge_params(
    base: dict[str, Any] | None, override: dict[str, Any] | None
) -> dict[str, Any] | None:
    """A route's overrides on top of its deployment's; `extra_body` merges key by key."""
    if not base:
        return dict(override) if override else None
    if not override:
        return dict(base)
    merged = {**base, **override}
    if "extra_body" in base and "extra_body" in override:
        merged["extra_body"] = {**base["extra_body"], **override["extra_body"]}
    return merged


def deployment_candidates(deployments: Iterable[Deployment]) -> list[Candidate]:
    """A real model's (or one deployment's) candidates: scope `deployment`, each carrying its
    deployment's own `params` (they apply in every scope, not only under a route)."""
    return [Candidate(dep, params=merge_params(dep.params, None)) for dep in deployments]


def route_candidates(
    routes: Iterable[Route],
    scope: str,
    virtual_model: str | None = None,
    tier: str | None = None,
) -> list[Candidate]:
    """Every deployment of every route, in declared order, with the route's own scope."""
    return [
        Candidate(
            dep,
            scope=scope,
            key_label=route.key_label,
            params=merge_params(dep.params, route.params),
            virtual_model=virtual_model,
            tier=tier,
        )
        for route in routes
        for dep in route.deployments
    ]


def dedup(candidates: list[Candidate], dropped: list[Dropped]) -> list[Candidate]:
    """Keep the first candidate of each (deployment, key label); record the others."""
    seen: dict[tuple[str, str | None], int] = {}
    kept: list[Candidate] = []
    for c in candidates:
        key = (c.deployment.id, c.key_label)
        if key in seen:
            label = f" with key label {c.key_label!r}" if c.key_label else ""
            dropped.append(
                Dropped(
                    c.deployment.id,
                    "dedup",
                    f"already in the chain{label} at position {seen[key]} ({c.scope})",
                )
            )
            continue
        seen[key] = len(kept)
        kept.append(c)
    return kept
