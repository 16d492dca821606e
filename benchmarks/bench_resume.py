"""CPU per relayed block of a stream that may be continued (`execute/resume.py`), against the
plain relay of the same stream measured in the same run (the floor).

Every stream is relayed by one loop (`execute/relay.py`). A stream whose plan has no
candidate that could continue it checks each block with `Framing.json_events`; one that
may be continued with `event_check.EndCheck`, the same check decoding each event into the
type that says it does not end the answer, and keeps the blocks it relays (`continuable`,
a native answer), or has them kept by `Continuation.stream` (`wrapped`: a translated
answer, whose translation is a generator of its own anyway). Each stream here is N chat
chunks of one token and its end, read from an in-memory response; nothing is continued.

Run under valgrind (`--tool=callgrind`) for instruction counts: `--kind K` runs one kind.

Run: python3 benchmarks/bench_resume.py [--blocks N] [--rounds R] [--whole]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from fleetgate.execute.event_check import EndCheck
from fleetgate.execute.framing import SSE
from fleetgate.execute.outcome import Attempt
from fleetgate.execute.relay import relay
from fleetgate.execute.rewrite import rewriter_for


def _chunk(i: int) -> bytes:
    delta = {"content": f" w{i}"}
    choice = {"index": 0, "delta": delta, "finish_reason": None}
    body = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1}
    return b"data: " + orjson.dumps({**body, "model": "up", "choices": [choice]}) + b"\n\n"


_END = (
    b'data: {"id":"chatcmpl-x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


class _Response:
    """An upstream answer already in memory: one block per read."""

    def __init__(self, blocks: list[bytes]) -> None:
        self.blocks = iter(blocks)

    async def read_some(self) -> bytes:
        return next(self.blocks, b"")

    def close(self) -> None:
        pass


class _NeverContinued:
    def __init__(self) -> None:
        self.relayed: list[bytes] = []

    def wanted(self, *_args: Any) -> bool:
        return False

    def after_end(self, *_args: Any) -> bool:
        return False


async def _kept(stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """What `Continuation.stream` does to each block of a translated answer it may
    continue (a native one's relay keeps its blocks itself)."""
    relayed: list[bytes] = []
    async for block in stream:
        relayed.append(block)
        yield block


# the plain relay; a continuable native answer (its relay keeps its blocks); a continuable
# answer whose client stream is another generator (`Continuation.stream` keeps them)
KINDS = ("plain", "continuable", "wrapped")


def _ended(*_args: Any) -> None:
    pass


async def _one(kind: str, blocks: list[bytes], whole: bool = False) -> float:
    """One stream relayed: its first block checked as the executor checks it, the rest
    read one block at a time (`whole`: the stream is its first block, as an upstream whose
    answer comes in one read sends it)."""
    rewriter = rewriter_for("up", "m")
    attempt = Attempt(0, "d", "p", "up", "model")
    first, rest = (b"".join([*blocks, _END]), []) if whole else (blocks[0], [*blocks[1:], _END])
    response: Any = _Response(rest)
    started = time.perf_counter()
    if kind == "plain":
        head = (first, b"", SSE.json_events(first) or 0)
        stream = relay(response, rewriter, SSE, head, attempt, "chat.completions", _ended)
    else:
        ends = EndCheck(SSE, "chat.completions")
        head = (first, b"", ends.events(first) or 0)
        cont: Any = (_NeverContinued(), None, None, ends)
        inline = kind == "continuable"
        stream = relay(
            response, rewriter, SSE, head, attempt, "chat.completions", _ended, cont, inline
        )
        if not inline:
            stream = _kept(stream)
    async for _block in stream:
        pass
    return time.perf_counter() - started


async def main(n: int, rounds: int, reps: int, kinds: tuple[str, ...], whole: bool) -> None:
    blocks = [_chunk(i) for i in range(n)]
    if len(kinds) == 1:  # counted from outside (callgrind): just run it
        for _ in range(reps):
            await _one(kinds[0], blocks, whole)
        return
    for kind in kinds:  # warm up
        for _ in range(reps // 10):
            await _one(kind, blocks, whole)
    runs: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(rounds):
        for kind, seconds in runs.items():
            total = sum([await _one(kind, blocks, whole) for _ in range(reps)])
            seconds.append(total / reps / (n + 1) * 1e6)
    floor = statistics.median(runs["plain"])
    shape = "in one read" if whole else "a stream"
    print(f"{n + 1} blocks {shape}, {rounds} rounds of {reps} streams, median per block:")
    for kind, seconds in runs.items():
        per_block = statistics.median(seconds)
        print(f"  {kind:12} {per_block:6.2f} µs   {per_block / floor:.2f} x the plain relay")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--blocks", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--kind", choices=KINDS, help="run only these streams, reps times")
    parser.add_argument(
        "--whole", action="store_true", help="each stream comes in one read (its first block)"
    )
    args = parser.parse_args()
    kinds = (args.kind,) if args.kind else KINDS
    asyncio.run(main(args.blocks, args.rounds, args.reps, kinds, args.whole))
