"""`fleetgate diff --config FILE`: the fleet file against the store, without applying it."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from fleetgate.commands.store import is_empty, store_url, with_store
from fleetgate.config import FleetConfig, load_config_file
from fleetgate.store.config_store import ConfigStore, entities_of
from fleetgate.store.db import Database
from fleetgate.store.fleet_file import (
    EntityChange,
    changes,
    field_changes,
    fleet_source,
    runtime_edits,
    same,
)
from fleetgate.store.kinds import Entities


@dataclass(frozen=True, slots=True)
class StoreView:
    where: str
    empty: bool
    entities: Entities
    last_file: Entities | None
    version: int


async def _read(db: Database) -> StoreView:
    if await is_empty(db):
        return StoreView(db.shown_url, True, {}, None, 0)
    store = ConfigStore(db)
    return StoreView(
        db.shown_url, False, await store.entities(), await store.last_file(), await store.version()
    )


def _value(value: Any) -> str:
    return "(unset)" if value is None else json.dumps(value, sort_keys=True)


def _masked(body: dict[str, Any] | None) -> dict[str, Any] | None:
    from fleetgate.admin.entities import public_body

    return None if body is None else public_body(body)


def _what_serve_does(config: FleetConfig, view: StoreView, file: Entities) -> str:
    if view.empty:
        return "the store is empty: `fleetgate serve` seeds it from this file."
    has_fleet = any(file.values())
    if fleet_source(config, has_fleet) == "store":
        return (
            "storage.fleet_source is `store`: `fleetgate serve` keeps the store and does not "
            "apply the file's fleet sections."
        )
    if view.last_file is not None and same(view.last_file, file):
        return (
            "the file is unchanged since it was last applied: `fleetgate serve` keeps the "
            "store, runtime edits included; they are replaced when the file next changes."
        )
    if same(view.entities, file):
        return "the store already holds this file's fleet."
    return (
        "the file changed since it was last applied: `fleetgate serve` applies it, and the "
        "store's fleet becomes the file's."
    )


def _lines(diffs: list[EntityChange], runtime: set[tuple[str, str]] | None) -> list[str]:
    """One block per entity, store -> file."""
    out = []
    marks = {"added": "+", "removed": "-", "changed": "~"}
    where = {
        "added": "  (in the file, not in the store)",
        "removed": "  (in the store, not in the file)",
        "changed": "",
    }
    for c in diffs:
        edited = runtime is not None and (c.kind, c.id) in runtime
        note = "  [runtime edit since the file was last applied]" if edited else ""
        out.append(f"{marks[c.change]} {c.label}{where[c.change]}{note}")
        if c.change == "changed":
            fields = field_changes(_masked(c.before), _masked(c.after))
            out.extend(f"    {path}: {_value(old)} -> {_value(new)}" for path, old, new in fields)
            if not fields:  # only literal credentials differ, and they are never printed
                out.append("    a literal secret changed (values not shown)")
    return out


def render(config_path: str, config: FleetConfig, view: StoreView) -> tuple[str, bool]:
    """The report, and whether file and store differ."""
    file = entities_of(config)
    diffs = changes(view.entities, file)  # store -> file
    edits = runtime_edits(view.entities, view.last_file) if not view.empty else None
    runtime = {(e.kind, e.id) for e in edits} if edits is not None else None
    head = f"fleet file {config_path} against the store at {view.where}"
    if not view.empty:
        head += f" (config version {view.version})"
    lines = [head, _what_serve_does(config, view, file), ""]
    if not diffs:
        lines.append("no differences.")
    else:
        lines.extend(_lines(diffs, runtime))
        lines.append(f"{len(diffs)} difference(s) (store -> file).")
    return "\n".join(lines), bool(diffs)


def run(config_path: str) -> int:
    """Exit status: 0 no differences, 1 differences (as diff(1))."""
    config = load_config_file(config_path)
    view = asyncio.run(with_store(store_url(config), _read))
    text, differ = render(config_path, config, view)
    print(text)
    return 1 if differ else 0
