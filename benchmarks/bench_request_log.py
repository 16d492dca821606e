"""CPU cost of the request log writer, in µs per request (all threads and processes).

Writes records shaped like the gateway benchmark's (one successful attempt) in batches of
`--batch`, as the recorder hands them over, into a new SQLite store in a temporary
directory (or the PostgreSQL database of `--url`), and divides the CPU time of this
process and of the writer process (`--writer process`, reaped at the end) by the
requests written (and, with `--writer process`, shows the writer process's peak RSS).
`--rate R` paces the batches as R requests/s would (the recorder hands
one over every 50 ms), so per-batch costs weigh as they do in a gateway; without it the
batches go back to back. The serving side's own share (rows, pipe) is shown apart.

Run: python3 benchmarks/bench_request_log.py [--requests N] [--batch B] [--rate R]
     [--writer thread|process] [--url postgresql://…]
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
from fleetgate.store.log_writer import LogWriterProcess
from fleetgate.store.request_log import RequestLog


def _cpu(who: int = resource.RUSAGE_SELF) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _peak_rss(pid: int) -> float | None:
    """A live process's peak resident set (VmHWM), in MB."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _thread_cpu() -> float:
    return time.thread_time()


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


async def _run(requests: int, batch: int, rate: float, writer: str, url: str | None) -> None:
    with tempfile.TemporaryDirectory() as directory:
        url = database_url(url or f"sqlite:///{directory}/fleetgate.db")
        db = open_database(url)
        try:
            await migrate(db)
            sink: RequestLog | LogWriterProcess
            if writer == "process":
                sink = LogWriterProcess(url)
                sink.start()
            else:
                sink = RequestLog(db)
            batches = [
                [_record(b * batch + i) for i in range(batch)] for b in range(requests // batch)
            ]
            await sink.write(batches[0])  # warm-up: connection, statement cache
            await asyncio.sleep(0.5)
            gap = batch / rate if rate else 0.0
            started, wall = _cpu(), time.perf_counter()
            serving = 0.0  # CPU of the calls the recorder makes on the serving thread
            for records in batches[1:]:
                t = _thread_cpu()
                await sink.write(records)
                serving += _thread_cpu() - t
                if gap:
                    await asyncio.sleep(gap)
            children = _cpu(resource.RUSAGE_CHILDREN)
            # the child's own peak, read while it lives (`ru_maxrss` of a reaped child counts
            # the pages of this process it was forked from, before its exec)
            peak = _peak_rss(sink.pid) if isinstance(sink, LogWriterProcess) else None
            if isinstance(sink, LogWriterProcess):
                await sink.stop()
            count = sink.written - batch
            cpu = _cpu() - started + _cpu(resource.RUSAGE_CHILDREN) - children
            cpu_us = cpu / count * 1e6
            wall_us = (time.perf_counter() - wall) / count * 1e6
            print(
                f"{writer}, {count} requests in batches of {batch}"
                + (f" at {rate:g}/s" if rate else "")
                + f": {cpu_us:.1f} µs CPU/request (serving thread {serving / count * 1e6:.1f}),"
                f" {wall_us:.1f} µs wall/request"
                + (f"; the writer process's peak RSS {peak:.2f} MB" if peak else "")
            )
        finally:
            await db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=60_000)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--rate", type=float, default=0.0, help="requests/s (0: no pauses)")
    parser.add_argument("--writer", choices=("thread", "process"), default="thread")
    parser.add_argument("--url", help="a database URL instead of a new SQLite file")
    args = parser.parse_args()
    asyncio.run(_run(args.requests, args.batch, args.rate, args.writer, args.url))


if __name__ == "__main__":
    main()
