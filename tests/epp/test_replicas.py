"""A provider's replicas (`endpoints:`): each one a deployment of its own, in the proxy and
through Envoy; and what `check` and explain say a picker cannot hand to Envoy."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import openai
import yaml

from fleetgate.cli import main as fleetgate
from fleetgate.fleet import build_fleet
from tests.epp.stack import EppStack
from tests.harness import Stack, fleet_config


def _replicated(stack: Stack, names: tuple[str, ...] = ("r1", "r2"), host: str = "") -> dict:
    engines = [stack.engine(n) for n in names]
    endpoints = [f"{host or '127.0.0.1'}:{e.port}" for e in engines]
    return {
        "providers": [
            {
                "id": "pool",
                "kind": "vllm",
                "base_url": "http://replicas.invalid:8000/v1",
                "endpoints": endpoints,
            }
        ],
        "deployments": [{"model": "m", "provider": "pool", "id": "m-pool"}],
    }


# conversations sent to two replicas: each new prompt goes where consistent hashing of its
# key puts it, so all of them land on one replica with a chance of 2 ** (1 - SPREAD) (with
# 8, one run in 128 failed; the replicas' ids carry their ports, which change every run)
SPREAD = 24


def _conversations(url: str, n: int) -> Counter[str]:
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=20)
    served: Counter[str] = Counter()
    for i in range(n):
        system = {"role": "system", "content": f"Conversation {i}. " * 40}
        answer = client.chat.completions.create(
            model="m", messages=[system, {"role": "user", "content": "hi"}], max_tokens=4
        )
        served[answer.system_fingerprint or ""] += 1
    return served


def test_each_endpoint_is_a_deployment_of_its_own(stack: Stack):
    config = _replicated(stack)
    fleet = build_fleet(fleet_config(config))
    ports = [e.port for e in stack.engines.values()]
    assert sorted(fleet.deployments) == sorted(f"m-pool@127.0.0.1:{p}" for p in ports)
    assert [d.model for d in fleet.deployments.values()] == ["m", "m"]


def test_the_proxy_balances_over_the_replicas(stack: Stack):
    stack.start_gateway(_replicated(stack))
    served = _conversations(stack.url, SPREAD)
    assert set(served) == {"fake-r1", "fake-r2"}, served


def test_envoy_balances_over_the_replicas(stack: Stack, epp: EppStack):
    envoy = epp.start(_replicated(stack))
    served = _conversations(envoy.url, SPREAD)
    assert set(served) == {"fake-r1", "fake-r2"}, served


def test_a_replica_name_is_resolved_to_its_addresses(stack: Stack, epp: EppStack):
    """`localhost:PORT` names the engine by DNS: the picker hands Envoy the address it
    resolves to, and the fleet lists the replica by that address."""
    envoy = epp.start(_replicated(stack, ("r1",), host="localhost"))
    served = _conversations(envoy.url, 2)
    assert served == {"fake-r1": 2}
    assert stack.gateway is not None
    port = stack.engines["r1"].port
    assert list(stack.gateway.pipeline.holder.fleet.deployments) == [f"m-pool@127.0.0.1:{port}"]


def _mixed(stack: Stack) -> dict[str, Any]:
    local = stack.engine("local")
    return {
        "providers": [
            {"id": "local", "kind": "vllm", "base_url": local.url + "/v1"},
            {
                "id": "hosted",
                "kind": "openai",
                "base_url": "https://api.example.com/v1",
                "api_key": "sk-not-real",
            },
        ],
        "deployments": [
            {"model": "m", "provider": "local", "id": "m-local"},
            {"model": "m", "provider": "hosted", "id": "m-hosted"},
        ],
    }


def test_check_says_which_deployments_stay_with_the_proxy(
    stack: Stack, tmp_path: Path, capsys: Any
):
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(_mixed(stack)))
    assert fleetgate(["check", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    hosted = out[out.index("m-hosted") :]
    assert "proxy only" in hosted and "credentials" in hosted
    local = out[out.index("m-local") : out.index("m-hosted")]
    assert "proxy only" not in local


def test_explain_and_the_picker_agree_on_what_stays_with_the_proxy(stack: Stack, epp: EppStack):
    envoy = epp.start(_mixed(stack))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    plan = httpx.post(envoy.url + "/v1/routing/explain", json=body).json()
    assert plan["proxy_only"] == {
        "m-hosted": "its provider needs credentials, which only the proxy sends"
    }
    # through Envoy the local engine serves: the hosted API is never handed over
    answer = httpx.post(envoy.url + "/v1/chat/completions", json=body, timeout=20)
    assert answer.status_code == 200
    assert answer.json()["system_fingerprint"] == "fake-local"


def test_a_provider_that_needs_credentials_after_a_swap_stays_with_the_proxy(
    stack: Stack, epp: EppStack
):
    """What the picker can hand to the data plane is judged again for each new fleet."""
    engine = stack.engine("e")
    config = {
        "providers": [{"id": "e", "kind": "vllm", "base_url": engine.url + "/v1"}],
        "deployments": [{"model": "m", "provider": "e", "id": "e"}],
    }
    envoy = epp.start(config)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(envoy.url + "/v1/chat/completions", json=body).status_code == 200
    config["providers"][0]["api_key"] = "sk-upstream"
    assert epp.picker is not None
    epp.picker.pipeline.holder.swap(build_fleet(fleet_config(config)))
    refused = httpx.post(envoy.url + "/v1/chat/completions", json=body)
    assert refused.status_code == 503
    assert "credentials" in refused.json()["error"]["message"]
