"""Fleet entities in the store: seeding from YAML, reading, validated edits, their history."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from fleetgate.config import FleetConfig, Problem, validate_config
from fleetgate.config.loader import ConfigError
from fleetgate.store.db import Conn, Database, json_text
from fleetgate.store.errors import RowConflict
from fleetgate.store.fleet_file import changes, same
from fleetgate.store.kinds import ENTITY_KINDS, Body, Entities
from fleetgate.store.meta import get_meta, insert_meta, put_meta
from fleetgate.store.secrets import secret_box

T = TypeVar("T")

_SEEDED = "seeded"
_VERSION = "config_version"
_FILE = "fleet_file"  # the fleet file's entities as last applied (or seeded), as JSON
_CONFIG_LOCK = 0x666C6567  # serialises config edits across replicas on PostgreSQL
_LISTED = 10  # entity changes a history summary names before "and N more"


def entities_of(config: FleetConfig) -> Entities:
    """The entity sections of a config, as the user wrote them (defaults left out)."""
    data = config.model_dump(mode="json", exclude_unset=True)
    out: Entities = {}
    for name, kind in ENTITY_KINDS.items():
        bodies = kind.from_section(data.get(name))
        for body in bodies:
            if name == "deployments" and "id" not in body:
                body["id"] = kind.id_of(body)  # pin the id so later edits cannot move it
        out[name] = bodies
    return out


def compose(base: FleetConfig, entities: Entities) -> tuple[FleetConfig | None, list[Problem]]:
    """The whole config: the base file's own sections plus the stored entities."""
    data: dict[str, Any] = base.model_dump(mode="json", exclude_unset=True)
    for name in ENTITY_KINDS:
        data.pop(name, None)
    for name, bodies in entities.items():
        if bodies and name in ENTITY_KINDS:
            data[name] = ENTITY_KINDS[name].to_section(bodies)
    return validate_config(data)


def compose_or_raise(base: FleetConfig, entities: Entities) -> FleetConfig:
    config, problems = compose(base, entities)
    if config is None:
        raise ConfigError([p for p in problems if p.severity == "error"], "the fleet")
    return config


@dataclass(frozen=True, slots=True)
class FileApply:
    """What a start with `fleet_source: file` found and did (see `ConfigStore.apply_file`)."""

    outcome: str  # "unchanged" (file as last applied) | "matches" (store equals it) | "applied"
    version: int  # the config version after it
    store: Entities  # the store's entities before
    last_file: Entities | None  # the file as last applied; None: never recorded


class ConfigStore:
    """Each method is one function of a connection, run whole in a DB thread."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def seed(self, config: FleetConfig) -> bool:
        """Fill an empty store from the config file; False when it was seeded before."""
        try:
            await self.db.transaction(_seed, entities_of(config))
        except RowConflict:
            return False  # another replica (or an earlier start) seeded it
        return True

    async def entities(self) -> Entities:
        return await self.db.read(_load)

    async def last_file(self) -> Entities | None:
        """The fleet file's entities as last applied or seeded; None when never recorded."""
        return await self.db.read(_last_file)

    async def apply_file(self, file: Entities, check: Callable[[Entities], object]) -> FileApply:
        """Make the stored fleet the file's, if the file changed since it was last applied.

        One transaction under the config lock, like an admin change: `check` validates the
        whole result before anything is written, and the version goes up by one. A file
        equal to the one last applied changes nothing (runtime edits stay); so does a file
        the store already equals (only the record of it is written)."""
        return await self.db.transaction(_apply_file, file, check)

    async def version(self) -> int:
        return await self.db.read(_version)

    async def counter(self, name: str) -> int:
        """A change counter kept in the store (e.g. `keys_version`); 0 before the first bump."""
        return await self.db.read(_counter, name)

    async def bump(self, name: str) -> int:
        return await self.db.transaction(_bump, name)

    async def change(
        self,
        edit: Callable[[Entities], Entities],
        check: Callable[[Entities], T],
        events: list[dict[str, Any]] | None = None,
    ) -> tuple[int, T]:
        """Apply `edit` to the stored entities, `check` the result, persist it, bump the version,
        and add the change to the history.

        Either callable may raise; then nothing is written. Edits from all replicas are
        serialised so that each one validates against the latest rows. Both run in the DB
        thread, inside the transaction. `events`: what the edit did beyond its own rows
        (filled by `edit` as it runs; each with `type` and `message`), kept in the history.
        """
        return await self.db.transaction(_change, edit, check, events if events is not None else [])

    async def history(self, limit: int = 50) -> list[dict[str, Any]]:
        """The newest `limit` config changes, newest first."""
        return await self.db.read(_history, limit)

    async def reseal(self) -> int:
        """Write again each stored provider whose literal credentials are not sealed under
        the first secret key (a key set, or a new one put first); how many were."""
        return await self.db.transaction(_reseal)


def _lock_config(conn: Conn) -> None:
    """Serialise config edits across processes before anything is read."""
    if conn.postgres:
        conn.execute("SELECT pg_advisory_xact_lock(:k)", {"k": _CONFIG_LOCK})
        return
    # SQLite: a write first takes the database's write lock (a second editor waits here,
    # up to the busy timeout), and the reads after it see every edit committed before
    # it. Without it, two editors could both read, then the later one write back a stale
    # copy of an entity the earlier one had changed.
    conn.execute('UPDATE store_meta SET value = value WHERE "key" = :key', {"key": _SEEDED})


def _seed(conn: Conn, entities: Entities) -> None:
    insert_meta(conn, _SEEDED, str(time.time()))
    insert_meta(conn, _VERSION, "1")
    _write(conn, {}, entities)
    _record_file(conn, entities)
    seeded = {"type": "seeded", "message": "seeded from the config file"}
    _add_history(conn, 1, {}, entities, [seeded])


def _last_file(conn: Conn) -> Entities | None:
    value = get_meta(conn, _FILE)
    return secret_box().open_all(orjson.loads(value)) if value is not None else None


def _record_file(conn: Conn, entities: Entities) -> None:
    sealed = secret_box().seal_all(entities)
    value = orjson.dumps(sealed, option=orjson.OPT_SORT_KEYS).decode()
    put_meta(conn, _FILE, value)


def _apply_file(conn: Conn, file: Entities, check: Callable[[Entities], object]) -> FileApply:
    _lock_config(conn)
    last = _last_file(conn)
    before = _load(conn)
    if last is not None and same(last, file):
        return FileApply("unchanged", _version(conn), before, last)
    if same(before, file):
        _record_file(conn, file)
        return FileApply("matches", _version(conn), before, last)
    check(copy.deepcopy(file))
    _write(conn, before, file)
    _record_file(conn, file)
    version = _increment(conn, _VERSION)
    applied = {"type": "file_applied", "message": "applied the changed fleet file"}
    _add_history(conn, version, before, file, [applied])
    return FileApply("applied", version, before, last)


def _counter(conn: Conn, name: str) -> int:
    value = get_meta(conn, name)
    return int(value) if value is not None else 0


def _bump(conn: Conn, name: str) -> int:
    _lock_config(conn)
    return _increment(conn, name)


def _increment(conn: Conn, name: str) -> int:
    """Add one to a counter in store_meta (created at 1); the caller holds the config lock."""
    old = get_meta(conn, name)
    value = int(old) + 1 if old is not None else 1
    put_meta(conn, name, str(value))
    return value


def _change(
    conn: Conn,
    edit: Callable[[Entities], Entities],
    check: Callable[[Entities], T],
    events: list[dict[str, Any]],
) -> tuple[int, T]:
    _lock_config(conn)
    before = _load(conn)
    after = edit(copy.deepcopy(before))
    result = check(after)
    _write(conn, before, after)
    version = _increment(conn, _VERSION)
    _add_history(conn, version, before, after, events)
    return version, result


def _add_history(
    conn: Conn,
    version: int,
    before: Entities,
    after: Entities,
    events: list[dict[str, Any]],
) -> None:
    """The change that made `version`: which entities it touched (ids only), and `events`."""
    touched = [{"kind": c.kind, "id": c.id, "action": c.change} for c in changes(before, after)]
    parts = [f"{c['action']} {c['kind']}/{c['id']}" for c in touched[:_LISTED]]
    if len(touched) > _LISTED:
        parts.append(f"and {len(touched) - _LISTED} more")
    parts.extend(e["message"] for e in events)
    conn.execute(
        "INSERT INTO config_history (version, time, summary, changes, events) "
        "VALUES (:version, :time, :summary, :changes, :events)",
        {
            "version": version,
            "time": time.time(),
            "summary": "; ".join(parts) or "no entity changed",
            "changes": json_text(touched),
            "events": json_text(events),
        },
    )


def _history(conn: Conn, limit: int) -> list[dict[str, Any]]:
    return conn.rows(
        "SELECT * FROM config_history ORDER BY version DESC LIMIT :limit", {"limit": limit}
    )


def _version(conn: Conn) -> int:
    return _counter(conn, _VERSION)


def _load(conn: Conn) -> Entities:
    rows = conn.rows("SELECT kind, body FROM config_entities ORDER BY kind, position")
    out: Entities = {name: [] for name in ENTITY_KINDS}
    box = secret_box()
    for row in rows:
        kind = row["kind"]
        out.setdefault(kind, []).append(box.open(kind, row["body"]))
    return out


def _reseal(conn: Conn) -> int:
    box = secret_box()
    if not box.enabled:
        return 0
    _lock_config(conn)
    resealed = 0
    rows = conn.rows("SELECT id, body FROM config_entities WHERE kind = 'providers'")
    for row in rows:
        body = row["body"]
        if box.stale("providers", body):
            sealed = box.seal("providers", box.open("providers", body))
            conn.execute(
                "UPDATE config_entities SET body = :body WHERE kind = 'providers' AND id = :id",
                {"body": json_text(sealed), "id": row["id"]},
            )
            resealed += 1
    value = get_meta(conn, _FILE)
    if value is not None:
        last = orjson.loads(value)
        if any(box.stale("providers", body) for body in last.get("providers", [])):
            _record_file(conn, box.open_all(last))  # sealed afresh under the first key
    return resealed


def _write(conn: Conn, before: Entities, after: Entities) -> None:
    """Write the changed entities of `after` (plain; literal credentials sealed here)."""
    now = time.time()
    box = secret_box()
    for name in set(before) | set(after):
        id_of = ENTITY_KINDS[name].id_of if name in ENTITY_KINDS else lambda b: b["id"]
        old = {id_of(b): (i, b) for i, b in enumerate(before.get(name, []))}
        new_ids = [id_of(b) for b in after.get(name, [])]
        gone = [i for i in old if i not in set(new_ids)]
        if gone:  # one statement, as many as are gone
            ids = {f"id{i}": entity_id for i, entity_id in enumerate(gone)}
            conn.execute(
                f"DELETE FROM config_entities WHERE kind = :kind "
                f"AND id IN ({', '.join(':' + k for k in ids)})",
                {"kind": name, **ids},
            )
        positions = dict(
            conn.tuples(
                "SELECT id, position FROM config_entities WHERE kind = :kind", {"kind": name}
            )
        )
        next_position = max(positions.values(), default=-1) + 1
        for entity_id, body in zip(new_ids, after.get(name, []), strict=True):
            previous = old.get(entity_id)
            if previous is not None and previous[1] == body:
                continue
            body = box.seal(name, body)
            params = {"kind": name, "id": entity_id, "body": json_text(body), "now": now}
            if entity_id in positions:
                conn.execute(
                    "UPDATE config_entities SET body = :body, updated_at = :now "
                    "WHERE kind = :kind AND id = :id",
                    params,
                )
            else:
                conn.execute(
                    "INSERT INTO config_entities (kind, id, position, body, updated_at) "
                    "VALUES (:kind, :id, :position, :body, :now)",
                    {**params, "position": next_position},
                )
                next_position += 1


def find(entities: Entities, kind: str, entity_id: str) -> tuple[int, Body] | None:
    id_of = ENTITY_KINDS[kind].id_of
    for i, body in enumerate(entities.get(kind, [])):
        if id_of(body) == entity_id:
            return i, body
    return None
