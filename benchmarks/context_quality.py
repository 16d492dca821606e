"""How well fleetgate places requests by context, in front of two real llama.cpp engines.

Generates a varied corpus (`fleetgate.testing.corpus`: English prose, code, numeric CSV,
CJK, other scripts, identifiers, JSON, tool schemas, multi-turn chats with tool calls,
`max_tokens` 8-256), sized around the windows. Takes each request's exact prompt count
from the engine (`/apply-template` with its tools, then `/tokenize` with the special tokens
it adds to a prompt it serves), so each request's
need (prompt + max_tokens) and the tier it belongs on are known. Starts two `llama-server`
engines (n_ctx 512 and 2048) behind one model id and replays the corpus through
`fleetgate serve` twice: with `context_guard: allow` (the default) and with `reject`.
Each request that fits a tier is also sent directly to the engine it belongs on and
through the Python floor in front of that engine (`baseline.py`: a bare uvicorn + aiohttp
pass-through, no pipeline), the order rotating, for the added latency of both.

Reports, with the issue's targets:
- placed right: on the smallest window that holds it (100 %); what fits nowhere goes to
  the largest window with `allow`, and is refused before any upstream call with `reject`;
- cut short: a 200 with a length stop before its own `max_tokens` (0), among requests that
  fit a tier;
- refused while a tier fits (`reject`; 0);
- fits nowhere and reached an engine anyway (`reject`; 0);
- exact-count engine calls per request (<= 0.3; the record note `context_count_calls`);
- the estimate's error spread per class (the central estimate of the deployment's family
  over the true count), and the share within [0.85, 1.25];
- added latency, gateway - direct, paired per request (mean <= 1 ms), for all requests and
  for those without an exact count; the floor's own added latency on the same requests,
  and the gateway's over the floor's.

    python3 benchmarks/context_quality.py [--seed 21] [--requests 300] [--tokenizer] [--out FILE]
        [--model FILE.gguf --alias NAME] [--no-fingerprint]

`--model` runs both engines on another model file (`scripts/llama_engine/make_vocab_model.py`
writes tiny ones with other real vocabularies and chat templates) under the model name
`--alias`, which should suggest no tokenizer family. The report then also gives the share of
requests whose central estimate (the deployment's own fit once it has one, else the
family's) lies within [0.9, 1.1] of the true count: over all requests, before any answer
(the fingerprint's), and after the first 50 answers.

Prompts are sent with `cache_prompt: false` and `temperature: 0`, so a request costs the
engine the same whichever of its two sends comes first.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from benchmarks.keepalive import KeepAliveClient  # noqa: E402
from benchmarks.run import start_server, stop  # noqa: E402
from fleetgate.config.schema import ContextConfig  # noqa: E402
from fleetgate.context.need import family_tokens  # noqa: E402
from fleetgate.context.tally import tally_body  # noqa: E402
from fleetgate.testing.corpus import CLASSES, corpus  # noqa: E402
from fleetgate.testing.llama import ALIAS, LlamaServer, find_llama, free_port  # noqa: E402

MODEL = "ctx-model"
FLOOR_MODEL = "bench-model-llama"  # what `baseline.py` sends to its `--engine` as ALIAS
PATH = "/v1/chat/completions"
WINDOWS = (512, 2048)
SIZES = (60, 9000)  # characters of text per request: needs from ~40 to ~4000 tokens
TARGETS = {
    "placed_right": 1.0,
    "cut_short": 0,
    "refused_while_fits": 0,
    "nowhere_reached_engine": 0,
    "count_calls_per_request": 0.3,
    "added_mean_ms": 1.0,
}


class Connection(KeepAliveClient):
    """JSON in and out."""

    def call(
        self, method: str, path: str, body: Any = None
    ) -> tuple[float, int, dict[str, str], Any]:
        data = json.dumps(body).encode() if body is not None else None
        elapsed, status, headers, raw = self.request(method, path, data)
        return elapsed, status, headers, json.loads(raw) if raw else None


@dataclass
class Item:
    index: int
    kind: str
    body: dict[str, Any]
    prompt: int = 0  # the engine's exact count
    estimate: int = 0  # the family's central estimate (qwen2)

    @property
    def need(self) -> int:
        return self.prompt + int(self.body["max_tokens"])

    @property
    def tier(self) -> int | None:
        """The smallest window that holds it (None: none)."""
        return next((w for w in WINDOWS if self.need <= w), None)


@dataclass
class Outcome:
    status: int
    route: str | None
    attempts: int
    error: str | None
    cut_short: bool
    count_calls: int
    counted: bool
    seconds: float
    direct_seconds: float | None = None
    floor_seconds: float | None = None
    # the engine's own compute for each send (its `timings`): subtracted, the engine's
    # variance leaves the comparison
    engine_seconds: float = 0.0
    direct_engine_seconds: float = 0.0
    floor_engine_seconds: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)


ALIASES = {"alias": ALIAS}  # the engines' model name (`--alias`)


def exact_counts(engine: LlamaServer, items: list[Item]) -> None:
    conn = Connection(engine.port)
    for item in items:
        payload: dict[str, Any] = {"messages": item.body["messages"]}
        if item.body.get("tools"):
            payload["tools"] = item.body["tools"]
        _, status, _, templated = conn.call("POST", "/apply-template", payload)
        assert status == 200, templated
        # with the special tokens the engine adds to a prompt it serves (a BOS token, on
        # Command R's vocabulary): its usage counts them, and so does its window
        tokenize = {"content": templated["prompt"], "add_special": True}
        _, status, _, tokens = conn.call("POST", "/tokenize", tokenize)
        assert status == 200, tokens
        item.prompt = len(tokens["tokens"])


def make_items(seed: int, n: int) -> list[Item]:
    settings = ContextConfig()
    items = []
    for i, sample in enumerate(corpus(seed, n, SIZES)):
        body = {"model": MODEL, **sample.body, "temperature": 0, "cache_prompt": False}
        estimate = family_tokens(tally_body(body, "chat.completions"), "qwen2", settings)
        items.append(Item(i, sample.kind, body, estimate=estimate))
    return items


def write_config(
    path: Path,
    port: int,
    engines: list[LlamaServer],
    guard: str,
    tokenizer: Path | None,
    fingerprint: bool = True,
) -> None:
    config = {
        "server": {"host": "127.0.0.1", "port": port},
        "routing": {"context": {"guard": guard, "fingerprint": fingerprint}},
        "providers": [
            {"id": f"ctx-{w}", "kind": "llamacpp", "base_url": e.base_url}
            for w, e in zip(WINDOWS, engines, strict=True)
        ],
        "deployments": [
            {
                "id": f"ctx-{w}",
                "model": MODEL,
                "provider": f"ctx-{w}",
                "upstream_model": ALIASES["alias"],
                "context_window": w,
                **({"tokenizer": str(tokenizer)} if tokenizer else {}),
            }
            for w in WINDOWS
        ],
    }
    path.write_text(json.dumps(config))


def start_gateway(
    work: Path,
    engines: list[LlamaServer],
    guard: str,
    tokenizer: Path | None,
    fingerprint: bool = True,
) -> Any:
    port = free_port()
    config = work / f"fleet-{guard}.json"
    write_config(config, port, engines, guard, tokenizer, fingerprint)
    pythonpath = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in pythonpath if p))
    env["FLEETGATE_DATA_DIR"] = str(work / guard)
    (work / guard).mkdir()
    return start_server(
        f"fleetgate-{guard}",
        [sys.executable, "-m", "fleetgate", "serve", "--config", str(config)],
        port,
        "/readyz",
        set(range(os.cpu_count() or 1)),
        env,
        ROOT,
        work / f"gateway-{guard}.log",
    )


def start_floors(work: Path, engines: list[LlamaServer]) -> list[Any]:
    """The Python floor (`baseline.py`) in front of each engine."""
    floors = []
    for w, engine in zip(WINDOWS, engines, strict=True):
        port = free_port()
        floors.append(
            start_server(
                f"floor-{w}",
                [
                    *(sys.executable, "-m", "benchmarks.baseline", "--port", str(port)),
                    *("--upstream", engine.base_url.removesuffix("/v1")),
                    *("--engine", engine.base_url.removesuffix("/v1")),
                ],
                port,
                "/readyz",
                set(range(os.cpu_count() or 1)),
                dict(os.environ),
                ROOT,
                work / f"floor-{w}.log",
            )
        )
    return floors


def _cut_short(item: Item, answer: Any) -> bool:
    if not isinstance(answer, dict) or not answer.get("choices"):
        return False
    finish = answer["choices"][0].get("finish_reason")
    completion = (answer.get("usage") or {}).get("completion_tokens", 0)
    return bool(finish == "length" and completion < item.body["max_tokens"])


def _engine_seconds(answer: Any) -> float:
    """What llama.cpp says the request cost it (prompt + generation), in seconds."""
    timings = answer.get("timings") if isinstance(answer, dict) else None
    if not isinstance(timings, dict):
        return 0.0
    return float(timings.get("prompt_ms", 0.0) + timings.get("predicted_ms", 0.0)) / 1000


def replay(
    gateway_port: int,
    engines: list[LlamaServer],
    items: list[Item],
    floors: dict[int, int] | None,
) -> list[Outcome]:
    """Each item through the gateway; with `floors` (window -> the floor's port) each one
    that fits a tier also directly and through the floor, the three sends' order rotating
    by index so that none is always first."""
    through = Connection(gateway_port)
    records = Connection(gateway_port)
    straight = {w: Connection(e.port) for w, e in zip(WINDOWS, engines, strict=True)}
    bare = {w: Connection(port) for w, port in (floors or {}).items()}
    out = []
    for item in items:
        sends: dict[str, Any] = {"gateway": ("gateway", through, item.body)}
        if floors is not None and item.tier is not None:
            sends["direct"] = (
                "direct",
                straight[item.tier],
                {**item.body, "model": ALIASES["alias"]},
            )
            sends["floor"] = ("floor", bare[item.tier], {**item.body, "model": FLOOR_MODEL})
        order = list(sends.values())
        shift = item.index % len(order)
        answers = {
            name: conn.call("POST", PATH, body)
            for name, conn, body in order[shift:] + order[:shift]
        }
        seconds, status, headers, answer = answers["gateway"]
        direct, floor = answers.get("direct"), answers.get("floor")
        _, rec_status, _, record = records.call("GET", f"/v1/requests/{headers['x-request-id']}")
        assert rec_status == 200, record
        notes = record.get("notes") or {}
        error = answer.get("error") if isinstance(answer, dict) else None
        out.append(
            Outcome(
                status=status,
                route=headers.get("x-fleetgate-route"),
                attempts=len(record.get("attempts") or ()),
                error=(error or {}).get("code") if isinstance(error, dict) else None,
                cut_short=status == 200 and _cut_short(item, answer),
                count_calls=int(notes.get("context_count_calls") or 0),
                counted=notes.get("context_refine") == "exact",
                seconds=seconds,
                direct_seconds=direct[0] if direct is not None else None,
                floor_seconds=floor[0] if floor is not None else None,
                engine_seconds=_engine_seconds(answer),
                direct_engine_seconds=_engine_seconds(direct[3]) if direct is not None else 0.0,
                floor_engine_seconds=_engine_seconds(floor[3]) if floor is not None else 0.0,
                notes=notes,
            )
        )
    return out


def _route_window(route: str | None) -> int | None:
    return int(route.removeprefix("ctx-")) if route else None


def _central(o: Outcome) -> int | None:
    """The central estimate of the deployment that answered (its own fit's, else its
    family's), from the record's `context_raw` note."""
    raw = o.notes.get("context_raw") or {}
    dep = o.route or "ctx-2048"
    return (
        raw.get("@" + dep)
        or raw.get("@ctx-2048")
        or next((v for k, v in raw.items() if not k.startswith("@")), None)
    )


def accuracy(items: list[Item], outcomes: list[Outcome]) -> dict[str, Any]:
    """The share of requests whose central estimate is within [0.9, 1.1] of the true count:
    all, the first 50 (before the fits had 50 answers), and the rest."""
    ratios = []
    for item, o in zip(items, outcomes, strict=True):
        central = _central(o)
        ratios.append(item.prompt / central if central else None)

    def share(part: list[float | None]) -> dict[str, Any]:
        known = [r for r in part if r is not None]
        inside = sum(0.9 <= r <= 1.1 for r in known)
        return {"n": len(known), "within_0.9_1.1": round(inside / len(known), 3) if known else None}

    # the requests outside [0.9, 1.1]: per kind of text, true / central after the first 50
    outside: dict[str, list[float]] = defaultdict(list)
    for item, ratio in zip(items[50:], ratios[50:], strict=True):
        if ratio is not None and not 0.9 <= ratio <= 1.1:
            outside[item.kind].append(round(ratio, 3))
    return {
        "all": share(ratios),
        "first_50": share(ratios[:50]),
        "after_50": share(ratios[50:]),
        "outside_after_50": dict(outside),
    }


def score(items: list[Item], outcomes: list[Outcome], guard: str) -> dict[str, Any]:
    fits = [(i, o) for i, o in zip(items, outcomes, strict=True) if i.tier is not None]
    nowhere = [(i, o) for i, o in zip(items, outcomes, strict=True) if i.tier is None]
    wrong: list[dict[str, Any]] = []
    placed = 0
    for item, o in fits:
        if o.status == 200 and _route_window(o.route) == item.tier and not o.cut_short:
            placed += 1
        else:
            wrong.append(_miss(item, o))
    refused_nowhere = [o for _, o in nowhere if o.error == "context_too_large" and not o.attempts]
    if guard == "reject":
        placed += len(refused_nowhere)
        wrong.extend(_miss(i, o) for i, o in nowhere if o not in refused_nowhere)
    else:  # allow: the largest window first, and its engine's own answer
        biggest = [o for _, o in nowhere if o.attempts and _first_window(o) == WINDOWS[-1]]
        placed += len(biggest)
        wrong.extend(_miss(i, o) for i, o in nowhere if o not in biggest)
    calls = sum(o.count_calls for o in outcomes)
    result: dict[str, Any] = {
        "guard": guard,
        "requests": len(items),
        "placed_right": placed / len(items),
        "placed_right_n": placed,
        "cut_short": sum(o.cut_short for _, o in fits),
        "refused_while_fits": sum(o.error == "context_too_large" for _, o in fits),
        "counted_requests": sum(o.counted for o in outcomes),
        "count_calls": calls,
        "count_calls_per_request": calls / len(items),
        # where the counts went: by the tier each request belongs on (none: fits nowhere)
        "count_calls_by_tier": _calls_by_tier(items, outcomes),
        "weighed": _weighed(items, outcomes, guard),
        "misses": wrong[:20],
    }
    if guard == "reject":
        result["nowhere_refused_before_upstream"] = len(refused_nowhere)
        result["nowhere_reached_engine"] = sum(o.attempts > 0 for _, o in nowhere)
    sent = [o for _, o in fits if o.direct_seconds is not None]
    if sent:
        result["latency"] = _added(sent)
        result["added_mean_ms"] = result["latency"]["all"]["mean_ms"]
        # what each count cost: its engine calls and the latency it added (outside compute)
        result["counted_detail"] = [
            {
                "kind": item.kind,
                "prompt": item.prompt,
                "calls": o.count_calls,
                "outside_engine_ms": round(_gateway_added(o, outside=True) * 1000, 2),
            }
            for item, o in fits
            if o.counted and o.direct_seconds is not None
        ]
    return result


def _calls_by_tier(items: list[Item], outcomes: list[Outcome]) -> dict[str, dict[str, int]]:
    """Exact-count engine calls and counted requests, by the tier each request belongs on."""
    out: dict[str, dict[str, int]] = {}
    for item, o in zip(items, outcomes, strict=True):
        row = out.setdefault(str(item.tier), {"requests": 0, "counted": 0, "calls": 0})
        row["requests"] += 1
        row["counted"] += o.counted
        row["calls"] += o.count_calls
    return out


BINS = (0.0, 0.05, 0.1, 0.2, 0.5, 1.01)


def _weighed(items: list[Item], outcomes: list[Outcome], guard: str) -> list[dict[str, Any]]:
    """The requests whose count was weighed (`context_change_probability`), by that
    probability: how many, how many were counted and their calls, the moves predicted (the
    sum of the probabilities) and those that happened. A request whose estimate's upper
    bound (before any count) is over the 512 window has the 2048 engine first, and its
    count moves it when it belongs on 512, or, with a refusal pending (`reject`), when it
    fits nowhere; one whose upper bound is within 512 (its chance of needing more was
    weighed) is moved when it does not belong on 512."""
    rows = [
        {"from": lo, "to": min(hi, 1.0), "n": 0, "counted": 0, "calls": 0}
        | {"predicted": 0.0, "moved": 0}
        for lo, hi in itertools.pairwise(BINS)
    ]
    for item, o in zip(items, outcomes, strict=True):
        p = o.notes.get("context_change_probability")
        if p is None:
            continue
        row = next(r for r, hi in zip(rows, BINS[1:], strict=False) if p < hi)
        row["n"] += 1
        row["counted"] += o.counted
        row["calls"] += o.count_calls
        row["predicted"] = round(row["predicted"] + p, 3)
        upper = o.notes.get("context_estimated", o.notes.get("context_estimate"))
        if upper is not None and upper <= WINDOWS[0]:  # the 512 engine was first
            row["moved"] += item.tier != WINDOWS[0]
        else:
            row["moved"] += item.tier == WINDOWS[0] or (guard == "reject" and item.tier is None)
    return rows


def _over_direct(o: Outcome, seconds: float, engine: float, outside: bool) -> float:
    """What a send of `seconds` (the engine's own compute `engine`) took over the direct
    send of the same request; `outside`: each send's engine compute taken out."""
    assert o.direct_seconds is not None
    if not outside:
        return seconds - o.direct_seconds
    return (seconds - engine) - (o.direct_seconds - o.direct_engine_seconds)


def _gateway_added(o: Outcome, outside: bool = False) -> float:
    return _over_direct(o, o.seconds, o.engine_seconds, outside)


def _floor_added(o: Outcome, outside: bool = False) -> float:
    assert o.floor_seconds is not None
    return _over_direct(o, o.floor_seconds, o.floor_engine_seconds, outside)


def _added(sent: list[Outcome]) -> dict[str, Any]:
    """Added latency, paired per request: the gateway's and the floor's over direct, raw
    and outside the engine's own compute, and the gateway's over the floor's."""
    gateway, floor = _gateway_added, _floor_added
    plain = [o for o in sent if not o.counted]
    return {
        "all": _latency([gateway(o) for o in sent]),
        "not_counted": _latency([gateway(o) for o in plain]),
        "counted": _latency([gateway(o) for o in sent if o.counted]),
        "outside_engine": _latency([gateway(o, True) for o in sent]),
        "outside_engine_not_counted": _latency([gateway(o, True) for o in plain]),
        "floor": _latency([floor(o) for o in sent]),
        "floor_outside_engine": _latency([floor(o, True) for o in sent]),
        # what the pipeline adds over the bare pass-through, outside the engine's compute
        "over_floor_outside_engine": _latency([gateway(o, True) - floor(o, True) for o in sent]),
        "over_floor_outside_engine_not_counted": _latency(
            [gateway(o, True) - floor(o, True) for o in plain]
        ),
        "direct_p50_ms": statistics.median(o.direct_seconds * 1000 for o in sent),  # type: ignore[misc]
    }


def _first_window(o: Outcome) -> int | None:
    return _route_window(o.route) if o.route else WINDOWS[-1] if o.attempts else None


def _latency(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    ms = sorted(v * 1000 for v in values)
    return {
        "n": len(ms),
        "mean_ms": statistics.fmean(ms),
        "p50_ms": statistics.median(ms),
        "trimmed_mean_ms": statistics.fmean(ms[len(ms) // 20 : len(ms) - len(ms) // 20] or ms),
    }


def _miss(item: Item, o: Outcome) -> dict[str, Any]:
    return {
        "index": item.index,
        "kind": item.kind,
        "prompt": item.prompt,
        "max_tokens": item.body["max_tokens"],
        "need": item.need,
        "tier": item.tier,
        "estimate": item.estimate,
        "status": o.status,
        "route": o.route,
        "error": o.error,
        "cut_short": o.cut_short,
        "notes": {k: v for k, v in o.notes.items() if k.startswith("context_")},
    }


def spread(items: list[Item]) -> dict[str, Any]:
    """The central estimate / the true count, per class: quantiles and the share within
    [0.85, 1.25] (the issue's criterion for the estimate)."""
    by_kind: dict[str, list[float]] = defaultdict(list)
    for item in items:
        by_kind[item.kind].append(item.estimate / item.prompt)
    out: dict[str, Any] = {}
    for kind in (*CLASSES, "all"):
        ratios = sorted(r for k, rs in by_kind.items() if kind in (k, "all") for r in rs)
        if not ratios:
            continue
        q = statistics.quantiles(ratios, n=20, method="inclusive") if len(ratios) > 1 else ratios
        out[kind] = {
            "n": len(ratios),
            "min": round(ratios[0], 3),
            "p5": round(q[0], 3),
            "p50": round(statistics.median(ratios), 3),
            "p95": round(q[-1], 3),
            "max": round(ratios[-1], 3),
            "within_0.85_1.25": round(sum(0.85 <= r <= 1.25 for r in ratios) / len(ratios), 3),
        }
    return out


def checks(results: list[dict[str, Any]]) -> list[str]:
    lines = []
    for r in results:
        g = r["guard"]
        lines.append(
            f"{g}: placed right {r['placed_right_n']}/{r['requests']} (target 100 %), "
            f"cut short {r['cut_short']} (0), refused while a tier fits "
            f"{r['refused_while_fits']} (0), exact-count calls/request "
            f"{r['count_calls_per_request']:.3f} (<= 0.3)"
        )
        lines.append(
            f"{g}: calls (counted requests) by the tier a request belongs on: "
            + ", ".join(
                f"{tier}: {row['calls']} ({row['counted']} of {row['requests']})"
                for tier, row in sorted(r["count_calls_by_tier"].items())
            )
        )
        lines.append(
            f"{g}: weighed counts by probability [from, to): n, counted (calls), moves "
            "predicted / moved: "
            + "; ".join(
                f"[{w['from']}, {w['to']}): {w['n']}, {w['counted']} ({w['calls']}), "
                f"{w['predicted']:.1f} / {w['moved']}"
                for w in r["weighed"]
                if w["n"]
            )
        )
        est = r.get("estimate")
        if est:
            lines.append(
                f"{g}: estimate within [0.9, 1.1]: all {est['all']['within_0.9_1.1']}, first 50 "
                f"{est['first_50']['within_0.9_1.1']}, after 50 {est['after_50']['within_0.9_1.1']}"
                " (>= 0.95)"
            )
        if g == "reject":
            lines.append(
                f"{g}: fits nowhere: refused before any upstream call "
                f"{r['nowhere_refused_before_upstream']}, reached an engine "
                f"{r['nowhere_reached_engine']} (0)"
            )
        if "latency" in r:
            lat = r["latency"]
            lines.append(
                f"{g}: added latency mean {lat['all']['mean_ms']:.2f} ms, p50 "
                f"{lat['all']['p50_ms']:.2f} ms (target mean <= 1 ms; direct p50 "
                f"{lat['direct_p50_ms']:.1f} ms); not counted: mean "
                f"{lat['not_counted'].get('mean_ms', float('nan')):.2f} ms, counted: mean "
                f"{lat['counted'].get('mean_ms', float('nan')):.2f} ms"
            )
            lines.append(
                f"{g}: added latency outside the engine's compute (its `timings`): mean "
                f"{lat['outside_engine']['mean_ms']:.2f} ms, p50 "
                f"{lat['outside_engine']['p50_ms']:.2f} ms; not counted: mean "
                f"{lat['outside_engine_not_counted'].get('mean_ms', float('nan')):.2f} ms"
            )
            lines.append(
                f"{g}: the floor (bare pass-through) adds mean {lat['floor']['mean_ms']:.2f} ms, "
                f"outside the engine's compute {lat['floor_outside_engine']['mean_ms']:.2f} ms; "
                f"the gateway over the floor, outside the engine's compute: mean "
                f"{lat['over_floor_outside_engine']['mean_ms']:.2f} ms, not counted "
                f"{lat['over_floor_outside_engine_not_counted'].get('mean_ms', float('nan')):.2f}"
                " ms"
            )
    return lines


def run(
    seed: int,
    n: int,
    latency: bool,
    tokenizer: bool,
    model: Path | None = None,
    fingerprint: bool = True,
) -> dict[str, Any]:
    """`tokenizer`: the deployments count with a local `tokenizer:` (the engine's
    tokenizer.json) instead of the engine's endpoints. `model`: the engines' model file."""
    alias = ALIASES["alias"]
    engines = [LlamaServer(n_ctx=w, slots=1, threads=1, model=model, alias=alias) for w in WINDOWS]
    gateways: list[Any] = []
    try:
        for e in engines:
            e.start()
        items = make_items(seed, n)
        exact_counts(engines[-1], items)
        tiers = Counter(str(i.tier) for i in items)
        work = Path(tempfile.mkdtemp(prefix="fleetgate-context-quality-"))
        floors = start_floors(work, engines) if latency else []
        gateways.extend(floors)
        results = []
        for guard in ("allow", "reject"):
            local = find_llama().tokenizer if tokenizer else None
            gateway = start_gateway(work, engines, guard, local, fingerprint)
            gateways.append(gateway)
            ports = {w: f.port for w, f in zip(WINDOWS, floors, strict=True)} if floors else {}
            outcomes = replay(
                gateway.port, engines, items, ports if guard == "allow" and floors else None
            )
            results.append({**score(items, outcomes, guard), "estimate": accuracy(items, outcomes)})
            stop(gateway.proc)
        return {
            "seed": seed,
            "requests": n,
            "local_tokenizer": tokenizer,
            "model": str(model) if model else None,
            "alias": alias,
            "fingerprint": fingerprint,
            "tiers": dict(tiers),
            "load_average": os.getloadavg(),
            "spread": spread(items),
            "results": results,
            "checks": checks(results),
        }
    finally:
        for gateway in gateways:
            stop(gateway.proc)
        for e in engines:
            e.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--no-latency", action="store_true", help="skip the direct sends")
    parser.add_argument(
        "--tokenizer",
        action="store_true",
        help="give the deployments the engine's tokenizer.json as a local `tokenizer:`",
    )
    parser.add_argument("--out", type=Path, help="write the JSON result here too")
    parser.add_argument("--model", type=Path, help="the engines' model file (.gguf)")
    parser.add_argument("--alias", default=ALIAS, help="the engines' model name")
    parser.add_argument(
        "--no-fingerprint", action="store_true", help="no tokenizer fingerprint at discovery"
    )
    args = parser.parse_args()
    ALIASES["alias"] = args.alias
    result = run(
        args.seed,
        args.requests,
        not args.no_latency,
        args.tokenizer,
        args.model,
        not args.no_fingerprint,
    )
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text)
    print(text)
    print("\n".join(result["checks"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
