"""The client of the paced-streams benchmark: N streams at once, each timed event by event.

N workers each run `--rounds` streams back to back, their starts spread evenly over
`--spread-ms` (one stream's length keeps N streams under way from then on; 0 starts all N
at the same instant: a burst). Each stream opens its own connection (the timer starts
before the connect, as a client's would), POSTs one streamed chat and reads it to its end
with the httptools parser on uvloop. It records the time to the first event (TTFT) and
every gap between two reads that brought events; a stream stalled when one of its gaps was
longer than `--stall` times the pace. Prints one JSON object.

Run: `python3 -m benchmarks.paced_client --port P --path /v1/chat/completions
--model bench-model-paced --streams 256 [--rounds 2] [--pace-ms 20] [--events 66]
[--spread-ms 1300]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

import httptools


class Stream(asyncio.Protocol):
    def __init__(self, done: asyncio.Future[None]) -> None:
        self.done = done
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.started = 0.0
        self.first = 0.0  # when the first event came (0: none yet)
        self.last = 0.0
        self.events = 0
        self.gaps: list[float] = []
        self.status = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._end(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(exc or ConnectionError("closed before the end"))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        n = body.count(b"\n\n")  # an SSE event ends with an empty line
        if not n:
            return
        now = time.perf_counter()
        if self.first:
            self.gaps.append(now - self.last)
        else:
            self.first = now
        self.last = now
        self.events += n

    def on_message_complete(self) -> None:
        self._end(None)

    def _end(self, exc: BaseException | None) -> None:
        if not self.done.done():
            if exc is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(exc)
        if self.transport is not None:
            self.transport.close()


async def one(host: str, port: int, request: bytes) -> Stream:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    started = time.perf_counter()
    _, stream = await loop.create_connection(lambda: Stream(done), host, port)
    stream.started = started
    assert stream.transport is not None
    stream.transport.write(request)
    await done
    return stream


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    body = json.dumps(
        {
            "model": args.model,
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 64,
            "stream": True,
        }
    ).encode()
    request = (
        f"POST {args.path} HTTP/1.1\r\nHost: 127.0.0.1:{args.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body
    ttfts: list[float] = []
    gaps: list[float] = []
    stalled = errors = short = 0
    limit = args.stall * args.pace_ms / 1000
    spread = args.spread_ms / 1000

    async def worker(i: int) -> list[Stream | BaseException]:
        await asyncio.sleep(i * spread / args.streams)
        done: list[Stream | BaseException] = []
        for _ in range(args.rounds):
            try:
                done.append(await one(args.host, args.port, request))
            except Exception as exc:
                done.append(exc)
        return done

    workers = await asyncio.gather(*(worker(i) for i in range(args.streams)))
    for results in workers:
        for result in results:
            if isinstance(result, BaseException) or result.status != 200:
                errors += 1
                continue
            if result.events != args.events:
                short += 1
            ttfts.append(result.first - result.started)
            gaps += result.gaps
            if result.gaps and max(result.gaps) > limit:
                stalled += 1
    ms = 1000.0
    return {
        "streams": args.streams * args.rounds,
        "errors": errors,
        "short": short,  # streams with another number of events than expected
        "stalled": stalled,
        "events": args.events,
        "ttft_p50_ms": (_pct(ttfts, 0.5) or 0) * ms,
        "ttft_p99_ms": (_pct(ttfts, 0.99) or 0) * ms,
        "ttft_max_ms": max(ttfts, default=0) * ms,
        "gap_p50_ms": (_pct(gaps, 0.5) or 0) * ms,
        "gap_p99_ms": (_pct(gaps, 0.99) or 0) * ms,
        "gap_max_ms": max(gaps, default=0) * ms,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/v1/chat/completions")
    parser.add_argument("--model", default="bench-model-paced")
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--pace-ms", type=float, default=20.0)
    parser.add_argument("--stall", type=float, default=5.0, help="stall: a gap > this x pace")
    parser.add_argument("--events", type=int, default=66, help="events a whole stream has")
    parser.add_argument(
        "--spread-ms", type=float, default=0.0, help="start the N streams over this long"
    )
    parser.add_argument("--cpu", type=int, default=None, help="pin to this CPU")
    args = parser.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    import uvloop

    print(json.dumps(uvloop.run(run(args))))


if __name__ == "__main__":
    main()
