"""Hot-path cost of prompt-cache affinity, in µs per request.

- `prefix_keys` on a typical 10 KB chat request, a 100 KB conversation and a 1 MB paste,
  each next to the floor measured in the same run: `orjson.loads` of the same body (what
  the ingress pays anyway to parse it);
- `build_plan` for a model with three deployments of equal rank (engine load + affinity
  act) against the same model with three priorities (they are inert), same request.

Run: python3 benchmarks/bench_prefix.py [--calls N]
"""

from __future__ import annotations

import argparse
import sys
import time
import timeit
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_estimate import typical_request
from fleetgate.config import validate_config
from fleetgate.discovery.engine_load import EngineLoads
from fleetgate.discovery.engine_metrics import EngineLoad
from fleetgate.fleet import build_fleet
from fleetgate.ingress.openai import parse_openai
from fleetgate.ingress.prefix import prefix_keys
from fleetgate.routing.planner import build_plan
from fleetgate.state.affinity import MemoryAffinity
from fleetgate.state.runtime import MemoryState


def _best_us(fn: Any, calls: int) -> float:
    return min(timeit.repeat(fn, number=calls, repeat=5)) / calls * 1e6


def _bodies() -> dict[str, bytes]:
    typical = typical_request()
    long_conversation = typical_request(100_000)
    paste = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Summarise the document."},
            {"role": "user", "content": "lorem ipsum dolor sit amet " * 40_000},
        ],
    }
    return {
        "typical 10 KB chat": orjson.dumps(typical),
        "100 KB conversation": orjson.dumps(long_conversation),
        "1 MB pasted document": orjson.dumps(paste),
    }


def _hash_row(name: str, raw: bytes, calls: int) -> str:
    profile = parse_openai("chat.completions", raw)

    def hashed() -> None:
        profile.prefix = None
        prefix_keys(profile)

    n = max(50, calls // max(1, len(raw) // 10_000))
    cost = _best_us(hashed, n)
    floor = _best_us(lambda: orjson.loads(raw), n)
    messages = len(profile.body["messages"])
    return f"| {name} | {len(raw)} | {messages} | {cost:.2f} | {floor:.2f} | {cost / floor:.2f} |"


def hash_costs(calls: int) -> None:
    print("| request | bytes | messages | prefix_keys µs | orjson.loads µs (floor) | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, raw in _bodies().items():
        print(_hash_row(name, raw, calls))


def plan_costs(calls: int) -> None:
    def fleet(priorities: list[int]) -> Any:
        config, problems = validate_config(
            {
                "providers": [
                    {"id": f"p{i}", "kind": "vllm", "base_url": "http://127.0.0.1:9/v1"}
                    for i in range(3)
                ],
                "deployments": [
                    {
                        "model": "m",
                        "provider": f"p{i}",
                        "id": f"p{i}",
                        "priority": p,
                        "modalities": ["text", "image"],  # the typical request has an image
                    }
                    for i, p in enumerate(priorities)
                ],
            }
        )
        assert config is not None, problems
        return build_fleet(config)

    raw = orjson.dumps(typical_request())
    now = time.time()
    table = MemoryAffinity()
    loads = EngineLoads()
    for i in range(3):
        loads.record(f"p{i}", EngineLoad(waiting=0, running=1, kv_cache=0.3, fetched_at=now))
    state = MemoryState()
    tied, ranked = fleet([0, 0, 0]), fleet([0, 1, 2])
    profile = parse_openai("chat.completions", raw)
    first = build_plan(profile, tied, state, affinity=table, loads=loads)
    assert profile.prefix and first.headers["X-Fleetgate-Affinity"] == "miss"
    table.record(profile.prefix[-1], first.candidates[0].deployment.id, now)
    again = build_plan(parse_openai("chat.completions", raw), tied, state, affinity=table)
    assert again.headers["X-Fleetgate-Affinity"] == "hit"

    def plan(f: Any, affinity: MemoryAffinity | None) -> None:
        build_plan(parse_openai("chat.completions", raw), f, state, affinity=affinity, loads=loads)

    parse = _best_us(lambda: parse_openai("chat.completions", raw), calls)
    inert = _best_us(lambda: plan(ranked, table), calls) - parse
    acting = _best_us(lambda: plan(tied, table), calls) - parse
    off = _best_us(lambda: plan(tied, None), calls) - parse
    print()
    print("| plan (typical 10 KB chat, 3 deployments) | build_plan µs |")
    print("|---|---:|")
    print(f"| different priorities (tie-breakers inert) | {inert:.2f} |")
    print(f"| equal rank, affinity off (engine load only) | {off:.2f} |")
    print(f"| equal rank, engine load + affinity (hit) | {acting:.2f} |")
    print(f"| added by the tie-breakers | {acting - inert:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=5_000)
    args = parser.parse_args()
    hash_costs(args.calls)
    plan_costs(args.calls)


if __name__ == "__main__":
    main()
