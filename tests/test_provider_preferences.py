"""Provider preferences: request `provider` object, model config, env vars; their semantics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from fleetgate.cli import main as cli_main
from fleetgate.config.preferences import parse_env_list
from fleetgate.config.schema import ProviderPreferences
from fleetgate.fleet import build_fleet
from fleetgate.ingress.profile import RequestProfile
from fleetgate.routing.orderers.preference import MEASUREMENT_HALF_LIFE
from fleetgate.routing.planner import build_plan
from fleetgate.routing.preferences import merge
from fleetgate.state.runtime import MemoryState
from fleetgate.testing import Fault
from tests.harness import Stack, deployment, fleet_config, provider, wait_until

MSG = [{"role": "user", "content": "hello"}]


def three_hosts(stack: Stack, model: dict[str, Any] | None = None) -> list[Any]:
    """pa (priority 0, dearest), pb (1), pc (2, cheapest) all serve `m`."""
    engines = [stack.engine(n) for n in "abc"]
    stack.start_gateway(
        {
            "providers": [provider(f"p{n}", e) for n, e in zip("abc", engines, strict=True)],
            "deployments": [
                deployment(
                    "m", "pa", priority=0, price={"input": 10, "output": 30}, quantization="fp8"
                ),
                deployment(
                    "m", "pb", priority=1, price={"input": 3, "output": 6}, quantization="bf16"
                ),
                deployment("m", "pc", priority=2, price={"input": 1, "output": 2}),
            ],
            "models": [model] if model else [],
        }
    )
    return engines


def chat(stack: Stack, prefs: dict[str, Any] | None = None, **extra: Any) -> httpx.Response:
    body: dict[str, Any] = {"model": "m", "messages": MSG, **extra}
    if prefs is not None:
        body["provider"] = prefs
    return httpx.post(stack.url + "/v1/chat/completions", json=body, timeout=10)


def explain(stack: Stack, prefs: dict[str, Any]) -> dict[str, Any]:
    body = {"model": "m", "messages": MSG, "provider": prefs}
    return httpx.post(stack.url + "/v1/routing/explain", json=body).json()


def route_of(resp: httpx.Response) -> str:
    assert resp.status_code == 200, resp.text
    return resp.headers["x-fleetgate-route"]


def test_provider_object_never_reaches_upstream(stack: Stack, client_for):
    a, _, _ = three_hosts(stack)
    client = client_for(stack)
    client.chat.completions.create(
        model="m", messages=MSG, extra_body={"provider": {"order": ["pa"], "sort": "price"}}
    )
    assert "provider" not in a.requests[-1].body
    stream = client.chat.completions.create(
        model="m", messages=MSG, stream=True, extra_body={"provider": {"only": ["pa"]}}
    )
    assert len(list(stream)) > 2
    assert "provider" not in a.requests[-1].body
    assert a.requests[-1].body["messages"] == MSG


@pytest.mark.parametrize(
    ("prefs", "param"),
    [
        ("pa", "provider"),
        ({"sort": "speed"}, "provider.sort.by"),
        ({"sort": {"by": "price", "partition": "all"}}, "provider.sort.partition"),
        ({"only": "pa"}, "provider.only"),
        ({"only": ["pa", 3]}, "provider.only[1]"),
        ({"allow_fallbacks": "no"}, "provider.allow_fallbacks"),
        ({"max_price": {"prompt": -1}}, "provider.max_price.prompt"),
        ({"max_price": {"request": 1}}, "provider.max_price.request"),
        ({"data_collection": "deny"}, "provider.data_collection"),
    ],
)
def test_malformed_provider_object_is_a_400_naming_the_field(stack: Stack, prefs: Any, param: str):
    a, _, _ = three_hosts(stack)
    resp = chat(stack, prefs)
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert (err["code"], err["param"]) == ("invalid_request", param)
    assert param in err["message"]
    assert not a.requests


def test_only_restricts_the_pool_and_failover_never_leaves_it(stack: Stack):
    a, b, c = three_hosts(stack)
    assert route_of(chat(stack, {"only": ["pc", "PB"]})) == "pb"  # case-insensitive
    b.fail_next(Fault("status", status=503))
    c.fail_next(Fault("status", status=503))
    resp = chat(stack, {"only": ["pb", "pc"]})
    assert resp.status_code == 502
    assert resp.json()["error"]["code"] == "upstream_error"
    assert not a.requests  # the host outside the allowlist was never tried
    resp = chat(stack, {"only": ["nowhere"]})
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "no_allowed_provider"
    assert "not in provider.only" in resp.json()["error"]["message"]


def test_ignore_and_order(stack: Stack):
    _, _, c = three_hosts(stack)
    assert route_of(chat(stack, {"ignore": ["pa"]})) == "pb"
    assert route_of(chat(stack, {"order": ["pc", "pb"]})) == "pc"
    c.fail_next(Fault("status", status=503))
    resp = chat(stack, {"order": ["pc", "pb"]})
    assert route_of(resp) == "pb"  # the next in `order`, not pa by priority
    assert resp.headers["x-fleetgate-attempts"] == "2"
    plan = explain(stack, {"order": ["pc", "pb"], "ignore": ["pb"]})
    assert [c["deployment"] for c in plan["candidates"]] == ["pc", "pa"]


def test_allow_fallbacks_false_tries_only_the_first(stack: Stack):
    a, b, c = three_hosts(stack)
    a.fail_next(Fault("status", status=503))
    resp = chat(stack, {"allow_fallbacks": False})
    assert resp.status_code == 502
    assert resp.headers["x-fleetgate-attempts"] == "1"
    assert not b.requests and not c.requests
    plan = explain(stack, {"allow_fallbacks": False, "order": ["pb"]})
    assert [c["deployment"] for c in plan["candidates"]] == ["pb"]
    assert {(d["deployment"], d["filter"]) for d in plan["dropped"]} == {
        ("pa", "allow_fallbacks"),
        ("pc", "allow_fallbacks"),
    }


def test_max_price_and_quantizations(stack: Stack):
    three_hosts(stack)
    assert route_of(chat(stack, {"max_price": {"prompt": 5}})) == "pb"
    assert route_of(chat(stack, {"max_price": {"prompt": 5, "completion": 2}})) == "pc"
    resp = chat(stack, {"max_price": {"completion": 1}})
    assert resp.json()["error"]["code"] == "no_allowed_provider"
    assert route_of(chat(stack, {"quantizations": ["bf16"]})) == "pb"
    assert route_of(chat(stack, {"quantizations": ["unknown"]})) == "pc"  # none declared
    plan = explain(stack, {"quantizations": ["FP8"]})
    assert [c["deployment"] for c in plan["candidates"]] == ["pa"]
    assert {d["deployment"]: d["reason"] for d in plan["dropped"]}["pb"] == (
        "quantization bf16 not in provider.quantizations"
    )


def test_sort_price_throughput_latency(stack: Stack):
    three_hosts(stack)
    assert route_of(chat(stack, {"sort": "price"})) == "pc"
    state = stack.gateway.pipeline.state
    # nothing measured yet: no preference, priority order stands
    assert route_of(chat(stack, {"sort": "throughput"})) == "pa"
    state.health("pa").tps_ema, state.health("pb").tps_ema = 20.0, 90.0
    state.health("pa").ttft_ema, state.health("pb").ttft_ema = 0.05, 0.9
    for dep in ("pa", "pb"):
        state.health(dep).measured_at = 0.0  # never fade
    state.health("pc").tps_ema = state.health("pc").ttft_ema = None  # unmeasured: the median
    plan = explain(stack, {"sort": "throughput"})  # pc's prior: median(20, 90) = 55 tok/s
    assert [c["deployment"] for c in plan["candidates"]] == ["pb", "pc", "pa"]
    plan = explain(stack, {"sort": {"by": "latency", "partition": "none"}})  # pc: 0.475 s
    assert [c["deployment"] for c in plan["candidates"]] == ["pa", "pc", "pb"]
    assert plan["notes"]["preferences"]["sort"] == {"by": "latency", "partition": "none"}
    assert route_of(chat(stack, {"sort": "throughput"})) == "pb"


def test_model_preferences_combine_with_the_request(stack: Stack):
    three_hosts(stack, {"id": "m", "provider": {"ignore": ["pa"], "sort": "price"}})
    assert route_of(chat(stack)) == "pc"
    assert route_of(chat(stack, {"sort": {"by": "throughput"}})) == "pb"  # request's choice
    resp = chat(stack, {"only": ["pa"]})  # a request cannot undo the model's ignore
    assert resp.json()["error"]["code"] == "no_allowed_provider"


@pytest.mark.parametrize("only", ["pc, pb", '["pc", "pb"]', ' [ "pc" , "pb" ] '])
def test_env_allowlist_in_both_shapes(stack: Stack, monkeypatch, only: str):
    monkeypatch.setenv("FLEETGATE_PROVIDER_ONLY", only)
    monkeypatch.setenv("FLEETGATE_PROVIDER_ORDER", '["pc"]')
    a, _, _ = three_hosts(stack)
    assert route_of(chat(stack)) == "pc"
    assert route_of(chat(stack, {"order": ["pa", "pb"]})) == "pb"  # pa is outside the env's
    assert not a.requests
    plan = explain(stack, {})
    assert plan["notes"]["preferences"]["only"] == ["pb", "pc"]
    assert plan["notes"]["preferences"]["sources"] == ["env"]  # `{}` sets nothing


def test_env_list_parsing():
    assert parse_env_list("a, b,,c ") == ["a", "b", "c"]
    assert parse_env_list('["a", " b"]') == ["a", "b"]
    with pytest.raises(ValueError):
        parse_env_list('["a", 1]')
    with pytest.raises(ValueError):
        parse_env_list("[a, b")


def test_merge_restrictions_combine_and_choices_override():
    env = ProviderPreferences(only=["a", "b", "c"], ignore=["x"], order=["c"])
    model = ProviderPreferences(only=["b", "c"], max_price={"prompt": 5, "completion": 9})
    request = ProviderPreferences(
        only=["a", "c"],
        ignore=["y"],
        max_price={"prompt": 7, "completion": 3},
        allow_fallbacks=False,
        sort="latency",
    )
    eff = merge([("env", env), ("model", model), ("request", request)])
    assert eff.only == {"c"}
    assert eff.ignore == {"x", "y"}
    assert eff.order == ("c",)
    assert (eff.max_prompt_price, eff.max_completion_price) == (5, 3)
    assert eff.allow_fallbacks is False
    assert eff.sort is not None and (eff.sort.by, eff.sort.partition) == ("latency", "model")
    assert eff.sources == ("env", "model", "request")
    assert not merge([("env", None), ("request", ProviderPreferences())]).active
    assert merge([("request", ProviderPreferences(only=[], quantizations=[]))]).only is None


def test_sort_partition_model_keeps_groups_in_place():
    config = fleet_config(
        {
            "providers": [{"id": "p", "base_url": "http://h/v1"}],
            "deployments": [
                {"model": "m", "provider": "p", "id": "m-dear", "price": {"input": 9}},
                {"model": "m", "provider": "p", "id": "m-cheap", "price": {"input": 1}},
            ],
        }
    )
    fleet = build_fleet(config)
    profile = RequestProfile(
        "openai",
        "chat.completions",
        "m",
        False,
        {"messages": MSG},
        preferences=ProviderPreferences(sort="price"),
    )
    plan = build_plan(profile, fleet, MemoryState())
    assert [c.deployment.id for c in plan.candidates] == ["m-cheap", "m-dear"]
    assert plan.notes["preferences"]["sort"] == {"by": "price", "partition": "model"}
    # `only` may name a deployment id as well as a provider id
    profile.preferences = ProviderPreferences(only=["M-Dear"])
    plan = build_plan(profile, fleet, MemoryState())
    assert [c.deployment.id for c in plan.candidates] == ["m-dear"]


SAMPLE = """\
providers:
  - {id: big-gpu, kind: vllm, base_url: "http://10.0.0.1:8000/v1"}
  - {id: small-gpu, kind: llamacpp, base_url: "http://10.0.0.2:8080/v1"}
  - {id: laptop, kind: ollama, base_url: "http://10.0.0.3:11434/v1"}
  - {id: spare, kind: openai, base_url: "http://10.0.0.4:8000/v1"}
deployments:
  - {model: qwen, provider: big-gpu, quantization: bf16}
  - {model: qwen, provider: small-gpu, supported_parameters: [tools, max_tokens]}
  - {model: qwen, provider: laptop, supported_parameters: [tools, max_tokens]}
  - {model: qwen, provider: spare, supported_parameters: [max_tokens, tols]}
models:
  - id: qwen
    provider: {only: [big-gpu, small-gpu, laptop, spare], ignore: [nobody]}
"""


def test_check_reports_the_single_point_of_failure(tmp_path: Path, capsys):
    path = tmp_path / "fleet.yaml"
    path.write_text(SAMPLE)
    assert cli_main(["check", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        "eligible per request shape: plain 4/4, tools 3/4, strict json_schema 1/4, image 0/4" in out
    )
    assert (
        "warning: model qwen: strict json_schema requests have a single point of failure: "
        "only big-gpu/qwen is eligible (1/4)"
    ) in out
    assert "warning: model qwen: no deployment can serve image requests (0/4 eligible)" in out
    assert "deployments[3].supported_parameters[1]" in out  # the typo `tols`
    assert "models[0].provider.ignore[0]: 'nobody' names no provider or deployment" in out


def test_check_rejects_a_malformed_env_list(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setenv("FLEETGATE_PROVIDER_IGNORE", '["spare"')
    path = tmp_path / "fleet.yaml"
    path.write_text(SAMPLE)
    assert cli_main(["check", "--config", str(path)]) == 1
    assert "env.FLEETGATE_PROVIDER_IGNORE: not a valid JSON list" in capsys.readouterr().out


def test_request_record_says_which_hosts_served(stack: Stack, client_for):
    a, b, _ = three_hosts(stack)
    a.fail_next(Fault("status", status=429, retry_after=30))
    raw = client_for(stack).chat.completions.with_raw_response.create(
        model="m", messages=MSG, extra_body={"provider": {"only": ["pa", "pb"]}}
    )
    from tests.test_capability_routing import record

    rec = record(stack, raw.headers["x-request-id"])
    assert rec["deployment_id"] == "pb" and rec["provider_id"] == "pb"
    rows = [
        (t["deployment_id"], t["provider_id"], t["status"], t["quantization"])
        for t in rec["attempts"]
    ]
    assert rows == [("pa", "pa", 429, "fp8"), ("pb", "pb", 200, "bf16")]
    assert rec["attempts"][1]["preferences"] == {
        "sources": ["request"],
        "only": ["pa", "pb"],
        "allow_fallbacks": True,
        "require_parameters": False,
    }
    assert rec["notes"]["preferences"]["only"] == ["pa", "pb"]
    assert len(b.requests) == 1


def test_openai_sdk_rejects_nothing_the_gateway_accepts(stack: Stack, client_for):
    """The SDK passes `provider` through `extra_body`; a 400 surfaces as BadRequestError."""
    three_hosts(stack)
    with pytest.raises(openai.BadRequestError) as err:
        client_for(stack).chat.completions.create(
            model="m", messages=MSG, extra_body={"provider": {"sort": "fastest"}}
        )
    assert err.value.body["param"] == "provider.sort.by"


def test_old_measurements_fade_toward_the_prior():
    config = fleet_config(
        {
            "providers": [{"id": "p", "base_url": "http://h/v1"}],
            "deployments": [{"model": "m", "provider": "p", "id": f"d{i}"} for i in range(4)],
        }
    )
    fleet = build_fleet(config)
    state = MemoryState()
    now = 1_000_000.0
    for dep, ttft in zip(("d0", "d1", "d2", "d3"), (0.01, 0.1, 0.3, 0.5), strict=True):
        state.health(dep).ttft_ema = ttft
        state.health(dep).measured_at = now
        state.health(dep).tried_at = now  # tried just now: none is due for exploration
    profile = RequestProfile(
        "openai",
        "chat.completions",
        "m",
        False,
        {"messages": MSG},
        preferences=ProviderPreferences(sort="latency"),
    )
    order = [c.deployment.id for c in build_plan(profile, fleet, state, now).candidates]
    assert order == ["d0", "d1", "d2", "d3"]
    # d0's measurement is ten half-lives old: it is worth about the median (0.2 s) now
    state.health("d0").measured_at = now - 10 * MEASUREMENT_HALF_LIFE
    order = [c.deployment.id for c in build_plan(profile, fleet, state, now).candidates]
    assert order == ["d1", "d0", "d2", "d3"]


def test_sort_throughput_uses_the_gateways_own_stream_measurements(stack: Stack, client_for):
    slow = stack.engine("slow", tokens_per_second=20, reply_words=8)
    fast = stack.engine("fast", reply_words=8)
    stack.start_gateway(
        {
            "providers": [provider("p-slow", slow), provider("p-fast", fast)],
            "deployments": [deployment("m", "p-slow"), deployment("m", "p-fast", priority=1)],
        }
    )
    client = client_for(stack)
    for name in ("p-slow", "p-fast"):  # one measured stream on each
        stream = client.chat.completions.create(
            model="m", messages=MSG, stream=True, extra_body={"provider": {"only": [name]}}
        )
        assert len(list(stream)) > 8
    state = stack.gateway.pipeline.state
    wait_until(lambda: state.health("p-fast").tps_ema is not None, 5, "fast measured")
    assert state.health("p-fast").tps_ema > state.health("p-slow").tps_ema
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=MSG, extra_body={"provider": {"sort": "throughput"}}
    )
    assert raw.headers["x-fleetgate-route"] == "p-fast"
    raw = client.chat.completions.with_raw_response.create(model="m", messages=MSG)
    assert raw.headers["x-fleetgate-route"] == "p-slow"  # without the sort: priority
