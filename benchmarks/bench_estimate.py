"""Cost of the context estimate on a typical 10 KB chat request, in µs per call: one walk
(`estimate_context_tokens`) and the walk plus a dot product for each of the four families.

Run: python3 benchmarks/bench_estimate.py [--calls N]
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from fleetgate.config.schema import ContextConfig
from fleetgate.context.estimate import estimate_context_tokens
from fleetgate.context.families import FAMILIES
from fleetgate.context.tally import tally_body

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args()
    body = typical_request()
    settings = ContextConfig()
    size = len(orjson.dumps(body))
    estimate = estimate_context_tokens(body, "chat.completions", settings)
    runs = timeit.repeat(
        lambda: estimate_context_tokens(body, "chat.completions", settings),
        number=args.calls,
        repeat=5,
    )
    best_us = min(runs) / args.calls * 1e6

    def every_family() -> int:
        tally = tally_body(body, "chat.completions")
        return max(f.tokens(tally.counts) for f in FAMILIES.values())

    runs = timeit.repeat(every_family, number=args.calls, repeat=5)
    families_us = min(runs) / args.calls * 1e6
    print(
        f"tally + {len(FAMILIES)} families: {families_us:.2f} µs/call (budget {BUDGET_US:.0f} µs)"
    )
    print(
        f"estimate_context_tokens: {best_us:.2f} µs/call "
        f"(request {size} bytes, {len(body['messages'])} messages, estimate {estimate.total} "
        f"tokens; best of 5 x {args.calls} calls; budget {BUDGET_US:.0f} µs)"
    )


if __name__ == "__main__":
    main()
