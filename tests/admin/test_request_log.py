"""The request log: rows per request and attempt, the read API, shutdown flush, drops, purge."""

from __future__ import annotations

import asyncio
import time

import openai
import pytest

from fleetgate.record.recorder import RequestRecord
from fleetgate.store.database import database_url, migrate, open_database
from fleetgate.store.request_log import RequestLog
from fleetgate.testing import Fault
from tests.admin.helpers import admin, options, two_tier_fleet
from tests.harness import Stack, wait_until

MSG = [{"role": "user", "content": "three short words"}]


def _written(stack: Stack) -> int:
    control = stack.gateway.control  # type: ignore[union-attr]
    return control.log_writer.written  # type: ignore[union-attr]


def test_rows_for_success_fallback_exhausted_and_stream(
    stack: Stack, db_url: str, client_for
) -> None:
    stack.start_gateway(two_tier_fleet(stack), options(db_url))
    client = client_for(stack)
    api = admin(stack)

    client.chat.completions.create(model="m", messages=MSG, extra_headers={"x-request-id": "ok-1"})
    stack.engines["a"].fail_next(Fault("status", status=503))
    client.chat.completions.create(model="m", messages=MSG, extra_headers={"x-request-id": "fb-1"})
    stack.engines["a"].set_fault(Fault("status", status=503))
    stack.engines["b"].set_fault(Fault("status", status=502))
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(
            model="m", messages=MSG, extra_headers={"x-request-id": "ex-1"}
        )
    stack.engines["a"].set_fault(None)
    stack.engines["b"].set_fault(None)
    chunks = list(
        client.chat.completions.create(
            model="m", messages=MSG, stream=True, extra_headers={"x-request-id": "st-1"}
        )
    )
    assert chunks
    wait_until(lambda: _written(stack) >= 4, 10, "four rows written")

    ok = api.get("/admin/requests/ok-1").json()
    assert ok["status"] == 200
    assert ok["deployment_id"] == "pa" and ok["upstream_model"] == "up-a"
    assert ok["prompt_tokens"] == 4 and ok["tokens_estimated"] is False
    assert ok["completion_tokens"] > 0
    assert ok["fallback_count"] == 0 and ok["latency"] > 0 and ok["ttft"] is not None
    assert [a["idx"] for a in ok["attempts"]] == [0]

    fb = api.get("/admin/requests/fb-1").json()
    assert fb["status"] == 200 and fb["deployment_id"] == "pb" and fb["fallback_count"] == 1
    assert [(a["deployment_id"], a["status"], a["error_class"]) for a in fb["attempts"]] == [
        ("pa", 503, "server_error"),
        ("pb", 200, None),
    ]

    ex = api.get("/admin/requests/ex-1").json()
    assert ex["status"] == 502 and ex["error_code"] == "upstream_error"
    assert ex["deployment_id"] is None and ex["error_class"] == "server_error"
    assert [a["status"] for a in ex["attempts"]] == [503, 502]

    st = api.get("/admin/requests/st-1").json()
    assert st["stream"] is True and st["status"] == 200 and st["ttft"] is not None

    # nothing the client said is stored anywhere in the rows
    for row in (ok, fb, ex, st):
        assert "three short words" not in str(row)

    # filters and cursor pagination, newest first
    page = api.get("/admin/requests", params={"limit": 3}).json()
    assert [r["request_id"] for r in page["data"]] == ["st-1", "ex-1", "fb-1"]
    rest = api.get("/admin/requests", params={"limit": 3, "cursor": page["next_cursor"]}).json()
    assert [r["request_id"] for r in rest["data"]] == ["ok-1"] and rest["next_cursor"] is None
    errors = api.get("/admin/requests", params={"status": "error"}).json()["data"]
    assert [r["request_id"] for r in errors] == ["ex-1"]
    assert (
        api.get("/admin/requests", params={"status": "502"}).json()["data"][0]["request_id"]
        == "ex-1"
    )
    assert api.get("/admin/requests", params={"model": "other"}).json()["data"] == []
    later = api.get("/admin/requests", params={"since": time.time() + 60}).json()
    assert later["data"] == []
    assert api.get("/admin/requests", params={"cursor": "bogus"}).status_code == 400
    assert api.get("/admin/requests/nope").status_code == 404


def test_buffer_full_is_counted_and_shutdown_flushes(stack: Stack, db_url: str, client_for) -> None:
    gw = stack.start_gateway(two_tier_fleet(stack), options(db_url))
    client = client_for(stack)
    # after its next flush the recorder sleeps for an hour: only shutdown can flush again
    gw.pipeline.recorder.interval = 3600
    stack.gateway.control.log_writer.capacity = 3  # type: ignore[union-attr]
    client.chat.completions.create(model="m", messages=MSG)
    wait_until(lambda: _written(stack) == 1, 10, "first row written")
    for _ in range(5):
        client.chat.completions.create(model="m", messages=MSG)
    status = admin(stack).get("/admin/status").json()
    assert status["records_unwritten"] == 2  # the log holds 3 rows: the 2 oldest went
    assert status["records_buffered"] == 5  # taken by the sinks, not yet flushed
    assert status["records_dropped"] == 0  # every sink took every record
    assert _written(stack) == 1
    stack.stop_gateway()

    async def count() -> int:
        db = open_database(database_url(db_url))
        try:
            return len((await RequestLog(db).page(limit=100)).rows)
        finally:
            await db.dispose()

    assert asyncio.run(count()) == 4  # 1 flushed early + the 3 the buffer kept


def _record(i: int, when: float) -> RequestRecord:
    return RequestRecord(
        request_id=f"r{i}",
        time=when,
        endpoint="chat.completions",
        requested_model="m",
        resolution="explicit",
        stream=False,
        status=200,
        error_code=None,
        latency=0.1,
        overhead=0.001,
        deployment_id=None,
        provider_id=None,
    )


async def test_retention_purge_in_chunks(db_url: str) -> None:
    from fleetgate.store.database import migrate

    db = open_database(database_url(db_url))
    try:
        await migrate(db)
        log = RequestLog(db)
        now = time.time()
        old = [_record(i, now - 40 * 86400 - i) for i in range(7)]
        await log.write([*old, _record(100, now - 3600), _record(101, now)])
        assert await log.purge(now - 30 * 86400, chunk=3) == 7
        left = [r["request_id"] for r in (await log.page(limit=50)).rows]
        assert left == ["r101", "r100"]
        assert await log.purge(now - 30 * 86400, chunk=3) == 0
    finally:
        await db.dispose()


async def test_rows_wait_while_the_database_fails(sqlite_url: str) -> None:
    from fleetgate.store.database import migrate

    db = open_database(database_url(sqlite_url))
    try:
        await migrate(db)
        log = RequestLog(db, capacity=3)
        await db.transaction(  # the table "goes away" for a while
            lambda c: c.execute("ALTER TABLE requests RENAME TO requests_away")
        )
        now = time.time()
        await log.write([_record(1, now), _record(2, now + 1)])
        await log.write([_record(3, now + 2), _record(4, now + 3)])
        assert log.failures == 2 and log.dropped == 1 and log.written == 0
        await db.transaction(lambda c: c.execute("ALTER TABLE requests_away RENAME TO requests"))
        await log.write([])
        assert log.written == 3
        assert [r["request_id"] for r in (await log.page(limit=10)).rows] == ["r4", "r3", "r2"]
    finally:
        await db.dispose()


async def test_json_columns_round_trip(db_url: str) -> None:
    from fleetgate.execute.outcome import Attempt
    from fleetgate.store.database import migrate

    db = open_database(database_url(db_url))
    try:
        await migrate(db)
        log = RequestLog(db)
        record = _record(1, time.time())
        record.dropped = [{"deployment": "x", "filter": "context_fit", "reason": "too small"}]
        record.attempts = [
            Attempt(0, "d", "p", "up", "virtual", status=200, params={"temperature": 0.2})
        ]
        await log.write([record])
        row = await log.get("r1")
        assert row is not None
        assert row["dropped"] == record.dropped
        assert row["attempts"][0]["params"] == {"temperature": 0.2}
        assert row["stream"] is False and row["tokens_estimated"] is False
    finally:
        await db.dispose()


async def test_a_batch_binds_only_the_columns_its_rows_fill(db_url: str) -> None:
    """Each batch's INSERT names only the columns some row of it fills (on SQLite): a
    column NULL in every row of one batch, filled in one row of the next, Booleans true
    and false and a nullable one unset, all read back as they were taken."""
    from fleetgate.execute.outcome import Attempt
    from fleetgate.store.database import migrate

    db = open_database(database_url(db_url))
    try:
        await migrate(db)
        log = RequestLog(db)
        now = time.time()
        plain = [_record(i, now + i) for i in range(3)]  # no client key, no context notes
        filled = [_record(i, now + i) for i in range(3, 6)]
        filled[1].client_key_id = "key-1"
        filled[1].stream = True
        filled[1].notes = {"context_estimate": 321, "context_exact": True, "context_tier": "long"}
        filled[2].attempts = [Attempt(0, "d", "p", "up", "deployment", status=200, ttft=0.01)]
        filled[2].deployment_id = "d"
        await log.write(plain)
        await log.write(filled)
        assert log.written == 6
        rows = {r["request_id"]: r for r in (await log.page(limit=10)).rows}
        for record in plain + filled:
            row = rows[record.request_id]
            assert row["client_key_id"] == record.client_key_id
            assert row["stream"] is record.stream
            assert row["tokens_estimated"] is ("context_estimate" in record.notes)
            assert row["context_estimate"] == record.notes.get("context_estimate")
            assert row["context_exact"] == record.notes.get("context_exact")
            assert row["context_tier"] == record.notes.get("context_tier")
            assert row["ttft"] == (0.01 if record.attempts else None)
            assert row["time"] == record.time and row["latency"] == record.latency
    finally:
        await db.dispose()


async def test_flushes_that_overlap_write_each_row_once(db_url: str) -> None:
    """A flush may begin while another waits on the database (the log writer's last rows
    at shutdown, taken over by the serving process, met a flush already under way): each
    row is written once, and neither flush fails."""
    from fleetgate.store.database import migrate

    db = open_database(database_url(db_url))
    try:
        await migrate(db)
        log = RequestLog(db)
        now = time.time()
        for i in range(40):
            log.take(_record(i, now + i))
        first = asyncio.ensure_future(log.flush())
        await asyncio.sleep(0)  # the first is on its way to the database
        for i in range(40, 50):
            log.take(_record(i, now + i))
        await asyncio.gather(first, log.flush())
        assert (log.written, log.pending) == (50, 0)
        rows = (await log.page(limit=100)).rows
        assert sorted(r["request_id"] for r in rows) == sorted(f"r{i}" for i in range(50))
    finally:
        await db.dispose()


async def test_a_row_the_database_refuses_in_process_is_counted_and_the_others_written(
    db_url: str,
) -> None:
    """Written by the serving process (`log_writer: thread`, or a writer that died): a row
    that breaks a constraint is the row's fault, not the database's: it is dropped and
    counted, and the rest of its batch is written."""
    db = open_database(database_url(db_url))
    try:
        await migrate(db)
        log = RequestLog(db)
        now = time.time()
        rows = [_record(i, now + i) for i in range(6)]
        rows[2].requested_model = None  # type: ignore[assignment]  # a NOT NULL column
        await log.write(rows)
        assert (log.written, log.rejected, log.failures) == (5, 1, 0)
        left = sorted(r["request_id"] for r in (await log.page(limit=50)).rows)
        assert left == [f"r{i}" for i in range(6) if i != 2]
    finally:
        await db.dispose()
