"""Load judged by the expected wait (requests ahead per slot x time per request): a
one-slot engine with one answer running and two waiting gives up its affinity traffic to an
idle peer, a 256-sequence engine with two waiting does not, and affinity yields when the
owner's wait outweighs what its cached prefix saves. Explain says which signal decided."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import orjson

from fleetgate.discovery.engine_metrics import EngineLoad
from fleetgate.ingress.openai import parse_openai
from fleetgate.ingress.prefix import prefix_keys
from fleetgate.routing.expected_wait import ahead_per_slot
from fleetgate.testing.llama import ALIAS
from tests.engines import llama_fleet
from tests.harness import Stack, deployment, provider, wait_until

HELLO = [{"role": "user", "content": "hello"}]
QUIET_POLLER = {"routing": {"balancing": {"engine_load": {"interval_seconds": 3600}}}}


def _body(topic: str) -> dict[str, Any]:
    return {
        "model": "m",
        "max_tokens": 4,
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": f"tell me about {topic}"},
            {"role": "assistant", "content": "sure"},
            {"role": "user", "content": "more"},
        ],
    }


def _start(stack: Stack) -> None:
    a, b = stack.engine("a"), stack.engine("b")
    stack.start_gateway(
        {
            "providers": [provider("pa", a), provider("pb", b)],
            "deployments": [deployment("m", "pa"), deployment("m", "pb")],
            **QUIET_POLLER,
        }
    )
    gw = stack.gateway.pipeline
    # after the first poll round nothing polls while the test runs: the samples put in by
    # hand below stay as they are
    wait_until(lambda: gw.load_poller.rounds >= 1, 10, "the first engine-load poll round")


def _setup(stack: Stack, body: dict[str, Any], a: EngineLoad, b: EngineLoad) -> None:
    """`pa` served this prompt last; the engines report `a` and `b`."""
    gw = stack.gateway.pipeline
    now = time.time()
    gw.loads.record("pa", EngineLoad(**{**_fields(a), "fetched_at": now}))
    gw.loads.record("pb", EngineLoad(**{**_fields(b), "fetched_at": now}))
    keys = prefix_keys(parse_openai("chat.completions", orjson.dumps(body)))
    gw.affinity.record(keys[-1], "pa", now)


def _fields(sample: EngineLoad) -> dict[str, Any]:
    names = ("waiting", "running", "kv_cache", "slots", "busy_slots")
    return {n: getattr(sample, n) for n in names}


def _explain(stack: Stack, body: dict[str, Any]) -> dict[str, Any]:
    resp = httpx.post(stack.url + "/v1/routing/explain", json=body, timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()


def _order(plan: dict[str, Any]) -> list[str]:
    return [c["deployment"] for c in plan["candidates"]]


def test_a_one_slot_engine_with_two_waiting_gives_up_its_prefix(stack: Stack) -> None:
    _start(stack)
    body = _body("slots")
    busy = EngineLoad(waiting=2, running=1, slots=1, busy_slots=1)  # two whole answers ahead
    idle = EngineLoad(waiting=0, running=0, slots=1, busy_slots=0)
    _setup(stack, body, busy, idle)
    plan = _explain(stack, body)
    assert _order(plan) == ["pb", "pa"]
    signals = plan["notes"]["engine_load"]
    assert signals["pa"]["expected_wait"] == 3.0  # in requests: nothing measured yet
    assert signals["pa"]["moved_back"] == "expected wait 3 requests > 0 at the shortest + 0.5"
    assert "affinity" not in plan["notes"]  # one engine left that is not busy: no choice
    assert plan["candidates"][0]["ranked_by"] == "engine_load"
    for _ in range(3):  # real traffic goes where explain says
        resp = httpx.post(stack.url + "/v1/chat/completions", json=body, timeout=10)
        assert resp.headers["x-fleetgate-route"] == "pb"
        _setup(stack, body, busy, idle)  # the answer made pb the owner: pa again


def test_a_256_sequence_engine_with_two_waiting_keeps_its_prefix(stack: Stack) -> None:
    _start(stack)
    body = _body("batches")
    # two waiting behind 256 running sequences: a hundredth of an answer's wait
    _setup(stack, body, EngineLoad(waiting=2, running=256), EngineLoad(waiting=0, running=3))
    plan = _explain(stack, body)
    assert _order(plan) == ["pa", "pb"]
    assert "moved_back" not in plan["notes"]["engine_load"]["pa"]
    assert plan["notes"]["affinity"]["result"] == "hit"
    assert plan["notes"]["affinity"]["decided_by"] == "prefix"
    assert plan["candidates"][0]["ranked_by"] == "affinity"


def test_affinity_yields_when_the_wait_outweighs_what_the_prefix_saves(stack: Stack) -> None:
    _start(stack)
    body = _body("waits")
    state = stack.gateway.pipeline.state
    for dep in ("pa", "pb"):
        state.health(dep).latency_ema = 2.0  # seconds an answer takes there
        state.health(dep).ttft_ema = 0.1  # a short prompt: little to read again
    # 21 ahead of a new request on a 64-sequence batch: 0.33 of an answer, 0.66 s; below the
    # engine-load bound (0.5 of an answer), above the 0.1 s the cached prefix saves
    queued = EngineLoad(waiting=20, running=64)
    _setup(stack, body, queued, EngineLoad(waiting=0, running=10))
    plan = _explain(stack, body)
    assert _order(plan) == ["pb", "pa"]
    assert "moved_back" not in plan["notes"]["engine_load"]["pa"]
    affinity = plan["notes"]["affinity"]
    assert affinity["result"] == "overflow" and affinity["decided_by"] == "expected_wait"
    assert affinity["yielded"] == {"owner_wait": 0.6562, "shortest_wait": 0.0, "prefix_saves": 0.1}
    # a long prompt (5 s to read again) is worth the wait: the prefix wins
    for dep in ("pa", "pb"):
        state.health(dep).ttft_ema = 5.0
    plan = _explain(stack, body)
    assert _order(plan) == ["pa", "pb"]
    assert plan["notes"]["affinity"]["decided_by"] == "prefix"


def test_two_one_slot_llama_cpp_replicas(stack: Stack, llama_replicas) -> None:
    """The issue's setup on the real engine: r1 holds the prompt's prefix but runs one answer
    with two waiting; r2 is idle. The request goes to r2, and explain says why."""
    r1, r2 = llama_replicas(2)
    stack.start_gateway(
        llama_fleet([r1, r2], routing={"balancing": {"engine_load": {"interval_seconds": 0.1}}})
    )
    gw = stack.gateway.pipeline
    body = {**_body("engines"), "max_tokens": 2}
    keys = prefix_keys(parse_openai("chat.completions", orjson.dumps(body)))
    long_answer = {"model": ALIAS, "messages": HELLO, "max_tokens": 400, "ignore_eos": True}
    workers = [
        threading.Thread(
            target=httpx.post,
            args=(r1.base_url + "/chat/completions",),
            kwargs={"json": long_answer, "timeout": 120},
        )
        for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    try:
        seen: list[Any] = []

        def queued() -> bool:  # one answer running on r1's slot, two deferred behind it
            sample = gw.loads.get("r1")
            seen[:] = [sample]
            return sample is not None and sample.busy_slots == 1 and sample.waiting == 2

        wait_until(queued, 30, "r1 seen with one running and two waiting")
        gw.affinity.record(keys[-1], "r1", time.time())  # r1 served this prompt last
        plan = _explain(stack, body)
        assert _order(plan) == ["r2", "r1"]
        moved = plan["notes"]["engine_load"]["r1"]["moved_back"]
        assert moved.startswith("expected wait 3")  # three whole answers ahead on one slot
        assert plan["candidates"][0]["ranked_by"] == "engine_load"
        resp = httpx.post(stack.url + "/v1/chat/completions", json=body, timeout=60)
        assert resp.status_code == 200
        assert resp.headers["x-fleetgate-route"] == "r2"
    finally:
        for worker in workers:
            worker.join(120)


def test_answers_that_ended_since_the_poll_free_their_slots() -> None:
    """The poll saw this gateway's one answer on a one-slot engine; once it has ended, a new
    request waits for nothing (tests/routing/test_affinity.py's conversation, whose next
    turn came before the next poll, lost its affinity without this)."""
    ran = EngineLoad(waiting=0, running=1, slots=1, busy_slots=1, inflight=1)
    assert ahead_per_slot(ran, 1) == 1.0  # still running: one whole answer ahead
    assert ahead_per_slot(ran, 0) == 0.0  # ended since: the slot is free
    queued = EngineLoad(waiting=2, running=1, slots=1, busy_slots=1, inflight=1)
    assert ahead_per_slot(queued, 0) == 2.0  # one of the two waiting took the slot
    idle = EngineLoad(waiting=0, running=0, slots=2, busy_slots=0, inflight=0)
    assert ahead_per_slot(idle, 3) == 1.0  # three sent since: two run, one waits, two slots
