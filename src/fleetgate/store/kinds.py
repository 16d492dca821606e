"""The kinds of fleet entity the store holds, how each is identified, and who uses whom.

Each kind is a list section of the config tree (`providers`, `deployments`, ...). Later
features register their own kinds (virtual models, tiers) and reference extractors here;
the store, the admin API and the delete-in-use check pick them up without other changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

Body = dict[str, Any]
Entities = dict[str, list[Body]]  # kind -> bodies in declared order


@dataclass(frozen=True, slots=True)
class EntityKind:
    name: str  # the config section, and the admin API's path segment
    id_of: Callable[[Body], str]


@dataclass(frozen=True, slots=True)
class Reference:
    """`user` (kind, id) names `used` (kind, id) in its body."""

    user_kind: str
    user_id: str
    used_kind: str
    used_id: str


ReferenceFinder = Callable[[Entities], Iterable[Reference]]

ENTITY_KINDS: dict[str, EntityKind] = {}
REFERENCE_FINDERS: list[ReferenceFinder] = []


def register_kind(kind: EntityKind) -> EntityKind:
    ENTITY_KINDS[kind.name] = kind
    return kind


def reference_finder(fn: ReferenceFinder) -> ReferenceFinder:
    REFERENCE_FINDERS.append(fn)
    return fn


def _deployment_id(body: Body) -> str:
    # same rule as config.checks.deployment_id, on the raw body
    return body.get("id") or f"{body['provider']}/{body.get('upstream_model') or body['model']}"


register_kind(EntityKind("providers", lambda b: b["id"]))
register_kind(EntityKind("deployments", _deployment_id))
register_kind(EntityKind("models", lambda b: b["id"]))


@reference_finder
def _deployment_providers(entities: Entities) -> Iterable[Reference]:
    for body in entities.get("deployments", []):
        if "provider" in body:
            yield Reference("deployments", _deployment_id(body), "providers", body["provider"])


def users_of(entities: Entities, kind: str, entity_id: str) -> list[Reference]:
    """Every entity that still names (kind, id)."""
    return [
        ref
        for finder in REFERENCE_FINDERS
        for ref in finder(entities)
        if ref.used_kind == kind and ref.used_id == entity_id
    ]
