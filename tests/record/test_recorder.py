"""The recorder hands each record to its sinks in the loop turn after the request, not in
the flush: a flush then only hands on what was taken, so no request waits behind a whole
batch's rows; and the log writer's transactions give the core back piece by piece."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from fleetgate.record.metrics import OBSERVED_PER_TURN, Metrics
from fleetgate.record.recorder import Recorder, RequestRecord
from fleetgate.store.database import database_url, migrate, open_database
from fleetgate.store.request_log import RequestLog
from tests.store.test_log_writer import _record


class Seen:
    """A sink that notes what it was handed, and when."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.events: list[str] = []
        self.fail_on = fail_on

    def take(self, record: RequestRecord) -> None:
        if record.request_id == self.fail_on:
            raise RuntimeError("a sink bug")
        self.events.append(f"take {record.request_id}")

    async def flush(self) -> None:
        self.events.append("flush")


async def _turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_records_are_taken_in_the_next_loop_turn_and_flushed_later() -> None:
    seen = Seen()
    recorder = Recorder([seen], interval=3600)  # after its first flush, it sleeps an hour
    recorder.start()
    try:
        recorder.add(_record(1))
        await _turns()
        assert seen.events == ["take req-00001", "flush"]
        recorder.add(_record(2))
        recorder.add(_record(3))
        assert recorder.buffered == 2
        await _turns()
        # taken as soon as the turn that added them ended, long before the next flush
        assert seen.events[2:] == ["take req-00002", "take req-00003"]
        assert recorder.buffered == 2  # taken, not yet flushed
        await recorder.flush()
        assert seen.events[4:] == ["flush"]
        assert recorder.buffered == 0
    finally:
        await recorder.stop()
    assert seen.events[5:] == []  # nothing left for the last flush to hand on


class Waiting(Seen):
    """A sink that always keeps something for later (as telemetry's, between exports)."""

    waiting = True

    def __init__(self) -> None:
        super().__init__()
        self.flushed = asyncio.Event()

    async def flush(self) -> None:
        await super().flush()
        self.flushed.set()


async def test_a_waiting_sink_is_flushed_again_without_requests_and_costs_no_task_a_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("fleetgate.record.recorder.RETRY_SECONDS", 0.05)
    loop = asyncio.get_running_loop()
    tasks = 0
    default = loop.get_task_factory()

    def counting(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kw: Any
    ) -> asyncio.Future[Any]:
        nonlocal tasks
        tasks += 1
        return default(loop, coro, **kw) if default else asyncio.Task(coro, loop=loop, **kw)

    sink = Waiting()
    recorder = Recorder([sink], interval=0.001)
    loop.set_task_factory(counting)
    try:
        recorder.start()
        for i in range(20):  # records in turns of their own: a flush each
            recorder.add(_record(i))
            await asyncio.sleep(0.003)
        loop.set_task_factory(default)
        # the recorder's own task, and no task for a wait with a timeout at every turn
        assert tasks <= 2, tasks
        # no request now: the sink is flushed again within the retry time, again and again
        for _ in range(3):
            sink.flushed.clear()
            await asyncio.wait_for(sink.flushed.wait(), 5)
    finally:
        loop.set_task_factory(default)
        await recorder.stop()
    assert sink.events.count("take req-00019") == 1


async def test_a_sink_that_fails_on_a_record_loses_it_alone_and_it_is_counted() -> None:
    broken, fine = Seen(fail_on="req-00002"), Seen()
    recorder = Recorder([broken, fine])
    for i in (1, 2, 3):
        recorder.add(_record(i))
    await recorder.flush()
    assert broken.events == ["take req-00001", "take req-00003", "flush"]
    assert fine.events == ["take req-00001", "take req-00002", "take req-00003", "flush"]
    assert recorder.dropped == 1
    assert recorder.buffered == 0


async def test_metrics_count_what_was_taken_once_flushed() -> None:
    metrics = Metrics()
    recorder = Recorder([metrics], interval=3600)
    for i in range(5):
        recorder.add(_record(i))
    await _turns()

    def requests() -> float:
        value = metrics.registry.get_sample_value(
            "fleetgate_requests_total",
            {
                "model": "_unknown",
                "endpoint": "chat.completions",
                "status": "200",
                "error_code": "",
                "context_tier": "default",
            },
        )
        return value or 0.0

    assert requests() == 0  # tallied, not yet handed to prometheus_client
    await recorder.flush()
    assert requests() == 5
    await recorder.flush()  # a flush with nothing taken adds nothing
    assert requests() == 5


@pytest.mark.parametrize("rows, pieces", [(100, 4), (25, 1), (7, 1)])
async def test_the_log_writer_gives_the_core_back_between_pieces_of_a_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: int, pieces: int
) -> None:
    yields = []
    real_yield = os.sched_yield

    def counted() -> None:
        yields.append(1)
        real_yield()

    monkeypatch.setattr(os, "sched_yield", counted)
    db = open_database(database_url(f"sqlite:///{tmp_path}/log.db"))
    try:
        await migrate(db)
        log = RequestLog(db, yield_every=25)
        await log.write([_record(i) for i in range(rows)])
        assert log.written == rows
        assert len(yields) == pieces - 1  # between pieces, never after the last
        assert len((await log.page(limit=1000)).rows) == rows
    finally:
        await db.dispose()


def _observed(metrics: Metrics) -> float:
    """How many request latencies the metrics hold (one per record flushed)."""
    value = metrics.registry.get_sample_value(
        "fleetgate_request_seconds_count", {"model": "_unknown"}
    )
    return value or 0.0


def _taken(n: int) -> Metrics:
    metrics = Metrics()
    for i in range(n):
        metrics.take(_record(i))
    return metrics


async def _flush_under_way() -> tuple[Metrics, int, asyncio.Task[None]]:
    """Metrics holding a busy interval's records, their flush started two turns ago."""
    n = 4 * OBSERVED_PER_TURN
    metrics = _taken(n)
    flushing = asyncio.create_task(metrics.flush())
    await _turns(2)
    assert not flushing.done()
    return metrics, n, flushing


async def test_a_busy_flush_of_the_metrics_gives_the_loop_back_between_its_shares() -> None:
    # a busy interval's records (each in five histograms): handed on at once, they held the
    # loop for a fraction of a millisecond, and every request arriving meanwhile waited
    n = 4 * OBSERVED_PER_TURN
    metrics = _taken(n)
    turns = 0
    flushing = asyncio.create_task(metrics.flush())
    while not flushing.done():
        turns += 1
        await asyncio.sleep(0)
    await flushing
    # five histograms of n values each, a share per turn
    assert turns >= 5 * n // OBSERVED_PER_TURN - 1
    assert _observed(metrics) == n


async def test_a_small_flush_of_the_metrics_is_made_in_one_turn() -> None:
    metrics = _taken(10)
    flushing = asyncio.create_task(metrics.flush())
    await asyncio.sleep(0)
    assert flushing.done()
    assert _observed(metrics) == 10


async def test_a_metrics_flush_cancelled_midway_loses_nothing_it_took() -> None:
    metrics, n, flushing = await _flush_under_way()
    assert _observed(metrics) < n
    flushing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flushing
    assert _observed(metrics) == n


async def test_a_scrape_flush_waits_for_the_flush_under_way() -> None:
    metrics, n, background = await _flush_under_way()
    metrics.take(_record(n))
    await metrics.flush()  # as /metrics does before it renders
    assert _observed(metrics) == n + 1
    await background
