"""The fleet file against the store: who owns the fleet sections, what differs, and which
runtime (admin) edits applying the file replaces.

Three sets of entities meet here: the store's (what is served), the file's (what the
operator wrote), and the file as it was last applied (kept in the store), which tells a
runtime edit (store moved away from it) from a file edit (file moved away from it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fleetgate.config.schema import FleetConfig
from fleetgate.store.kinds import ENTITY_KINDS, Body, Entities

EntityKey = tuple[str, str]  # (kind, id)


def fleet_source(config: FleetConfig, file_has_fleet: bool) -> str:
    """`storage.fleet_source`, or its default: `file` when the file declares a fleet."""
    if config.storage.fleet_source is not None:
        return config.storage.fleet_source
    return "file" if file_has_fleet else "store"


def by_key(entities: Entities) -> dict[EntityKey, Body]:
    """Every entity by (kind, id); the declared order is not compared."""
    out: dict[EntityKey, Body] = {}
    for name, bodies in entities.items():
        kind = ENTITY_KINDS.get(name)
        for body in bodies:
            out[(name, kind.id_of(body) if kind else str(body.get("id")))] = body
    return out


def same(a: Entities, b: Entities) -> bool:
    return by_key(a) == by_key(b)


@dataclass(frozen=True, slots=True)
class EntityChange:
    kind: str
    id: str
    change: str  # "added" | "removed" | "changed", going from `before` to `after`
    before: Body | None
    after: Body | None

    @property
    def label(self) -> str:
        return f"{self.kind}/{self.id}"


def changes(before: Entities, after: Entities) -> list[EntityChange]:
    """What turns `before` into `after`, one entry per entity, in a stable order."""
    old, new = by_key(before), by_key(after)
    out = []
    for key in sorted(old.keys() | new.keys()):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        change = "added" if a is None else "removed" if b is None else "changed"
        out.append(EntityChange(key[0], key[1], change, a, b))
    return out


def runtime_edits(store: Entities, last_file: Entities | None) -> list[EntityChange] | None:
    """Where the store moved away from the file last applied (None: no record of it)."""
    return None if last_file is None else changes(last_file, store)


def replaced_edits(
    store: Entities, file: Entities, last_file: Entities | None
) -> list[EntityChange] | None:
    """The runtime edits that applying `file` overwrites (None: no record to tell)."""
    edits = runtime_edits(store, last_file)
    if edits is None:
        return None
    target = by_key(file)
    return [e for e in edits if target.get((e.kind, e.id)) != e.after]


def _list(items: list[EntityChange]) -> str:
    groups: dict[str, list[str]] = {}
    for c in items:
        groups.setdefault(c.change, []).append(c.label)
    return "; ".join(f"{change} {', '.join(labels)}" for change, labels in groups.items())


def describe(items: list[EntityChange]) -> str:
    """`changed deployments/a; added providers/b`, or that nothing in the fleet changed."""
    return _list(items) or "no fleet entity changed"


def apply_summary(
    applied: list[EntityChange], replaced: list[EntityChange] | None, version: int
) -> str:
    """The one log line of a start that applied a changed fleet file."""
    line = f"applied the changed fleet file (config version {version}): {_list(applied)}"
    if replaced is None:
        return line + (
            "; the store kept no record of the file it was seeded from, so any of these "
            "may have replaced a runtime edit"
        )
    if not replaced:
        return line + "; it replaced no runtime edits"
    return line + f"; it replaced these runtime edits: {_list(replaced)}"


def kept_summary(edits: list[EntityChange]) -> str:
    """The log line of a start whose fleet file had not changed but the store had."""
    return (
        f"the fleet file is unchanged since it was last applied; the store keeps its runtime "
        f"edits ({_list(edits)}). `fleetgate diff --config FILE` shows them; they are "
        "replaced the next time the file changes"
    )


def field_changes(before: Any, after: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted path, old, new) for every leaf that differs; nested objects are walked."""
    if isinstance(before, dict) and isinstance(after, dict):
        out = []
        for key in sorted(before.keys() | after.keys(), key=str):
            sub = f"{path}.{key}" if path else str(key)
            out.extend(field_changes(before.get(key), after.get(key), sub))
        return out
    return [] if before == after else [(path, before, after)]
