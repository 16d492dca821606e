"""Request stats' TTFT percentiles: nearest rank over millisecond groups, never 0 for an
answer faster than a millisecond (the dashboard draws only figures above 0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.store.database import database_url, migrate, open_database
from fleetgate.store.request_log import RequestLog
from fleetgate.store.request_stats import Window, request_stats
from tests.store.test_log_writer import _record


@pytest.mark.parametrize(
    "ttfts, p50, p99",
    [
        ([0.0003, 0.0004, 0.0025], 0.0004, 0.0025),  # sub-millisecond answers
        ([0.0102, 0.0107, 0.0109, 0.2], 0.0109, 0.2),  # within 1 ms above the true p50
    ],
)
async def test_ttft_percentiles_are_the_answers_own_figures(
    tmp_path: Path, ttfts: list[float], p50: float, p99: float
) -> None:
    db = open_database(database_url(f"sqlite:///{tmp_path}/stats.db"))
    try:
        await migrate(db)
        records = [_record(i) for i in range(len(ttfts))]
        for record, ttft in zip(records, ttfts, strict=True):
            record.attempts[0].ttft = ttft
        await RequestLog(db).write(records)
        window = Window.ending(records[-1].time + 1, 600, 1)
        stats = await request_stats(db, window)
        assert stats["ttft_p50"] == [pytest.approx(p50)]
        assert stats["ttft_p99"] == [pytest.approx(p99)]
    finally:
        await db.dispose()
