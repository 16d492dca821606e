"""Balancing benchmark: prompt-cache affinity against least-in-flight and round-robin, on
three real llama.cpp replicas, with a generated multi-turn workload.

Every run starts three fresh `llama-server` replicas (n_ctx 2048, one slot, one thread,
prompt cache on: `--cache-prompt` and the host-memory prompt cache `--cache-ram`, both
llama.cpp defaults) and one `fleetgate serve` in front of them, then plays the same
conversations through the gateway (streamed, as a chat client would):

- `affinity`: model `m` on the three deployments, the default balancing;
- `least-in-flight`: the same with `affinity` and `engine_load` off (fleetgate before them);
- `round-robin`: each request pinned to the next replica in turn (`model: r0|r1|r2`);
- `pinned`: each conversation pinned to one replica (`model: r<conversation % 3>`): the
  reference for the prompt-cache hit ratio.

Figures per policy (median of REPEAT runs, range in brackets):
- cache hit ratio: sum of `timings.cache_n` / sum of (`cache_n` + `prompt_n`) over answers
  (the share of prompt tokens the engine took from its cache), and as a share of `pinned`'s;
- TTFT p50 / p99: from sending the request to the first content chunk, at the client;
- load spread: requests per replica, and the time-averaged in-flight count per replica,
  each as max / mean (these move with how long each replica takes to answer, after the
  requests were placed: round-robin, which places evenly, spreads as wide);
- the bound (affinity only): what bounded load governs, read from each request's record
  (`GET /v1/requests/{id}`, the plan's `affinity` note): at each placement, the chosen
  replica's in-flight count with this request over the mean of its group, and how many
  placements went over (1 + epsilon) x the mean, and over that rounded up (the rule's
  limit: never); placements that engine load decided alone (one non-busy replica left,
  so no affinity note) are counted apart, with the same ratio from the client's view
  (requests sent and not yet finished when this one was sent, per replica).

Then the sequential scenario: replica r0 slowed (SLOW_THREADS threads: on a 2-core machine
more threads than cores slow an engine down), r0 listed first, `sort: throughput`, SEQUENTIAL
streamed requests one after another: which replica served each, and after how many
requests the traffic stayed on the fast ones.

Run: python3 -m benchmarks.balancing  (env: CONVERSATIONS, TURNS_MIN, TURNS_MAX, REPEAT,
THINK_MS, MAX_TOKENS, POLICIES, SEQUENTIAL, SLOW_THREADS, SEED, CACHE_RAM, OUT)
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.run import _free_port, _git_commit, stop, wait_http
from fleetgate.testing.llama import ALIAS, LlamaServer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

N_CTX = 2048
REPLICAS = 3

_VOCABULARY = """
the a of to and in is it you that he was for on are with as his they be at one have this
from or had by hot word but what some we can out other were all there when up use your
how said an each she which do their time if will way about many then them write would
like so these her long make thing see him two has look more day could go come did number
sound no most people my over know water than call first who may down side been now find
any new work part take get place made live where after back little only round man year
came show every good me give our under name very through just form sentence great think
say help low line differ turn cause much mean before move right boy old too same tell
does set three want air well also play small end put home read hand port large spell add
even land here must big high such follow act why ask men change went light kind off need
house picture try us again animal point mother world
"""
WORDS = tuple(_VOCABULARY.split())


@dataclass
class Settings:
    conversations: int = 24
    turns_min: int = 5
    turns_max: int = 10
    repeat: int = 3
    think_ms: float = 50.0
    max_tokens: int = 24
    policies: list[str] = field(
        default_factory=lambda: ["affinity", "least-in-flight", "round-robin", "pinned"]
    )
    sequential: int = 30
    slow_threads: int = 2
    seed: int = 15
    cache_ram: str | None = None
    epsilon: float = 0.25  # routing.balancing.affinity.epsilon: the default, not configured
    out: Path = HERE / "results"

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ
        s = cls()
        s.conversations = int(env.get("CONVERSATIONS", s.conversations))
        s.turns_min = int(env.get("TURNS_MIN", s.turns_min))
        s.turns_max = int(env.get("TURNS_MAX", s.turns_max))
        s.repeat = int(env.get("REPEAT", s.repeat))
        s.think_ms = float(env.get("THINK_MS", s.think_ms))
        s.max_tokens = int(env.get("MAX_TOKENS", s.max_tokens))
        if env.get("POLICIES"):
            s.policies = env["POLICIES"].split()
        s.sequential = int(env.get("SEQUENTIAL", s.sequential))
        s.slow_threads = int(env.get("SLOW_THREADS", s.slow_threads))
        s.seed = int(env.get("SEED", s.seed))
        s.cache_ram = env.get("CACHE_RAM") or None
        s.out = Path(env.get("OUT", s.out))
        return s


# ---- the workload ---------------------------------------------------------------------


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


@dataclass
class Conversation:
    index: int
    system: str
    turns: list[str]


def workload(s: Settings) -> list[Conversation]:
    """Conversations of TURNS_MIN..TURNS_MAX user turns over three long shared system prompts."""
    rng = random.Random(s.seed)
    systems = [f"You are assistant number {i}. " + _words(rng, 380) for i in range(3)]
    return [
        Conversation(
            i,
            systems[i % len(systems)],
            [
                _words(rng, rng.randint(30, 60))
                for _ in range(rng.randint(s.turns_min, s.turns_max))
            ],
        )
        for i in range(s.conversations)
    ]


# ---- processes --------------------------------------------------------------------------


def start_replicas(s: Settings, threads: list[int]) -> list[LlamaServer]:
    extra = ("--cache-ram", s.cache_ram) if s.cache_ram else ()
    servers = []
    try:
        for t in threads:
            servers.append(LlamaServer(n_ctx=N_CTX, slots=1, threads=t, extra=extra).start())
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers


def gateway_config(replicas: list[LlamaServer], policy: str, port: int) -> dict[str, Any]:
    balancing: dict[str, Any] = {}
    if policy == "least-in-flight":
        balancing = {"affinity": {"enabled": False}, "engine_load": {"enabled": False}}
    config: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": port},
        "providers": [
            {"id": f"r{i}", "kind": "llamacpp", "base_url": r.base_url}
            for i, r in enumerate(replicas)
        ],
        "deployments": [
            {"id": f"r{i}", "model": "m", "provider": f"r{i}", "upstream_model": ALIAS}
            for i in range(len(replicas))
        ],
        "routing": {"balancing": balancing},
    }
    if policy == "sort-throughput":
        config["models"] = [{"id": "m", "provider": {"sort": "throughput"}}]
    return config


def start_gateway(config: dict[str, Any], work: Path) -> subprocess.Popen[bytes]:
    path = work / "fleet.json"
    path.write_text(json.dumps(config))
    port = config["server"]["port"]
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        # a fresh store each time: a store seeded by an earlier run would win over the file
        FLEETGATE_DATA_DIR=tempfile.mkdtemp(prefix="data-", dir=work),
    )
    log = open(work / "gateway.log", "ab")  # noqa: SIM115  (closed with the process)
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetgate", "serve", "--config", str(path), "--port", str(port)],
        cwd=work,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    wait_http(port, "/readyz", time.perf_counter() + 60, proc)
    return proc


# ---- the client -------------------------------------------------------------------------


@dataclass
class Answer:
    conversation: int
    route: str
    affinity: str | None
    sent: float
    ttft: float
    done: float
    cache_n: int
    prompt_n: int
    prompt_tokens: int
    predicted_per_second: float
    text: str
    attempts: int = 1  # upstream attempts the gateway made (X-Fleetgate-Attempts)
    retried: bool = False  # the client sent it again after a 502
    request_id: str = ""
    notes: dict[str, Any] = field(default_factory=dict)  # the record's plan notes


class Unreachable(RuntimeError):
    """The gateway answered 502 `upstream_unreachable`."""


async def stream_chat(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], conversation: int
) -> Answer:
    sent = time.perf_counter()
    first: float | None = None
    text: list[str] = []
    timings: dict[str, Any] = {}
    usage: dict[str, Any] = {}
    async with session.post(url, json=body) as resp:
        if resp.status != 200:
            detail = await resp.text()
            if resp.status == 502 and "upstream_unreachable" in detail:
                raise Unreachable(detail[:300])
            raise RuntimeError(f"HTTP {resp.status}: {detail[:300]}")
        route = resp.headers.get("x-fleetgate-route", "?")
        attempts = int(resp.headers.get("x-fleetgate-attempts", "1"))
        request_id = resp.headers.get("x-request-id", "")
        affinity = resp.headers.get("x-fleetgate-affinity")
        buffer = b""
        async for chunk in resp.content.iter_any():
            buffer += chunk
            *events, buffer = buffer.split(b"\n\n")
            for event in events:
                data = event.removeprefix(b"data: ").strip()
                if not data or data == b"[DONE]":
                    continue
                obj = json.loads(data)
                for choice in obj.get("choices") or ():
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        first = first or time.perf_counter()
                        text.append(piece)
                timings = obj.get("timings") or timings
                usage = obj.get("usage") or usage
    done = time.perf_counter()
    return Answer(
        conversation,
        route,
        affinity,
        sent,
        (first or done) - sent,
        done,
        int(timings.get("cache_n", 0)),
        int(timings.get("prompt_n", 0)),
        int(usage.get("prompt_tokens", 0)),
        float(timings.get("predicted_per_second", 0.0)),
        "".join(text),
        attempts,
        request_id=request_id,
    )


async def send(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], conversation: int
) -> Answer:
    """One request; sent again once when the gateway could not reach the replica (a pinned
    request has no other candidate to fall back on; see the README's caveats)."""
    try:
        return await stream_chat(session, url, body, conversation)
    except Unreachable:
        answer = await stream_chat(session, url, body, conversation)
        answer.retried = True
        return answer


async def play(s: Settings, port: int, policy: str, convs: list[Conversation]) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    answers: list[Answer] = []
    counter = 0
    rng = random.Random(s.seed + 1)
    thinks = {c.index: [rng.uniform(0, 2 * s.think_ms) / 1000 for _ in c.turns] for c in convs}

    def target(conv: Conversation) -> str:
        nonlocal counter
        if policy == "pinned":
            return f"r{conv.index % REPLICAS}"
        if policy == "round-robin":
            counter += 1
            return f"r{counter % REPLICAS}"
        return "m"

    async def converse(session: aiohttp.ClientSession, conv: Conversation) -> None:
        messages: list[dict[str, str]] = [{"role": "system", "content": conv.system}]
        for turn, think in zip(conv.turns, thinks[conv.index], strict=True):
            await asyncio.sleep(think)
            messages.append({"role": "user", "content": turn})
            body = {
                "model": target(conv),
                "messages": messages,
                "max_tokens": s.max_tokens,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            answer = await send(session, url, body, conv.index)
            answers.append(answer)
            messages.append({"role": "assistant", "content": answer.text})
            if answer.prompt_tokens + 200 + s.max_tokens > N_CTX:
                break  # the next turn would not fit the window

    started = time.perf_counter()
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(converse(session, c) for c in convs))
        wall = time.perf_counter() - started
        if policy == "affinity":  # after the run: the reads do not load the replicas
            await fetch_notes(session, port, answers)
    return summarise(answers, wall, s.epsilon)


async def fetch_notes(session: aiohttp.ClientSession, port: int, answers: list[Answer]) -> None:
    """Each answer's plan notes, from its request record (the gateway keeps the last 500)."""
    for a in answers:
        async with session.get(f"http://127.0.0.1:{port}/v1/requests/{a.request_id}") as resp:
            if resp.status == 200:
                a.notes = (await resp.json()).get("notes") or {}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def bound_figures(answers: list[Answer], epsilon: float) -> dict[str, Any]:
    """What bounded load governs, at each placement the affinity rule made (its note: the
    group's in-flight counts before this request, and each one's limit), and the same
    ratio from the client's view for the placements engine load made alone."""
    ratios: list[float] = []
    excess = 0.0  # the most requests any placement put above (1 + epsilon) x the mean
    over_mean = over_limit = 0
    for a in answers:
        note = a.notes.get("affinity")
        if not note:
            continue
        inflight, chosen = note["inflight"], note["deployment"]
        placed = inflight[chosen] + 1
        mean = (sum(inflight.values()) + 1) / len(inflight)  # the replicas' weights are equal
        ratios.append(placed / mean)
        excess = max(excess, placed - (1 + epsilon) * mean)
        over_mean += placed > (1 + epsilon) * mean + 1e-9
        over_limit += placed > note["limit"][chosen]
    alone = [a for a in answers if a.notes and not a.notes.get("affinity")]
    alone_ratios = []
    for a in alone:  # requests in flight per replica when this one was sent, this one too
        counts = dict.fromkeys((f"r{i}" for i in range(REPLICAS)), 0)
        for b in answers:
            if b is a or b.sent <= a.sent < b.done:
                counts[b.route] = counts.get(b.route, 0) + 1
        alone_ratios.append(counts[a.route] / statistics.mean(counts.values()))
    return {
        "placements": len(ratios),
        "placed_over_mean_p50": _pct(ratios, 0.5) if ratios else None,
        "placed_over_mean_p90": _pct(ratios, 0.9) if ratios else None,
        "placed_over_mean_max": max(ratios, default=None),
        "over_mean": over_mean,
        "over_mean_by_at_most": excess,
        "over_limit": over_limit,
        "engine_load_alone": len(alone),
        "alone_over_mean_max": max(alone_ratios, default=None),
        "alone_over_mean": sum(r > 1 + epsilon + 1e-9 for r in alone_ratios),
    }


def summarise(answers: list[Answer], wall: float, epsilon: float) -> dict[str, Any]:
    cached = sum(a.cache_n for a in answers)
    evaluated = sum(a.prompt_n for a in answers)
    ttft = [a.ttft * 1000 for a in answers]
    routes = sorted({a.route for a in answers})
    served = {r: sum(1 for a in answers if a.route == r) for r in routes}
    busy = {r: sum(a.done - a.sent for a in answers if a.route == r) / wall for r in routes}
    results: dict[str, int] = {}
    for a in answers:
        if a.affinity:
            results[a.affinity] = results.get(a.affinity, 0) + 1
    return {
        "requests": len(answers),
        "wall_s": wall,
        "hit_ratio": cached / max(1, cached + evaluated),
        "ttft_p50_ms": _pct(ttft, 0.5),
        "ttft_p99_ms": _pct(ttft, 0.99),
        "served": served,
        "requests_max_over_mean": max(served.values()) / statistics.mean(served.values()),
        "inflight_avg": busy,
        "inflight_max_over_mean": max(busy.values()) / statistics.mean(busy.values()),
        "affinity_results": results,
        "fallbacks": sum(1 for a in answers if a.attempts > 1),
        "client_retries": sum(1 for a in answers if a.retried),
        "bound": bound_figures(answers, epsilon) if any(a.notes for a in answers) else None,
    }


# ---- the scenarios ------------------------------------------------------------------------


def run_policy(s: Settings, policy: str, convs: list[Conversation], work: Path) -> dict[str, Any]:
    replicas = start_replicas(s, [1] * REPLICAS)
    gateway = None
    try:
        port = _free_port()
        gateway = start_gateway(gateway_config(replicas, policy, port), work)
        return asyncio.run(play(s, port, policy, convs))
    finally:
        stop(gateway)
        for r in replicas:
            r.stop()


def run_sequential(s: Settings, work: Path) -> dict[str, Any]:
    """r0 slowed and listed first; `sort: throughput`; requests one after another."""
    replicas = start_replicas(s, [s.slow_threads, 1, 1])
    gateway = None
    try:
        port = _free_port()
        gateway = start_gateway(gateway_config(replicas, "sort-throughput", port), work)

        async def go() -> list[Answer]:
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            out = []
            async with aiohttp.ClientSession() as session:
                for i in range(s.sequential):
                    body = {
                        "model": "m",
                        "messages": [{"role": "user", "content": f"Count to ten, please ({i})."}],
                        "max_tokens": 64,
                        "ignore_eos": True,
                        "stream": True,
                        "stream_options": {"include_usage": True},
                    }
                    out.append(await send(session, url, body, 0))
            return out

        answers = asyncio.run(go())
    finally:
        stop(gateway)
        for r in replicas:
            r.stop()
    routes = [a.route for a in answers]
    on_slow = [i for i, r in enumerate(routes) if r == "r0"]
    speed: dict[str, list[float]] = {}
    for a in answers:
        speed.setdefault(a.route, []).append(a.predicted_per_second)
    return {
        "routes": routes,
        "requests_on_slow": len(on_slow),
        # the traffic stayed on the fast replicas from this request on (1-based)
        "settled_after": (on_slow[-1] + 2) if on_slow else 1,
        "engine_tokens_per_second": {r: statistics.median(v) for r, v in sorted(speed.items())},
    }


def _median_run(runs: list[dict[str, Any]], key: str) -> tuple[float, float, float]:
    values = [r[key] for r in runs]
    return statistics.median(values), min(values), max(values)


def report(s: Settings, results: dict[str, list[dict[str, Any]]], seq: dict[str, Any]) -> str:
    cache = f", --cache-ram {s.cache_ram}" if s.cache_ram else ""
    lines = [
        f"Balancing benchmark, commit {_git_commit()}: {REPLICAS} llama.cpp replicas (n_ctx "
        f"{N_CTX}, 1 slot, 1 thread, prompt cache on{cache}), {s.conversations} concurrent "
        f"conversations of {s.turns_min}-{s.turns_max} turns, 3 shared system prompts, "
        f"max_tokens {s.max_tokens}, think time 0-{2 * s.think_ms:.0f} ms, {s.repeat} run(s) "
        "per policy (median [min-max]).",
        "",
        "| policy | requests | cache hit ratio | vs pinned | TTFT p50 ms | TTFT p99 ms | "
        "requests max/mean | in-flight max/mean | affinity results | fallbacks + retries |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    pinned = _median_run(results["pinned"], "hit_ratio")[0] if "pinned" in results else None

    def cell(runs: list[dict[str, Any]], key: str, fmt: str) -> str:
        mid, lo, hi = _median_run(runs, key)
        return f"{mid:{fmt}} [{lo:{fmt}}-{hi:{fmt}}]"

    for policy, runs in results.items():
        hit = _median_run(runs, "hit_ratio")[0]
        vs = f"{hit / pinned:.2f}" if pinned else "-"
        outcomes: dict[str, int] = {}
        for r in runs:
            for k, v in r["affinity_results"].items():
                outcomes[k] = outcomes.get(k, 0) + v
        lines.append(
            f"| {policy} | {statistics.median(r['requests'] for r in runs):.0f} | "
            f"{cell(runs, 'hit_ratio', '.3f')} | {vs} | {cell(runs, 'ttft_p50_ms', '.1f')} | "
            f"{cell(runs, 'ttft_p99_ms', '.1f')} | {cell(runs, 'requests_max_over_mean', '.2f')} | "
            f"{cell(runs, 'inflight_max_over_mean', '.2f')} | "
            f"{', '.join(f'{k} {v}' for k, v in sorted(outcomes.items())) or '-'} | "
            f"{sum(r['fallbacks'] + r['client_retries'] for r in runs)} |"
        )
    bounds = [r["bound"] for r in results.get("affinity", ()) if r.get("bound")]
    if bounds:
        placed = [b for b in bounds if b["placements"]]
        alone = [b["alone_over_mean_max"] for b in bounds if b["engine_load_alone"]]

        def per_run(key: str) -> str:
            return " / ".join(f"{b[key]:.2f}" for b in placed)

        lines += [
            "",
            f"Bounded load (affinity, epsilon {s.epsilon:g}), at placement: the affinity rule "
            f"placed {sum(b['placements'] for b in bounds)} requests; the chosen replica's "
            "in-flight count (this request included) over its group's mean was, per run, "
            f"{per_run('placed_over_mean_p50')} at the median, {per_run('placed_over_mean_p90')}"
            f" at p90, {per_run('placed_over_mean_max')} at most (a request placed on an idle "
            f"fleet is 3x the mean); {sum(b['over_mean'] for b in bounds)} placements went over "
            "(1 + epsilon) x the mean, by at most "
            f"{max(b['over_mean_by_at_most'] for b in bounds):.2f} request (the limit rounds "
            f"up), {sum(b['over_limit'] for b in bounds)} over the limit. Engine load alone "
            f"placed {sum(b['engine_load_alone'] for b in bounds)}"
            + (
                f" (client's view: at most {max(alone):.2f} x the mean, "
                f"{sum(b['alone_over_mean'] for b in bounds)} over 1 + epsilon)."
                if alone
                else "."
            ),
        ]
    if seq:
        lines += [
            "",
            f"Sequential, `sort: throughput`, r0 slowed ({s.slow_threads} threads) and listed "
            f"first, {s.sequential} requests: r0 served {seq['requests_on_slow']}; the traffic "
            f"stayed on the fast replicas from request {seq['settled_after']} on. Routes: "
            f"{' '.join(seq['routes'])}. Engine tokens/s (median per replica): "
            + ", ".join(f"{r} {v:.0f}" for r, v in seq["engine_tokens_per_second"].items())
            + ".",
        ]
    return "\n".join(lines)


def main() -> int:
    s = Settings.from_env()
    convs = workload(s)
    work = Path(tempfile.mkdtemp(prefix="fleetgate-balancing-"))
    results: dict[str, list[dict[str, Any]]] = {p: [] for p in s.policies}
    for round_ in range(s.repeat):
        for policy in s.policies:  # interleaved, so drift on the machine hits every policy
            run = run_policy(s, policy, convs, work)
            results[policy].append(run)
            print(
                f"run {round_ + 1} {policy}: hit {run['hit_ratio']:.3f}, TTFT p50 "
                f"{run['ttft_p50_ms']:.1f} ms p99 {run['ttft_p99_ms']:.1f} ms, served "
                f"{run['served']}, {run['wall_s']:.1f} s",
                flush=True,
            )
    seq = run_sequential(s, work) if s.sequential else {}
    text = report(s, results, seq)
    print()
    print(text)
    s.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    (s.out / f"balancing-{stamp}.md").write_text(text + "\n")
    (s.out / f"balancing-{stamp}.json").write_text(
        json.dumps({"results": results, "sequential": seq}, indent=2, default=str)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
