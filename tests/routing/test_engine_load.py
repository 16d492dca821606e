"""Engine load signals: polled from the engines' own metrics, shown in explain and
/admin/fleet, and a busy engine ranks after its peers."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import orjson

from fleetgate.discovery.engine_load import EngineLoads
from fleetgate.discovery.engine_metrics import EngineLoad
from fleetgate.fleet import build_fleet
from fleetgate.ingress.openai import parse_openai
from fleetgate.routing.planner import build_plan
from fleetgate.state.affinity import MemoryAffinity
from fleetgate.state.runtime import MemoryState
from fleetgate.testing.llama import ALIAS
from tests.admin.helpers import admin, options
from tests.engines import llama_fleet
from tests.harness import Stack, deployment, fleet_config, provider, wait_until

BODY = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
FAST = {"routing": {"balancing": {"engine_load": {"interval_seconds": 0.1}}}}
# the absolute queue rule, configured: an engine moves back when its queue is `max_queue`
# deeper than its peers' shortest, whatever its size (the expected wait judges otherwise:
# tests/routing/test_expected_wait.py)
ABSOLUTE = {"max_queue": 4, "max_wait": None}


def _three(stack: Stack, engine_load: dict[str, Any] | None = None, **extra: Any) -> dict:
    engines = {n: stack.engine(n) for n in ("a", "b", "c")}
    settings = {"interval_seconds": 0.1, **(engine_load or {})}
    stack.start_gateway(
        {
            "providers": [provider(n, e) for n, e in engines.items()],
            "deployments": [deployment("m", n) for n in engines],
            "routing": {"balancing": {"engine_load": settings}},
        },
        **extra,
    )
    return engines


def _explain(stack: Stack, body: dict[str, Any] = BODY) -> dict[str, Any]:
    return httpx.post(stack.url + "/v1/routing/explain", json=body, timeout=10).json()


def _polled(stack: Stack, dep: str, **values: float) -> None:
    """Wait until `dep`'s sample shows `values` and a whole poll round has run since this
    call: the round under way may have read some engines before their load changed, and
    records each engine's sample as its answer comes, so one sample seen new does not
    mean its peers' are."""
    loads, poller = stack.gateway.pipeline.loads, stack.gateway.pipeline.load_poller
    after = poller.rounds + 2

    def seen() -> bool:
        sample = loads.get(dep)
        return (
            poller.rounds >= after
            and sample is not None
            and all(getattr(sample, k) == v for k, v in values.items())
        )

    wait_until(seen, 5, f"{dep}'s engine polled with {values}")


def test_a_deep_queue_or_a_full_kv_cache_ranks_after_the_peers(stack: Stack):
    engines = _three(stack, ABSOLUTE)
    affinity_first = _explain(stack)["candidates"][0]["deployment"]
    engines[affinity_first].load = {"waiting": 12, "running": 8}
    _polled(stack, affinity_first, waiting=12)
    plan = _explain(stack)
    order = [c["deployment"] for c in plan["candidates"]]
    assert order[-1] == affinity_first and order[0] != affinity_first
    signals = plan["notes"]["engine_load"]
    assert signals[affinity_first] == {
        "waiting": 12,
        "running": 8,
        "kv_cache": 0.0,
        "expected_wait": 1.625,  # 13 ahead of a new request, 8 at a time: shown, not judged
        "moved_back": "queue 12 > 4",
    }
    assert signals[order[0]]["waiting"] == 0 and "moved_back" not in signals[order[0]]
    resp = httpx.post(stack.url + "/v1/chat/completions", json=BODY, timeout=10)
    served = resp.headers["x-fleetgate-route"]
    assert served != affinity_first
    # a nearly full KV cache counts the same; when every peer is busy, nobody moves
    engines[affinity_first].load = {"kv_cache": 0.97}
    _polled(stack, affinity_first, kv_cache=0.97)
    moved = _explain(stack)["notes"]["engine_load"][affinity_first]["moved_back"]
    assert moved == "kv cache 97% >= 95%"
    for name in engines:
        engines[name].load = {"waiting": 9}
    for name in engines:
        _polled(stack, name, waiting=9)
    plan = _explain(stack)
    assert plan["candidates"][0]["deployment"] == served  # the prompt's owner, by affinity
    assert plan["headers"]["X-Fleetgate-Affinity"] == "hit"
    assert not any("moved_back" in s for s in plan["notes"]["engine_load"].values())
    # busy everywhere: an engine moves back only when its queue is max_queue deeper than
    # the shortest of its peers'
    engines[served].load = {"waiting": 13}
    _polled(stack, served, waiting=13)
    assert "moved_back" not in _explain(stack)["notes"]["engine_load"][served]
    engines[served].load = {"waiting": 14}
    _polled(stack, served, waiting=14)
    plan = _explain(stack)
    assert plan["notes"]["engine_load"][served]["moved_back"] == "queue 14 > 4 (9 at the shortest)"
    assert plan["candidates"][-1]["deployment"] == served


def test_a_lone_deployment_is_not_polled(stack: Stack):
    lone, a, b = stack.engine("lone"), stack.engine("a"), stack.engine("b")
    stack.start_gateway(
        {
            "providers": [provider("lone", lone), provider("a", a), provider("b", b)],
            "deployments": [
                deployment("solo", "lone"),
                deployment("m", "a"),
                deployment("m", "b", priority=1),  # no peer of equal rank either
            ],
            **FAST,
        }
    )
    rounds = stack.gateway.pipeline.load_poller.rounds
    wait_until(
        lambda: stack.gateway.pipeline.load_poller.rounds >= rounds + 3, 5, "three poll rounds"
    )
    assert lone.metrics_calls == a.metrics_calls == b.metrics_calls == 0


def test_polls_do_not_follow_redirects(stack: Stack):
    engines = _three(stack)
    elsewhere = stack.engine("elsewhere")
    engines["a"].metrics_redirect = elsewhere.url + "/metrics"
    loads, poller = stack.gateway.pipeline.loads, stack.gateway.pipeline.load_poller
    after = poller.rounds + 2  # a whole round since: b's and c's samples are in too
    wait_until(
        lambda: poller.rounds >= after and (s := loads.get("a")) is not None and s.error,
        5,
        "a's poll failed",
    )
    assert loads.get("a").error == "ValueError: /metrics: HTTP 302"
    assert elsewhere.metrics_calls == 0 and engines["a"].metrics_calls > 0
    assert "a" not in _explain(stack)["notes"]["engine_load"]  # no numbers: no signal


def test_admin_fleet_shows_engine_load_and_ema_age(stack: Stack, sqlite_url: str):
    _three(stack, options=options(sqlite_url))
    httpx.post(stack.url + "/v1/chat/completions", json=BODY, timeout=10)
    _polled(stack, "b", waiting=0)
    fleet = admin(stack).get("/admin/fleet").json()
    rows = {d["id"]: d for d in fleet["deployments"]}
    load = rows["b"]["engine_load"]
    assert load["waiting"] == 0 and load["kv_cache"] == 0 and load["error"] is None
    assert 0 <= load["age_seconds"] < 5
    served = next(d for d in rows.values() if d["ema"]["latency_seconds"] is not None)
    assert 0 <= served["ema"]["age_seconds"] < 30 and served["ema"]["measured_at"] > 0
    idle = [d for d in rows.values() if d["ema"]["latency_seconds"] is None]
    assert len(idle) == 2 and all(d["ema"]["age_seconds"] is None for d in idle)


def test_llama_cpp_slots_and_metrics(stack: Stack, llama_replicas):
    """The real engine: `/slots` and `llamacpp:requests_processing` while it generates."""
    r1, r2 = llama_replicas(2)
    stack.start_gateway(llama_fleet([r1, r2], **FAST))
    _polled(stack, "r1", slots=1, busy_slots=0, running=0, waiting=0)
    done = threading.Event()

    def generate() -> None:  # a long answer, straight to r1
        httpx.post(
            r1.base_url + "/chat/completions",
            json={
                "model": ALIAS,
                "messages": BODY["messages"],
                "max_tokens": 900,
                "ignore_eos": True,
            },
            timeout=60,
        )
        done.set()

    worker = threading.Thread(target=generate)
    worker.start()
    try:
        loads = stack.gateway.pipeline.loads

        seen: list[Any] = []

        def busy() -> bool:  # keeps the sample it judged (the next poll replaces it)
            seen[:] = [loads.get("r1")]
            return done.is_set() or (seen[0] is not None and seen[0].busy_slots == 1)

        wait_until(busy, 10, "r1 seen busy")
        sample = seen[0]
        assert not done.is_set(), "the generation ended before a poll saw it"
        assert sample.busy_slots == 1 and sample.running == 1 and sample.waiting == 0
        assert _explain(stack)["notes"]["engine_load"]["r1"]["busy_slots"] == 1
    finally:
        worker.join(60)


def _plan_with(loads: dict[str, tuple[float, int]], inflight: dict[str, int]) -> Any:
    """A plan for three tied deployments: `loads` is each engine's (queue, the gateway's
    in-flight count when it was polled), `inflight` the gateway's count now."""
    fleet = build_fleet(
        fleet_config(
            {
                "providers": [{"id": n, "base_url": "http://127.0.0.1:9/v1"} for n in "abc"],
                "deployments": [deployment("m", n) for n in "abc"],
                "routing": {"balancing": {"engine_load": ABSOLUTE}},
            }
        )
    )
    state, samples, now = MemoryState(), EngineLoads(), time.time()
    for dep, (waiting, then) in loads.items():
        samples.record(dep, EngineLoad(waiting=waiting, running=1, fetched_at=now, inflight=then))
        state.health(dep).inflight = inflight[dep]
    profile = parse_openai("chat.completions", orjson.dumps(BODY))
    return build_plan(profile, fleet, state, now=now, affinity=MemoryAffinity(), loads=samples)


def test_requests_sent_since_the_poll_count_in_the_queue():
    """c was the one engine not busy at the last poll: what the gateway has sent it since
    joins its queue, so it stops taking every request once its peers are no longer more
    than max_queue deeper (the affinity rule and its bound decide among the three again)."""
    polled = {"a": (10, 11), "b": (10, 11), "c": (1, 2)}
    plan = _plan_with(polled, {"a": 11, "b": 11, "c": 2})
    assert plan.candidates[0].deployment.id == "c"
    assert plan.notes["engine_load"]["a"]["moved_back"] == "queue 10 > 4 (1 at the shortest)"
    assert "affinity" not in plan.notes  # one engine left: engine load decided alone
    plan = _plan_with(polled, {"a": 11, "b": 11, "c": 6})  # four sent to c since
    assert plan.notes["engine_load"]["c"]["queue_now"] == 5
    assert plan.notes["engine_load"]["a"]["moved_back"] == "queue 10 > 4 (5 at the shortest)"
    plan = _plan_with(polled, {"a": 11, "b": 11, "c": 7})  # five: a and b are not 4 deeper
    assert not any("moved_back" in s for s in plan.notes["engine_load"].values())
    assert plan.notes["affinity"]["inflight"] == {"a": 11, "b": 11, "c": 7}
    # requests that ended since shorten a queue the same way
    plan = _plan_with(polled, {"a": 8, "b": 11, "c": 2})
    assert plan.notes["engine_load"]["a"]["queue_now"] == 7
    assert plan.notes["engine_load"]["a"]["moved_back"] == "queue 7 > 4 (1 at the shortest)"


def test_the_queue_now_fills_free_slots_first():
    # llama.cpp: two slots, one busy, no queue; three sent since: one runs, two queue
    sample = EngineLoad(waiting=0, running=1, slots=2, busy_slots=1, inflight=1)
    assert sample.queue_now(4) == 2
    assert sample.queue_now(0) == 0
    # no queue and no slot count (vLLM below its batch size): nothing to add
    assert EngineLoad(waiting=0, running=3, inflight=3).queue_now(9) == 0
    assert EngineLoad(waiting=2, running=3).queue_now(9) == 2  # no snapshot: as reported


def test_a_polled_sample_carries_the_gateways_in_flight_count(stack: Stack):
    engines = _three(stack)
    engines["a"].latency = 2.0  # one request held in flight on a
    done = threading.Event()
    gateway = stack.gateway
    worker = threading.Thread(
        target=lambda: (
            httpx.post(stack.url + "/v1/chat/completions", json={**BODY, "model": "a"}),
            done.set(),
        )
    )
    worker.start()
    try:
        wait_until(
            lambda: gateway.pipeline.state.health("a").inflight == 1 or done.is_set(), 5, "sent"
        )
        _polled(stack, "a")
        sample = gateway.pipeline.loads.get("a")
        assert done.is_set() or sample.inflight == 1
        assert gateway.pipeline.loads.get("b").inflight == 0
    finally:
        worker.join(10)
