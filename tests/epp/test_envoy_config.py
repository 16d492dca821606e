"""`fleetgate envoy-config`: Envoy itself accepts what it prints (`--mode validate`), for both
body modes, and it names only the endpoints a picker can hand over."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetgate.cli import main as fleetgate
from fleetgate.epp.local_replies import ENVOY_REPLIES, local_reply_config
from fleetgate.epp.protocol import BODY_MODES
from fleetgate.ingress.routes import INGRESS_ROUTES, error_protocol
from tests.epp.envoy import envoy_binary

FLEET: dict[str, Any] = {
    "providers": [
        {"id": "local", "kind": "vllm", "base_url": "http://10.1.2.3:8000/v1"},
        {
            "id": "pool",
            "kind": "vllm",
            "base_url": "http://vllm:8000/v1",
            "endpoints": ["10.1.2.4:8000", "10.1.2.5:8000"],
            "timeouts": {"connect": 2, "first_byte": 30, "total": 900},
        },
        {
            "id": "hosted",
            "kind": "openai",
            "base_url": "https://api.example.com/v1",
            "api_key": "sk-not-real",
        },
    ],
    "deployments": [
        {"model": "m", "provider": "local", "id": "m-local"},
        {"model": "m", "provider": "pool", "id": "m-pool"},
        {"model": "m", "provider": "hosted", "id": "m-hosted"},
    ],
}


def _print(tmp_path: Path, capsys: Any, *extra: str) -> str:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(FLEET))
    argv = ["envoy-config", "--config", str(path), "--epp", "10.0.0.9:9002"]
    assert fleetgate([*argv, "--listen", "0.0.0.0:10000", *extra]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("mode", BODY_MODES)
def test_envoy_accepts_the_bootstrap(tmp_path: Path, capsys: Any, mode: str):
    text = _print(tmp_path, capsys, "--body-mode", mode)
    path = tmp_path / "envoy.yaml"
    path.write_text(text)
    result = subprocess.run(
        [envoy_binary(), "--mode", "validate", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout + result.stderr


def test_the_bootstrap_names_what_the_picker_can_hand_over(tmp_path: Path, capsys: Any):
    boot = yaml.safe_load(_print(tmp_path, capsys))
    clusters = {c["name"]: c for c in boot["static_resources"]["clusters"]}
    endpoints = clusters["fleetgate_endpoints"]["load_assignment"]["endpoints"][0]
    addresses = [
        (e["endpoint"]["address"]["socket_address"]["address"],) for e in endpoints["lb_endpoints"]
    ]
    # the replicas each, the local engine; never the hosted API
    assert sorted(addresses) == [("10.1.2.3",), ("10.1.2.4",), ("10.1.2.5",)]
    hcm = boot["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    filters = {f["name"]: f["typed_config"] for f in hcm["typed_config"]["http_filters"]}
    pick = filters["envoy.filters.http.ext_proc"]
    assert pick["failure_mode_allow"] is False and pick["status_on_error"] == {"code": 503}
    assert filters["fleetgate.observe"]["observability_mode"] is True
    # the largest of the providers' (the local engine's default 5 s over the pool's 2 s)
    assert clusters["fleetgate_endpoints"]["connect_timeout"] == "5.000s"


def test_envoy_s_own_answers_take_the_shape_of_each_path_s_protocol():
    """Each proxied path gets the error shape its clients expect, as the proxy shapes it."""
    mappers = local_reply_config()["mappers"]
    assert len(mappers) == 3 * len(ENVOY_REPLIES)
    for path in INGRESS_ROUTES:
        for reply in ENVOY_REPLIES:
            own = [m for m in mappers if reply.filter in _filters(m)]
            chosen = next(m for m in own if _on_path(m) is None or re.match(_on_path(m), path))
            body = chosen["body_format_override"]["json_format"]
            protocol = error_protocol(path)
            if protocol == "ollama":
                assert isinstance(body["error"], str), path
            elif protocol == "anthropic":
                assert body["type"] == "error" and body["error"]["type"], path
            else:
                assert body["error"]["code"] == reply.code, path


def _filters(mapper: dict[str, Any]) -> list[dict[str, Any]]:
    match = mapper["filter"]
    return match["and_filter"]["filters"] if "and_filter" in match else [match]


def _on_path(mapper: dict[str, Any]) -> str | None:
    for f in _filters(mapper):
        if "header_filter" in f:
            return str(f["header_filter"]["header"]["string_match"]["safe_regex"]["regex"])
    return None
