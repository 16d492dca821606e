"""Migration 0002 (attempts inline in the request row) keeps every logged request and
attempt, upgrading and downgrading, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

from alembic import command
from sqlalchemy import Connection, text

from fleetgate.store.database import (
    alembic_config,
    alembic_upgrade,
    database_url,
    open_database,
    with_sqlalchemy,
)
from fleetgate.store.request_log import RequestLog

_REQUEST = (
    "INSERT INTO requests (uid, request_id, time, endpoint, requested_model, resolution, "
    "deployment_id, provider_id, stream, status, latency, tokens_estimated, fallback_count, "
    "dropped) VALUES (:uid, :rid, :time, 'chat.completions', 'm', 'explicit', :dep, 'pa', "
    ":stream, :status, 0.5, :est, :fb, :dropped)"
)
_ATTEMPT = (
    "INSERT INTO attempts (request_uid, idx, deployment_id, provider_id, upstream_model, "
    "scope, status, error_class, latency, params) VALUES (:uid, :idx, :dep, 'pa', 'up', "
    "'deployment', :status, :error, 0.25, :params)"
)


def _old_rows(conn: Connection) -> None:
    """Two requests as revision 0001 stored them: one with a fallback, one refused."""
    conn.execute(
        text(_REQUEST),
        [
            {
                "uid": "a1",
                "rid": "fb-1",
                "time": 100.0,
                "dep": "pb",
                "stream": False,
                "status": 200,
                "est": False,
                "fb": 1,
                "dropped": json.dumps([{"deployment": "pc", "filter": "context_fit"}]),
            },
            {
                "uid": "a2",
                "rid": "refused",
                "time": 101.0,
                "dep": None,
                "stream": True,
                "status": 429,
                "est": True,
                "fb": 0,
                "dropped": None,
            },
        ],
    )
    conn.execute(  # inserted out of order on purpose: idx decides
        text(_ATTEMPT),
        [
            {"uid": "a1", "idx": 1, "dep": "pb", "status": 200, "error": None, "params": None},
            {
                "uid": "a1",
                "idx": 0,
                "dep": "pa",
                "status": 503,
                "error": "server_error",
                "params": json.dumps({"temperature": 0.2}),
            },
        ],
    )


def _at_0001_with_old_rows(conn: Connection) -> None:
    alembic_upgrade(conn, "0001")
    _old_rows(conn)


def _split_rows(conn: Connection) -> tuple[list[Any], int]:
    rows = conn.execute(
        text(
            "SELECT r.request_id, a.idx, a.deployment_id, a.status, a.params "
            "FROM attempts a JOIN requests r ON r.uid = a.request_uid ORDER BY a.idx"
        )
    ).all()
    return list(rows), conn.execute(text("SELECT count(*) FROM requests")).scalar_one()


async def test_upgrade_inlines_attempts_and_downgrade_splits_them(db_url: str) -> None:
    db = open_database(database_url(db_url))
    try:
        await with_sqlalchemy(db, _at_0001_with_old_rows)
        await with_sqlalchemy(db, alembic_upgrade)

        log = RequestLog(db)
        fb = await log.get("fb-1")
        assert fb is not None
        assert [(a["idx"], a["deployment_id"], a["status"]) for a in fb["attempts"]] == [
            (0, "pa", 503),
            (1, "pb", 200),
        ]
        assert fb["attempts"][0]["params"] == {"temperature": 0.2}
        assert fb["attempts"][0]["error_class"] == "server_error"
        assert fb["attempts"][1]["params"] is None
        assert fb["dropped"] == [{"deployment": "pc", "filter": "context_fit"}]
        assert fb["stream"] is False and fb["fallback_count"] == 1
        refused = await log.get("refused")
        assert refused is not None and refused["attempts"] == []
        assert refused["stream"] is True and refused["tokens_estimated"] is True
        assert [r["request_id"] for r in (await log.page()).rows] == ["refused", "fb-1"]

        await with_sqlalchemy(db, lambda c: command.downgrade(alembic_config(c), "0001"))
        rows, requests = await with_sqlalchemy(db, _split_rows)
        assert requests == 2
        assert [tuple(r[:4]) for r in rows] == [("fb-1", 0, "pa", 503), ("fb-1", 1, "pb", 200)]
        params = rows[0][4]
        assert (json.loads(params) if isinstance(params, str) else params) == {"temperature": 0.2}
    finally:
        await db.dispose()
