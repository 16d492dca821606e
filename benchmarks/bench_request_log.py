"""CPU cost of the request log writer on SQLite, in µs per request (all threads).

Writes records shaped like the gateway benchmark's (one successful attempt) in batches of
`--batch`, as the recorder hands them over, into a new SQLite store in a temporary
directory, and divides the process CPU time by the requests written.

Run: python3 benchmarks/bench_request_log.py [--requests N] [--batch B]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from fleetgate.execute.outcome import Attempt
from fleetgate.record.recorder import RequestRecord
from fleetgate.store.database import database_url, migrate, open_database
from fleetgate.store.request_log import RequestLog


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _record(i: int) -> RequestRecord:
    deployment = "bench-upstream/upstream-bench"
    record = RequestRecord(
        request_id=f"{time.time_ns() // 1000:013x}{i:011x}",
        time=time.time(),
        endpoint="chat.completions",
        requested_model="bench-model",
        resolution="explicit",
        stream=False,
        status=200,
        error_code=None,
        latency=0.0003,
        overhead=0.0001,
        deployment_id=deployment,
        provider_id="bench-upstream",
    )
    record.attempts = [
        Attempt(
            0,
            deployment,
            "bench-upstream",
            "upstream-bench",
            "deployment",
            status=200,
            latency=0.0002,
            ttft=0.0002,
            prompt_tokens=20,
            completion_tokens=9,
        )
    ]
    record.notes = {"resolution": {"kind": "explicit"}}
    return record


async def _run(requests: int, batch: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        db = open_database(database_url(f"sqlite:///{directory}/fleetgate.db"))
        try:
            await migrate(db)
            log = RequestLog(db)
            batches = [
                [_record(b * batch + i) for i in range(batch)] for b in range(requests // batch)
            ]
            await log.write(batches[0])  # warm-up: connection, statement cache
            started, wall = _cpu(), time.perf_counter()
            for records in batches[1:]:
                await log.write(records)
            count = log.written - batch
            cpu_us = (_cpu() - started) / count * 1e6
            wall_us = (time.perf_counter() - wall) / count * 1e6
            print(f"{count} requests: {cpu_us:.1f} µs CPU/request, {wall_us:.1f} µs wall/request")
        finally:
            await db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=60_000)
    parser.add_argument("--batch", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(_run(args.requests, args.batch))


if __name__ == "__main__":
    main()
