"""Prompt-cache affinity: a conversation's turns go to the replica holding its prefix,
within a bounded load; entries expire, survive a fleet swap and are shared over Redis."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import orjson
import pytest

from fleetgate.config.schema import AffinityConfig
from fleetgate.control.plane import ControlOptions
from fleetgate.fleet import build_fleet
from fleetgate.ingress.openai import parse_openai
from fleetgate.ingress.prefix import prefix_keys
from fleetgate.routing.planner import build_plan
from fleetgate.server.app import Gateway
from fleetgate.state.affinity import MemoryAffinity
from fleetgate.state.runtime import MemoryState
from tests.engines import llama_fleet
from tests.harness import LoopThread, Stack, deployment, fleet_config, provider, wait_until

HEADER = "x-fleetgate-affinity"
SYSTEM = {"role": "system", "content": "You are a patient tutor. " * 30}


def _fleet(names: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "providers": [{"id": n, "base_url": "http://127.0.0.1:9/v1"} for n in names],
        "deployments": [deployment("m", n) for n in names],
        **extra,
    }


def _chat(
    url: str, messages: list[dict[str, Any]], model: str = "m", **body: Any
) -> httpx.Response:
    resp = httpx.post(
        url + "/v1/chat/completions",
        json={"model": model, "messages": messages, "max_tokens": 8, **body},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    return resp


def _next_turn(messages: list[dict[str, Any]], resp: httpx.Response, text: str) -> list[dict]:
    answer = resp.json()["choices"][0]["message"]["content"]
    return [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": text}]


def test_a_conversation_stays_on_the_replica_that_caches_it(stack: Stack, llama_replicas):
    """Real llama.cpp replicas: the second turn hits the first one's engine cache."""
    r1, r2 = llama_replicas(2)
    stack.start_gateway(llama_fleet([r1, r2]))
    turn = [SYSTEM, {"role": "user", "content": "What is a prime number? (conv A)"}]
    first = _chat(stack.url, turn)
    assert first.headers[HEADER] == "miss"
    owner = first.headers["x-fleetgate-route"]
    other = "r2" if owner == "r1" else "r1"
    for i in range(3):
        turn = _next_turn(turn, first, f"And then? ({i})")
        first = _chat(stack.url, turn)
        assert first.headers[HEADER] == "hit"
        assert first.headers["x-fleetgate-route"] == owner
        timings = first.json()["timings"]
        # the engine reused the previous prompt: most of this one came from its cache
        assert timings["cache_n"] > 3 * timings["prompt_n"], timings
    # the same prompt pinned to the other replica finds no cache of the conversation
    pinned = _chat(stack.url, turn, model=other)
    assert HEADER not in pinned.headers  # a pinned deployment has no peers
    assert pinned.json()["timings"]["cache_n"] < pinned.json()["timings"]["prompt_n"]


def test_explain_shows_affinity_without_recording(stack: Stack):
    engines = [stack.engine(n) for n in ("a", "b")]
    stack.start_gateway(
        {
            "providers": [provider(n, e) for n, e in zip(("a", "b"), engines, strict=True)],
            "deployments": [deployment("m", "a"), deployment("m", "b")],
        }
    )
    turn = [SYSTEM, {"role": "user", "content": "hello"}]
    explain = stack.url + "/v1/routing/explain"
    body = {"model": "m", "messages": turn}
    for _ in range(2):  # explaining twice records nothing
        plan = httpx.post(explain, json=body).json()
        assert plan["headers"]["X-Fleetgate-Affinity"] == "miss"
        assert plan["notes"]["affinity"]["limit"] == {"a": 1, "b": 1}
    resp = _chat(stack.url, turn, stream=True)  # a stream records once it has started
    owner = resp.headers["x-fleetgate-route"]
    assert resp.headers[HEADER] == "miss"
    next_turn = [*turn, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "x"}]
    plan = httpx.post(explain, json={"model": "m", "messages": next_turn}).json()
    assert plan["headers"]["X-Fleetgate-Affinity"] == "hit"
    assert plan["candidates"][0]["deployment"] == owner
    assert plan["notes"]["affinity"]["owner"] == owner
    assert plan["notes"]["affinity"]["matched_blocks"] == 2  # system + the first user turn


def test_bounded_load_overflows_to_a_peer(stack: Stack):
    engines = {n: stack.engine(n) for n in ("a", "b")}
    stack.start_gateway(
        {
            "providers": [provider(n, e) for n, e in engines.items()],
            "deployments": [deployment("m", "a"), deployment("m", "b")],
        }
    )
    turn = [SYSTEM, {"role": "user", "content": "the same long question"}]
    owner = _chat(stack.url, turn).headers["x-fleetgate-route"]
    for engine in engines.values():
        engine.latency = 1.5  # hold the burst in flight
        engine.reset_counters()
    burst = 8
    with ThreadPoolExecutor(burst) as pool:
        answers = list(pool.map(lambda _: _chat(stack.url, turn), range(burst)))
    results = Counter(r.headers[HEADER] for r in answers)
    served = Counter(r.headers["x-fleetgate-route"] for r in answers)
    assert set(results) == {"hit", "overflow"} and results["overflow"] >= 2, results
    # no replica above (1 + 0.25) x the mean in-flight count
    assert max(served.values()) <= math.ceil(1.25 * burst / 2), served
    assert served[owner] > served.most_common()[-1][1]  # the owner still took the most


def test_entries_expire_with_the_engine_cache(monkeypatch: pytest.MonkeyPatch):
    """TTL on an injected clock: the plan's `now`."""
    config = fleet_config(
        _fleet(["a", "b", "c"], routing={"balancing": {"affinity": {"ttl_seconds": 60}}})
    )
    fleet = build_fleet(config)
    table = MemoryAffinity(config.routing.balancing.affinity)
    body = {"model": "m", "messages": [SYSTEM, {"role": "user", "content": "q"}]}

    def plan(now: float) -> tuple[str, str]:
        profile = parse_openai("chat.completions", orjson.dumps(body))
        p = build_plan(profile, fleet, MemoryState(), now=now, affinity=table)
        return p.headers["X-Fleetgate-Affinity"], p.candidates[0].deployment.id

    result, first = plan(1000.0)
    assert result == "miss"
    owner = next(n for n in ("a", "b", "c") if n != first)  # not the consistent-hash choice
    table.record(
        prefix_keys(parse_openai("chat.completions", orjson.dumps(body)))[-1], owner, 1000.0
    )
    assert plan(1059.0) == ("hit", owner)
    assert plan(1061.0) == ("miss", first)  # expired: back to consistent hashing
    assert len(table) == 0


def test_the_table_is_bounded():
    table = MemoryAffinity(AffinityConfig(max_entries=3))
    for i in range(5):
        table.record(i, "a", 0.0)
    assert len(table) == 3
    assert table.owner(0, 1.0) is None and table.owner(4, 1.0) == "a"


def test_affinity_survives_a_fleet_swap(stack: Stack):
    engines = {n: stack.engine(n) for n in ("a", "b", "c")}
    config = {
        "providers": [provider(n, e) for n, e in engines.items()],
        "deployments": [deployment("m", "a"), deployment("m", "b")],
    }
    stack.start_gateway(config)
    turn = [SYSTEM, {"role": "user", "content": "remember me"}]
    first = _chat(stack.url, turn)
    owner = first.headers["x-fleetgate-route"]
    gateway = stack.gateway
    assert gateway is not None
    # a new fleet: one more replica, and weights that favour everyone but the owner
    swapped = {
        **config,
        "deployments": [
            deployment("m", n, weight=1.0 if n == owner else 50.0) for n in ("a", "b", "c")
        ],
    }
    gateway.pipeline.holder.swap(build_fleet(fleet_config(swapped), version=2))
    resp = _chat(stack.url, _next_turn(turn, first, "still there?"))
    assert resp.headers[HEADER] == "hit"
    assert resp.headers["x-fleetgate-route"] == owner


@pytest.fixture
def replica_b(loop_thread: LoopThread) -> Iterator[Stack]:
    s = Stack(loop_thread)
    yield s
    s.close()


def test_affinity_is_shared_across_replicas_on_redis(
    stack: Stack, replica_b: Stack, sqlite_url: str, redis_url: str, redis_namespace: str
):
    engines = {n: stack.engine(n) for n in ("a", "b", "c")}
    config = {
        "providers": [provider(n, e) for n, e in engines.items()],
        "deployments": [deployment("m", n) for n in engines],
    }
    opts = ControlOptions(
        database_url=sqlite_url, redis_url=redis_url, redis_namespace=redis_namespace
    )
    stack.start_gateway(config, opts)
    b: Gateway = replica_b.start_gateway(config, opts)
    turn = [SYSTEM, {"role": "user", "content": "shared question"}]
    first = _chat(stack.url, turn)
    owner = first.headers["x-fleetgate-route"]
    wait_until(lambda: len(b.pipeline.affinity) == 1, 5, "replica B learned the entry")
    second = _chat(replica_b.url, _next_turn(turn, first, "and on B?"))
    assert second.headers[HEADER] == "hit"
    assert second.headers["x-fleetgate-route"] == owner


def test_the_admin_explain_shows_the_same_balanced_plan(stack: Stack, sqlite_url: str):
    """`POST /admin/explain` is the pipeline's explain: after an affinity hit it orders the
    owner first with the affinity note, exactly as `POST /v1/routing/explain` does."""
    from tests.admin.helpers import admin, options

    engines = [stack.engine(n) for n in ("a", "b")]
    stack.start_gateway(
        {
            "providers": [provider(n, e) for n, e in zip(("a", "b"), engines, strict=True)],
            "deployments": [deployment("m", "a"), deployment("m", "b")],
        },
        options(sqlite_url),
    )
    turn = [SYSTEM, {"role": "user", "content": "hello"}]
    resp = _chat(stack.url, turn)
    owner = resp.headers["x-fleetgate-route"]
    next_turn = [*turn, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "x"}]
    body = {"model": "m", "messages": next_turn}
    client_plan = httpx.post(stack.url + "/v1/routing/explain", json=body, timeout=10).json()
    with admin(stack) as api:
        admin_plan = api.post("/admin/explain", json={"request": body}).json()
    for plan in (client_plan, admin_plan):
        assert plan["candidates"][0]["deployment"] == owner
        assert plan["headers"]["X-Fleetgate-Affinity"] == "hit"
        assert plan["notes"]["affinity"]["owner"] == owner
    assert [c["deployment"] for c in admin_plan["candidates"]] == [
        c["deployment"] for c in client_plan["candidates"]
    ]
