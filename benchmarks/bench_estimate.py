"""Cost of the context estimate on a typical 10 KB chat request, in µs per call: one walk
(`estimate_context_tokens`) and the walk plus a dot product for each of the four families,
each against a floor measured in the same run: the old bytes/4 rule (a plain walk that
encodes every text piece and sums the lengths), and `orjson.dumps` of the same body. The
typical chat's text is prose; the last row estimates a chat of mixed text as large (code,
a log, numbers, a markdown table, prose), whose sample needs every pass of the run fields
(a sample without digits, say, skips theirs).

Each of `--repeat` rounds times the floor and the estimate back to back, so a loaded
machine slows both; the table gives the best round of each and the median of the
per-round ratios (the steadier figure when others share the cores). Calls are timed by
the thread's CPU time (`time.thread_time`), so time spent waiting for a core is left out.

Run: python3 benchmarks/bench_estimate.py [--calls N] [--repeat R]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from fleetgate.config import validate_config
from fleetgate.config.schema import ContextConfig
from fleetgate.context.calibration import CalibrationBook
from fleetgate.context.estimate import estimate_context_tokens
from fleetgate.context.families import FAMILIES
from fleetgate.context.need import estimate_need
from fleetgate.context.tally import tally_body
from fleetgate.fleet import Deployment, build_fleet
from fleetgate.testing.corpus import text_of

BUDGET_US = 50.0


def typical_request(target_bytes: int = 10_000) -> dict[str, Any]:
    """A chat with a system prompt, a dozen turns, one image part and two tool schemas."""
    sentence = "The deployment with the smallest window that holds the request goes first. "
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": "Look something up in the operator's inventory.",
                "parameters": {
                    "type": "object",
                    "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                    "required": ["query"],
                },
            },
        }
        for i in range(2)
    ]
    messages: list[dict[str, Any]] = [{"role": "system", "content": sentence * 8}]
    image = {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}}
    messages.append({"role": "user", "content": [{"type": "text", "text": sentence}, image]})
    body: dict[str, Any] = {"model": "m", "messages": messages, "tools": tools, "max_tokens": 512}
    turn = 0
    while len(orjson.dumps(body)) < target_bytes:
        role = "assistant" if turn % 2 else "user"
        messages.append({"role": role, "content": sentence * 4})
        turn += 1
    return body


def mixed_request(target_bytes: int = 10_000) -> dict[str, Any]:
    """The typical chat's shape (system prompt, turns, two tool schemas) with turns of
    several kinds of text, fixed by a seed."""
    body = typical_request(0)
    rng = random.Random(3)
    kinds = ("code", "logs", "numbers", "markdown", "prose")
    messages = body["messages"]
    turn = 0
    while len(orjson.dumps(body)) < target_bytes:
        role = "assistant" if turn % 2 else "user"
        messages.append({"role": role, "content": text_of(kinds[turn % len(kinds)], rng, 600)})
        turn += 1
    return body


def bytes_rule(body: dict[str, Any]) -> int:
    """The floor: the old `ceil(bytes / 4 * 1.2)` rule, a plain walk over the same texts."""
    size = 0
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, str):
            size += len(content.encode())
        elif isinstance(content, list):
            for part in content:
                text = part.get("text")
                if isinstance(text, str):
                    size += len(text.encode())
    for tool in body.get("tools") or ():
        size += len(orjson.dumps(tool))
    return math.ceil(size / 4 * 1.2)


def fitted_deployments(body: dict[str, Any]) -> tuple[list[Deployment], CalibrationBook]:
    """Two deployments (windows 512 and 2048) of a model whose name suggests no family,
    each with a fit of its own (40 answers): what the hot path costs once a deployment's
    tokenizer is learned (its weights differ per tokenizer; their number does not)."""
    data = {
        "providers": [
            {"id": p, "kind": "llamacpp", "base_url": f"http://127.0.0.1:9/{p}/v1"}
            for p in ("small", "large")
        ],
        "deployments": [
            {"id": p, "model": "m", "provider": p, "upstream_model": "orchard-7b"}
            | {"context_window": w}
            for p, w in (("small", 512), ("large", 2048))
        ],
    }
    config, problems = validate_config(data)
    assert config is not None, problems
    deps = list(build_fleet(config).models["m"].deployments)
    book = CalibrationBook()
    counts = tally_body(body, "chat.completions").counts
    for i in range(40):
        for dep in deps:
            prior = FAMILIES[dep.tokenizer_family].weights
            book.observe_answer(dep.id, prior, counts, 2400 + 7 * i, now=float(i))
    book.refit(now=1e9)
    assert all(book.own_fit(d.id) is not None for d in deps)
    return deps, book


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    body = typical_request()
    settings = ContextConfig()
    size = len(orjson.dumps(body))
    estimate = estimate_context_tokens(body, "chat.completions", settings)

    def every_family() -> int:
        tally = tally_body(body, "chat.completions")
        return max(f.tokens(tally.counts) for f in FAMILIES.values())

    def fitted(chat: dict[str, Any]) -> Callable[[], int]:
        """`estimate_need` of `chat` for two deployments fitted on it."""
        deps, book = fitted_deployments(chat)

        def call() -> int:
            need, _ = estimate_need(chat, "chat.completions", settings, deps, book)
            return sum(need.bounds(d)[1] for d in deps)

        return call

    mixed = mixed_request(size)

    timed: dict[str, Callable[[], object]] = {
        "floor: bytes/4 walk": lambda: bytes_rule(body),
        "floor: orjson.dumps": lambda: orjson.dumps(body),
        "estimate_context_tokens": lambda: estimate_context_tokens(
            body, "chat.completions", settings
        ),
        f"tally + {len(FAMILIES)} families": every_family,
        "estimate_need, 2 deployments with their own fit": fitted(body),
        f"the same, a chat of mixed text ({len(orjson.dumps(mixed))} bytes)": fitted(mixed),
    }
    rounds: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(args.repeat):
        for name, fn in timed.items():
            # the thread's own CPU time: what a call costs, not how often others ran
            seconds = timeit.timeit(fn, number=args.calls, timer=time.thread_time)
            rounds[name].append(seconds / args.calls * 1e6)
    floor = rounds["floor: bytes/4 walk"]
    print(
        f"request {size} bytes, {len(body['messages'])} messages, estimate {estimate.total} "
        f"tokens; {args.repeat} rounds x {args.calls} calls; load average "
        f"{os.getloadavg()[0]:.1f}; budget {BUDGET_US:.0f} µs"
    )
    print("| what | best CPU µs/call | median ratio to the bytes/4 walk |")
    print("|---|---:|---:|")
    for name, values in rounds.items():
        ratio = statistics.median(v / f for v, f in zip(values, floor, strict=True))
        mark = "" if name.startswith("floor") else (" ✓" if min(values) <= BUDGET_US else " ✗")
        print(f"| {name} | {min(values):.2f}{mark} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
