"""The request log's writer process: every row reaches the store, whoever writes it, or is
counted; at shutdown, through a store outage, when the child is behind and when it dies; it
holds none of the serving process's descriptors but its pipes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Boolean

from fleetgate.execute.outcome import Attempt
from fleetgate.record.recorder import RequestRecord
from fleetgate.store import log_writer, writer_child, writer_sched
from fleetgate.store.database import database_url, migrate, open_database
from fleetgate.store.db import Database
from fleetgate.store.driver_log import DriverLog
from fleetgate.store.log_statements import BOOLEAN, COLUMNS
from fleetgate.store.log_writer import LogWriterProcess
from fleetgate.store.request_log import RequestLog, row_of
from fleetgate.store.row_pipe import decode_rows, encode_row
from fleetgate.store.sqlite_setup import SQLITE_CACHE_KIB, SQLITE_PARAMSTYLE, WRITER_CACHE_KIB
from fleetgate.store.tables import requests
from tests.harness import Stack, until, wait_until
from tests.test_serve import chat, serving


def _record(i: int) -> RequestRecord:
    record = RequestRecord(
        request_id=f"req-{i:05d}",
        time=1_700_000_000.0 + i / 1000,
        endpoint="chat.completions",
        requested_model="m",
        resolution="explicit",
        stream=i % 2 == 1,
        status=200,
        error_code=None,
        latency=0.25,
        overhead=0.0003,
        deployment_id="pa",
        provider_id="pa",
    )
    record.attempts = [
        Attempt(0, "pa", "pa", "up-a", "deployment", status=200, ttft=0.1, prompt_tokens=7),
    ]
    return record


def _batch(start: int, n: int) -> list[RequestRecord]:
    return [_record(i) for i in range(start, start + n)]


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[tuple[str, Database]]:
    url = database_url(db_url)
    db = open_database(url)
    await migrate(db)
    yield url, db
    await db.dispose()


async def _ids(db: Database) -> list[str]:
    rows = (await RequestLog(db).page(limit=100_000)).rows
    return sorted(r["request_id"] for r in rows)


def _started(url: str, capacity: int = 10_000) -> LogWriterProcess:
    writer = LogWriterProcess(url, capacity)
    writer.start()
    assert writer.pid is not None and writer.pid != os.getpid()
    return writer


def _fds(pid: int) -> dict[int, str]:
    """What each of the process's descriptors is (`socket:[inode]`, `pipe:[inode]`, a path)."""
    found = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):  # closed meanwhile
            found[int(name)] = os.readlink(f"/proc/{pid}/fd/{name}")
    return found


def _children(pid: int) -> list[int]:
    found = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError):
            found += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
    return found


def _listening(port: int) -> str:
    """The descriptor target of the socket listening on 127.0.0.1:`port`."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == f"0100007F:{port:04X}" and fields[3] == "0A":
            return f"socket:[{fields[9]}]"
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


def _execd(pid: int) -> bool:
    """Whether `pid` runs the writer's own code (its exec is done), not its parent's."""
    try:
        return b"child_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_a_child_process_writes_the_rows_and_shutdown_waits_for_all(
    store: tuple[str, Database],
) -> None:
    url, db = store
    writer = _started(url)
    assert writer.pid is not None and not _gone(writer.pid)
    for start in range(0, 2000, 50):  # as the recorder hands them over, without a pause
        await writer.write(_batch(start, 50))
    await writer.stop()  # at once: most rows are still in the pipe or in the child
    assert (writer.written, writer.dropped, writer.failures) == (2000, 0, 0)
    assert await _ids(db) == [f"req-{i:05d}" for i in range(2000)]
    assert _gone(writer.pid)  # exited and reaped

    # the row is the one the serving process would have written itself
    row = await RequestLog(db).get("req-00007")
    assert row is not None
    assert row["stream"] is True and row["status"] == 200 and row["prompt_tokens"] == 7
    assert row["time"] == _record(7).time and row["upstream_model"] == "up-a"
    assert [(a["idx"], a["deployment_id"], a["ttft"]) for a in row["attempts"]] == [(0, "pa", 0.1)]


async def test_a_row_the_database_refuses_is_counted_and_the_others_are_written(
    store: tuple[str, Database],
) -> None:
    url, db = store
    writer = _started(url)
    batch = _batch(0, 10)
    batch[5].requested_model = None  # type: ignore[assignment]  # a NOT NULL column
    await writer.write(batch)
    await writer.stop()
    assert (writer.written, writer.rejected, writer.failures) == (9, 1, 0)
    assert await _ids(db) == [f"req-{i:05d}" for i in range(10) if i != 5]


# the writer's own first lines, as `_spawn_child` runs them, then the modules they loaded
# in place of its body
_BODY = "child_main(int(sys.argv[1]), int(sys.argv[2]))"
assert _BODY in log_writer._CHILD_CODE
_CHILD_IMPORTS = log_writer._CHILD_CODE.replace(_BODY, 'print("\\n".join(sorted(sys.modules)))')
# what the writer must not load: a database driver is all it needs (SQLAlchemy alone holds
# about 20 MB), not the config schema nor the HTTP stack, nor the email package (the parser
# of a Retry-After date: ~1 MB), nor an event loop and its thread pool (asyncio: ~5 MB), nor
# the records it receives only as rows, nor a JSON library for them (orjson: 1.6 MB), nor
# `logging` for its few lines (with `traceback`, about 1 MB), nor `typing`, `json` (its
# settings and counters need none), `threading` or `contextlib` (together about 0.7 MB),
# nor the `sqlite3` package around the driver's own module, with its `datetime` (0.5 MB),
# nor `re` (the package's warning filter is the config's: about 1 MB with what it loads),
# nor `signal`'s enums (0.27 MB)
_NOT_IN_WRITER = (
    "re",
    "enum",
    "signal",
    "sqlite3",
    "datetime",
    "typing",
    "json",
    "threading",
    "contextlib",
    "orjson",
    "logging",
    "traceback",
    "asyncio",
    "concurrent",
    "fleetgate.record",
    "fleetgate.execute",
    "sqlalchemy",
    "pydantic",
    "fleetgate.config",
    "fleetgate.server",
    "fleetgate.fleet",
    "uvicorn",
    "httptools",
    "aiohttp",
    "prometheus_client",
    "email",
)


def test_the_rows_columns_are_the_tables() -> None:
    """The writer names the columns without SQLAlchemy: the same as `tables.requests`."""
    assert tuple(c.name for c in requests.columns if c.name != "seq") == COLUMNS
    booleans = {i for i, n in enumerate(COLUMNS) if isinstance(requests.c[n].type, Boolean)}
    assert booleans == BOOLEAN


def test_rows_cross_the_pipe_whole_and_in_order() -> None:
    """A row comes out as it went in, value for value and type for type (a str subclass as
    its text); a row not wholly arrived waits for its end; one the pipe broke is counted,
    never read as another."""

    class Name(str):
        pass

    rows = [row_of(r) for r in _batch(0, 3)]
    odd = ("req-odd", 1.5, Name("key"), True, None, 7)
    data = b"".join(encode_row(r) for r in [*rows, odd])
    got, used, broken = decode_rows(data, 10)
    assert got[:3] == rows
    assert [type(v) for v in got[0]] == [type(v) for v in rows[0]]
    assert list(got[3]) == ["req-odd", 1.5, "key", True, None, 7]
    assert (used, broken) == (len(data), 0)
    # at most `limit`; a row cut short is left for the next read
    assert decode_rows(data, 2)[:2] == (rows[:2], len(encode_row(rows[0])) * 2)
    first = len(encode_row(rows[0]))
    assert decode_rows(data[: first + 5], 10) == ([rows[0]], first, 0)
    # a row whose bytes the pipe broke (its length intact)
    bad = encode_row(rows[1])
    broken_row = bad[:4] + b"\xff" * (len(bad) - 4)
    assert decode_rows(encode_row(rows[0]) + broken_row + encode_row(rows[2]), 10) == (
        [rows[0], rows[2]],
        first + len(bad) + len(encode_row(rows[2])),
        1,
    )


def test_the_driver_module_binds_as_the_sqlite3_package_says() -> None:
    assert sqlite3.paramstyle == SQLITE_PARAMSTYLE


async def test_the_writer_appends_with_a_smaller_page_cache_than_the_serving_process(
    sqlite_url: str,
) -> None:
    """The writer only appends (its rows' pages, the right edge of each tree): a quarter of
    the serving process's cache does, for the same instructions per row, and its process
    peaks lower. The serving process keeps its cache for the admin API's reads."""
    url = database_url(sqlite_url)
    db = open_database(url)
    try:
        await migrate(db)
        writer = DriverLog(url, 100, log_writer.log)
        writer.queue([row_of(r) for r in _batch(0, 3)])
        writer.flush()
        assert writer.written == 3
        assert writer._conn.execute("PRAGMA cache_size").fetchone() == (-WRITER_CACHE_KIB,)
        writer.close()
        served = await db.read(lambda c: c.value("PRAGMA cache_size"))
        assert served == -SQLITE_CACHE_KIB
    finally:
        await db.dispose()
    assert WRITER_CACHE_KIB < SQLITE_CACHE_KIB


def test_the_writer_process_imports_a_driver_not_the_gateway() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-P", "-S", "-c", _CHILD_IMPORTS, "0", "1", "sqlite"],
        env=env,
        capture_output=True,
        check=True,
        timeout=60,
        text=True,
    )
    loaded = out.stdout.split()
    assert "_sqlite3" in loaded and "fleetgate.store.driver_log" in loaded
    held = [m for m in loaded if any(m == p or m.startswith(f"{p}.") for p in _NOT_IN_WRITER)]
    assert held == []


async def test_a_child_that_writes_sqlite_loads_no_tls(store: tuple[str, Database]) -> None:
    """OpenSSL holds about 4 MB resident once loaded; asyncio loads it only to offer TLS,
    which a writer of a SQLite file never uses (a PostgreSQL driver may)."""
    url, _ = store
    writer = _started(url)
    assert writer.pid is not None
    try:
        await writer.write(_batch(0, 3))
        await until(lambda: writer.written == 3, 10, "the child is up and wrote the rows")
        maps = await asyncio.to_thread(Path(f"/proc/{writer.pid}/maps").read_text)
        tls = "_ssl.cpython" in maps or "libssl" in maps
        assert tls is not url.startswith("sqlite")
        assert "_sqlite3" in maps or url.startswith("postgresql")
    finally:
        await writer.stop()


async def test_the_child_holds_no_descriptor_of_the_serving_process_but_its_pipes(
    store: tuple[str, Database],
) -> None:
    url, _ = store
    # a listening socket of the serving process, inheritable even: it stays the server's
    listener = socket.create_server(("127.0.0.1", 0))
    os.set_inheritable(listener.fileno(), True)
    port = listener.getsockname()[1]
    writer = _started(url)
    assert writer.pid is not None
    try:
        await writer.write(_batch(0, 3))
        await until(lambda: writer.written == 3, 10, "the child is up and wrote the rows")
        ours = {t for t in _fds(os.getpid()).values() if t.startswith(("socket:", "pipe:"))}
        theirs = {fd: t for fd, t in _fds(writer.pid).items() if fd > 2}  # but 0, 1, 2
        assert f"socket:[{os.fstat(listener.fileno()).st_ino}]" not in theirs.values()
        shared = sorted(t for t in theirs.values() if t in ours)
        assert len(shared) == 2 and all(t.startswith("pipe:") for t in shared), theirs
        listener.close()
        # the server's port is free the moment the server lets it go, writer or not
        socket.create_server(("127.0.0.1", port)).close()
    finally:
        listener.close()
        await writer.stop()
    assert writer.written == 3


async def test_rows_written_before_the_child_starts_wait_for_it(
    store: tuple[str, Database],
) -> None:
    """The server opens the pipes at start and spawns the child once it is ready."""
    url, db = store
    writer = LogWriterProcess(url)
    writer.open()
    assert writer.pid is None
    await writer.write(_batch(0, 20))
    writer.spawn()
    await until(lambda: writer.written == 20, 10, "the child wrote what waited")
    await writer.stop()
    assert await _ids(db) == [f"req-{i:05d}" for i in range(20)]


async def test_a_writer_stopped_before_it_spawned_leaves_nothing_open(
    store: tuple[str, Database],
) -> None:
    url, _ = store
    before = set(_fds(os.getpid()))
    writer = LogWriterProcess(url)
    writer.open()
    await writer.stop()
    await writer.stop()
    assert writer.pid is None
    assert set(_fds(os.getpid())) <= before


async def test_rows_wait_in_the_child_through_a_store_outage(
    store: tuple[str, Database], capfd: pytest.CaptureFixture[str]
) -> None:
    """...and the child tells the outage's start and end on the stderr it shares with the
    serving process, once each."""
    url, db = store
    writer = _started(url)
    try:
        await db.transaction(lambda c: c.execute("ALTER TABLE requests RENAME TO requests_away"))
        await writer.write(_batch(0, 30))
        await until(lambda: writer.failures >= 1, 10, "the child failed to write")
        await writer.write(_batch(30, 20))
        assert writer.written == 0
        await db.transaction(lambda c: c.execute("ALTER TABLE requests_away RENAME TO requests"))
        await until(lambda: writer.written == 50, 10, "the child wrote them after the outage")
    finally:
        await writer.stop()
    assert writer.dropped == 0
    assert await _ids(db) == [f"req-{i:05d}" for i in range(50)]
    lines = capfd.readouterr().err.splitlines()
    error = "UndefinedTable" if url.startswith("postgresql") else "OperationalError"
    assert [line for line in lines if "the store is unreachable" in line] == [
        f"the store is unreachable ({error}); request-log rows and spend wait in memory"
    ]
    assert len([line for line in lines if line.startswith("The store is reachable again")]) == 1


async def test_shutdown_during_an_outage_counts_what_it_could_not_write(
    store: tuple[str, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleetgate.store import log_writer

    monkeypatch.setattr(log_writer, "STOP_TIMEOUT", 3.0)
    url, db = store
    writer = _started(url)
    await db.transaction(lambda c: c.execute("ALTER TABLE requests RENAME TO requests_away"))
    await writer.write(_batch(0, 12))
    started = time.monotonic()
    await writer.stop()
    assert time.monotonic() - started < 6
    assert (writer.written, writer.dropped) == (0, 12)  # nothing lost without a count


async def test_rows_wait_in_the_serving_process_while_the_child_is_behind(
    store: tuple[str, Database],
) -> None:
    url, db = store
    writer = _started(url, capacity=500)
    assert writer.pid is not None
    os.kill(writer.pid, signal.SIGSTOP)  # a child that gets no CPU for a while
    try:
        for start in range(0, 4000, 50):  # ≈ 2.8 MB of rows: more than the pipe holds
            await writer.write(_batch(start, 50))
        assert writer.written == 0
    finally:
        os.kill(writer.pid, signal.SIGCONT)
    await writer.stop()
    # what the serving process could not hold was dropped oldest first, and counted
    assert writer.dropped > 0
    assert writer.written + writer.dropped == 4000
    assert len(await _ids(db)) == writer.written


async def test_a_frame_larger_than_the_pipe_reaches_the_store(
    store: tuple[str, Database],
) -> None:
    """One flush's rows go as one frame; the child reads it whole, however large (a loop
    that stalled, rows with many attempts). It stopped reading once its buffer held as much
    as the pipe, before the frame's end had come: it waited for ever and rows were lost."""
    url, db = store
    writer = _started(url)
    records = _batch(0, 2000)
    frame = sum(len(encode_row(row_of(r))) for r in records)
    assert frame > writer_child.PIPE_BYTES
    await writer.write(records)
    await until(lambda: writer.written == 2000, 20, "the child wrote the whole frame")
    await writer.stop()
    assert (writer.written, writer.dropped) == (2000, 0)
    assert len(await _ids(db)) == 2000


async def test_a_dead_child_is_replaced_by_writing_in_process(
    store: tuple[str, Database],
) -> None:
    url, db = store
    writer = _started(url)
    assert writer.pid is not None
    await writer.write(_batch(0, 10))
    await until(lambda: writer.written == 10, 10, "the child wrote the first rows")
    os.kill(writer.pid, signal.SIGSTOP)
    await writer.write(_batch(10, 7))  # into the pipe: the child will never read them
    os.kill(writer.pid, signal.SIGKILL)
    await until(lambda: writer.dropped == 7, 10, "the rows the child took are counted")
    await writer.write(_batch(17, 5))
    await until(lambda: writer.written == 15, 10, "later rows written in-process")
    await writer.stop()
    await writer.close()
    ids = await _ids(db)
    assert ids == [f"req-{i:05d}" for i in (*range(10), *range(17, 22))]


def test_fleetgate_serve_logs_through_its_writer_and_sigterm_loses_nothing(
    stack: Stack, tmp_path: Path
) -> None:
    with serving(stack, tmp_path) as (url, proc):
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert len(children) == 1  # the writer
        for _ in range(300):
            assert chat(url).status_code == 200
        # leaving sends SIGTERM at once: the last rows are still on their way
    assert _gone(int(children[0]))

    async def count() -> int:
        db = open_database(database_url(None, str(tmp_path / "data")))
        try:
            return len(await _ids(db))
        finally:
            await db.dispose()

    assert asyncio.run(count()) == 300


def test_serve_workers_writers_do_not_hold_the_listening_socket(
    stack: Stack, tmp_path: Path
) -> None:
    """`serve --workers 2`: each worker has the listening socket before it starts its
    writer (the supervisor bound it); the writers must not keep it."""
    with serving(stack, tmp_path, "--workers", "2") as (url, proc):
        listening = _listening(int(url.rsplit(":", 1)[1]))

        def workers() -> list[int]:
            return [c for c in _children(proc.pid) if listening in _fds(c).values()]

        writers: list[int] = []

        def each_with_its_writer() -> bool:
            found = workers()
            writers[:] = [w for worker in found for w in _children(worker)]
            return len(found) == 2 and len(writers) == 2 and all(map(_execd, writers))

        # a writer caught between its fork and its exec is still a copy of its worker,
        # holding all of its descriptors until the exec closes them: wait for the exec
        wait_until(each_with_its_writer, 30, "two workers, each with its writer")
        for writer in writers:
            assert listening not in _fds(writer).values()
        assert chat(url).status_code == 200


async def test_a_child_that_is_behind_writes_without_yielding_the_core(
    store: tuple[str, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each yield hands a busy server a whole time slice: a writer that yielded every 25
    rows while rows backed up could not keep up with a server that saturated its core."""
    url, db = store
    yields: list[int] = []
    monkeypatch.setattr(os, "sched_yield", lambda: yields.append(1))
    monkeypatch.setattr(writer_child, "WRITE_INTERVAL", 0.0)
    rows_r, rows_w = os.pipe()
    status_r, status_w = os.pipe()
    frames = [b"".join(encode_row(row_of(r)) for r in _batch(i, 100)) for i in range(0, 1000, 100)]
    buf = bytearray(b"".join(frames))  # ten frames already waiting: the child is behind
    os.close(rows_w)  # and nothing more comes
    try:
        # 200 rows a flush: the first flush yields (7 times), the next ones are behind
        writer_child.child_write(url, 200, rows_r, status_w, buf)
    finally:
        for fd in (rows_r, status_r, status_w):
            os.close(fd)
    assert len(await _ids(db)) == 1000
    assert len(yields) == 200 // writer_child.YIELD_EVERY - 1


def _classes(pid: int) -> set[int]:
    """The scheduling classes of every thread of `pid`."""
    found = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):
            found.add(os.sched_getscheduler(int(tid)))
    return found


async def _idle_writer(url: str, rows: int, capacity: int = 10_000) -> tuple[LogWriterProcess, int]:
    """A started writer that wrote `rows` rows and went idle, and its child's pid."""
    writer = _started(url, capacity)
    assert writer.pid is not None
    pid = writer.pid
    await writer.write(_batch(0, rows))
    await until(lambda: writer.written == rows, 10, "the first rows written")
    await until(lambda: _classes(pid) == {os.SCHED_IDLE}, 10, "every thread of the child idle")
    return writer, pid


@contextlib.contextmanager
def _starved(pid: int) -> Iterator[None]:
    """The child gets no CPU meanwhile, as beside cores that stay busy."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def test_a_writer_that_keeps_up_runs_idle_and_is_raised_once_rows_pile_up(
    store: tuple[str, Database],
) -> None:
    """A SCHED_BATCH writer on the server's core still held it for milliseconds at a time
    (the c1 tail); an idle one yields it the moment the server wakes, but starves beside a
    saturated server, so rows piling up behind its full pipe (`RAISE_AT` of the capacity)
    raise it until it has caught up."""
    assert writer_sched.may_leave_idle(log_writer.NICE), (
        "the tests run where a thread may leave SCHED_IDLE"
    )
    url, db = store
    writer, pid = await _idle_writer(url, 50, capacity=4_000)
    assert writer.raised == 0
    with _starved(pid):  # the pipe fills, then rows wait here
        for start in range(50, 3050, 50):  # ≈ 2.1 MB of rows: more than the pipe holds
            await writer.write(_batch(start, 50))
        assert writer.raised == 1  # once: later full pipes find it raised already
        assert _classes(pid) == {os.SCHED_BATCH}
    await until(lambda: writer.written == 3050, 30, "the child caught up")
    await until(lambda: _classes(pid) == {os.SCHED_IDLE}, 10, "idle again once caught up")
    await writer.stop()
    assert (writer.written, writer.dropped) == (3050, 0)
    assert len(await _ids(db)) == 3050


async def test_a_full_pipe_alone_leaves_the_writer_idle(
    store: tuple[str, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle writer that keeps up beside a busy server empties its pipe in bursts: at
    3,300 requests/s on one core the pipe was full twice a second, and each raise put the
    writer beside the server for tens of milliseconds (c1 p99 0.7 → 2.2 ms). A full pipe
    with few rows behind it raises nothing; the rows are written all the same."""
    monkeypatch.setattr(log_writer, "ROW_WAIT_SECONDS", 60.0)  # the other rule, aside
    url, db = store
    writer, pid = await _idle_writer(url, 50, capacity=100_000)
    with _starved(pid):  # the pipe fills; a few thousand rows wait, far under a quarter
        for start in range(50, 4050, 50):  # ≈ 2.8 MB of rows: more than the pipe holds
            await writer.write(_batch(start, 50))
        assert writer._queued > 0  # rows wait behind a full pipe
        assert writer.raised == 0
        assert _classes(pid) == {os.SCHED_IDLE}
    await until(lambda: writer.written == 4050, 30, "the idle child wrote them all")
    await writer.stop()
    assert (writer.written, writer.dropped) == (4050, 0)
    assert len(await _ids(db)) == 4050


async def test_rows_that_wait_in_the_pipe_raise_an_idle_writer_before_it_fills(
    store: tuple[str, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle writer beside cores that stay busy got no CPU until its pipe was full: a
    trickle of rows (twenty requests) could wait minutes to be written. Rows it has not
    dealt with after `ROW_WAIT_SECONDS` raise it too."""
    monkeypatch.setattr(log_writer, "ROW_WAIT_SECONDS", 0.3)
    url, db = store
    writer, pid = await _idle_writer(url, 5)
    raised = writer.raised
    with _starved(pid):  # with a pipe far from full
        await writer.write(_batch(5, 20))
        await until(lambda: writer.raised > raised, 10, "the waiting rows raised the child")
        assert _classes(pid) == {os.SCHED_BATCH}
    await until(lambda: writer.written == 25, 10, "the rows written")
    await until(lambda: _classes(pid) == {os.SCHED_IDLE}, 10, "idle again once caught up")
    await writer.stop()
    assert len(await _ids(db)) == 25


async def test_where_a_thread_may_not_leave_idle_the_writer_never_enters_it(
    store: tuple[str, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without CAP_SYS_NICE (or an RLIMIT_NICE that admits nice 5) nothing could raise an
    idle writer again: it runs SCHED_BATCH throughout, as it always did."""
    monkeypatch.setattr(log_writer, "may_leave_idle", lambda nice: False)
    url, _db = store
    writer = _started(url)
    assert writer.pid is not None
    await writer.write(_batch(0, 50))
    await until(lambda: writer.written == 50, 10, "the rows written")
    assert _classes(writer.pid) == {os.SCHED_BATCH}
    os.kill(writer.pid, signal.SIGSTOP)
    try:
        for start in range(50, 4050, 50):
            await writer.write(_batch(start, 50))
    finally:
        os.kill(writer.pid, signal.SIGCONT)
    assert writer.raised == 0
    await writer.stop()
    assert writer.written + writer.dropped == 4050


def _switches(pid: int) -> int:
    """The times `pid`'s threads have given up the CPU to wait (each wake-up is one)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    return total


async def test_a_quiet_writer_wakes_for_its_writes_not_for_each_frame(
    store: tuple[str, Database],
) -> None:
    """At a low rate the child leaves the rows in the pipe between writes: a child woken for
    each of the recorder's flushes spent more CPU on waking than on its rows. A stop ends
    its rest at once."""
    url, db = store
    writer = _started(url)
    assert writer.pid is not None
    await writer.write(_batch(0, 2))
    await until(lambda: writer.written == 2, 10, "the first rows written")
    before = _switches(writer.pid)
    for start in range(2, 102, 2):  # a second of 50 small frames (100 requests/s)
        await writer.write(_batch(start, 2))
        await asyncio.sleep(0.02)
    woken = _switches(writer.pid) - before
    # resting 0.5 s: two or three writes, a few wake-ups each; woken for each frame: over 50
    assert woken < 30, woken
    await writer.write(_batch(102, 2))
    began = time.monotonic()
    await writer.stop()  # nudged out of its rest: it does not sleep the rest out
    assert time.monotonic() - began < writer_child.QUIET_INTERVAL
    assert (writer.written, writer.dropped) == (104, 0)
    assert await _ids(db) == [f"req-{i:05d}" for i in range(104)]
