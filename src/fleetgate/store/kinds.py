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
    # "list": the section is a list of blocks, each naming its own id.
    # "map": the section maps a name to a block; the store keeps the name in the body
    # under `key_field` and takes it out again when it rebuilds the config.
    shape: str = "list"
    key_field: str = "id"  # the body field that holds the id

    def to_section(self, bodies: list[Body]) -> Any:
        if self.shape == "list":
            return bodies
        return {
            b[self.key_field]: {k: v for k, v in b.items() if k != self.key_field} for b in bodies
        }

    def from_section(self, section: Any) -> list[Body]:
        if self.shape == "list":
            return list(section or [])
        return [{self.key_field: name, **(block or {})} for name, block in (section or {}).items()]


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


def _register_route_kinds() -> None:
    """Virtual models and tiers, when this build's config tree has them."""
    from fleetgate.config.schema import FleetConfig

    fields = FleetConfig.model_fields
    if "virtual_models" in fields:
        register_kind(EntityKind("virtual_models", lambda b: b["name"], key_field="name"))
    if "tiers" in fields:
        register_kind(EntityKind("tiers", lambda b: b["name"], shape="map", key_field="name"))


_register_route_kinds()


def routes_of(entities: Entities) -> Iterable[tuple[str, str, int, Body]]:
    """(kind, name, position, route) of every route of the virtual models and tiers."""
    for kind in ("virtual_models", "tiers"):
        for body in entities.get(kind, []):
            for i, route in enumerate(body.get("routes") or []):
                if isinstance(route, dict):
                    yield kind, body.get("name", "?"), i, route


@reference_finder
def _route_targets(entities: Entities) -> Iterable[Reference]:
    """Routes of virtual models and tiers name deployments or models."""
    by_id = {_deployment_id(b): b for b in entities.get("deployments", [])}
    for kind, name, _, route in routes_of(entities):
        if route.get("deployment"):
            yield Reference(kind, name, "deployments", route["deployment"])
            dep = by_id.get(route["deployment"])
            if dep is not None and "provider" in dep:
                yield Reference(kind, name, "providers", dep["provider"])
        if route.get("model"):
            # a route to a model needs only one of its deployments: removing one of several
            # leaves the route working, so only the last one (or its provider) is "in use"
            yield Reference(kind, name, "models", route["model"])
            serving = [(i, d) for i, d in by_id.items() if d.get("model") == route["model"]]
            if len(serving) == 1:
                yield Reference(kind, name, "deployments", serving[0][0])
            providers = {d.get("provider") for _, d in serving}
            if len(providers) == 1 and None not in providers:
                yield Reference(kind, name, "providers", providers.pop())


@reference_finder
def _deployment_providers(entities: Entities) -> Iterable[Reference]:
    for body in entities.get("deployments", []):
        if "provider" in body:
            yield Reference("deployments", _deployment_id(body), "providers", body["provider"])


def users_of(entities: Entities, kind: str, entity_id: str) -> list[Reference]:
    """Every entity that still names (kind, id)."""
    seen: list[Reference] = []
    for finder in REFERENCE_FINDERS:
        for ref in finder(entities):
            if ref.used_kind == kind and ref.used_id == entity_id and ref not in seen:
                seen.append(ref)
    return seen
