"""Config validation names every problem by path and line; the fleet swaps atomically."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from fleetgate.config import ConfigError, check_config_text, load_config_text
from fleetgate.fleet import build_fleet
from tests.harness import Stack, deployment, fleet_config, provider

BAD = """\
providers:
  - id: p1
    base_url: http://127.0.0.1:1/v1
  - id: p2
    kind: nonsense
    base_url: ftp://x
deployments:
  - model: m
    provider: p1
  - model: m
    provider: p1
    upstream_model: other
  - model: m
    provider: p1
    context_window: -5
  - model: m2
    provider: missing
"""


def test_every_schema_problem_is_reported_with_path_and_line():
    problems = {(p.path, p.line): p.message for p in check_config_text(BAD)}
    assert problems[("deployments[2].context_window", 15)] == "must be a positive integer"
    assert ("providers[1].kind", 5) in problems
    assert "http" in problems[("providers[1].base_url", 6)]


def test_reference_problems_are_reported_after_the_schema_passes():
    text = BAD.replace("    context_window: -5\n", "").replace("    kind: nonsense\n", "")
    text = text.replace("ftp://x", "http://x")
    problems = [str(p) for p in check_config_text(text)]
    assert any("deployments[3].provider: unknown provider 'missing'" in p for p in problems)
    with pytest.raises(ConfigError) as info:
        load_config_text(text)
    assert "unknown provider 'missing'" in str(info.value)


def test_duplicate_deployment_ids_are_rejected():
    text = """
providers: [{id: p, base_url: "http://h/v1"}]
deployments:
  - {model: m, provider: p}
  - {model: m, provider: p}
"""
    problems = [str(p) for p in check_config_text(text)]
    assert problems == ["line 5: deployments[1].id: duplicate deployment id 'p/m'"]


def test_unknown_fields_are_rejected():
    problems = [
        str(p)
        for p in check_config_text("providers: [{id: p, base_url: 'http://h', timeout: 3}]\n")
    ]
    assert problems and "providers[0].timeout: unknown field" in problems[0]


def test_env_reference_for_api_key(monkeypatch: pytest.MonkeyPatch):
    text = """
providers: [{id: p, base_url: "http://h/v1", api_key: "${FG_TEST_KEY}"}]
deployments: [{model: m, provider: p}]
"""
    monkeypatch.delenv("FG_TEST_KEY", raising=False)
    warnings = check_config_text(text)
    assert [w.severity for w in warnings] == ["warning"]
    fleet = build_fleet(load_config_text(text))
    assert not fleet.providers["p"].has_credentials
    monkeypatch.setenv("FG_TEST_KEY", "sk-secret")
    fleet = build_fleet(load_config_text(text))
    assert fleet.providers["p"].api_key == "sk-secret"
    bad = text.replace("${FG_TEST_KEY}", "prefix-${FG_TEST_KEY}")
    assert "exactly ${NAME}" in str(check_config_text(bad)[0])


def test_missing_credentials_drop_the_deployment_with_a_reason(stack: Stack, monkeypatch):
    monkeypatch.delenv("FG_MISSING_KEY", raising=False)
    a = stack.engine("a")
    stack.start_gateway(
        {
            "providers": [provider("pa", a, api_key="${FG_MISSING_KEY}")],
            "deployments": [deployment("m", "pa")],
        }
    )
    resp = httpx.post(
        stack.url + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
    )
    assert resp.status_code == 503
    err = resp.json()["error"]
    assert err["code"] == "no_route"
    assert "availability" in err["message"] and "FG_MISSING_KEY is not set" in err["message"]


def test_api_key_is_sent_upstream(stack: Stack, monkeypatch):
    monkeypatch.setenv("FG_UP_KEY", "sk-upstream")
    a = stack.engine("a")
    stack.start_gateway(
        {
            "providers": [provider("pa", a, api_key="${FG_UP_KEY}", headers={"X-Org": "o1"})],
            "deployments": [deployment("m", "pa")],
        }
    )
    httpx.post(
        stack.url + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
    )
    headers = a.requests[-1].headers
    assert headers["Authorization"] == "Bearer sk-upstream"
    assert headers["X-Org"] == "o1"


def test_fleet_swap_changes_routing_for_the_next_request(stack: Stack):
    a = stack.engine("a")
    b = stack.engine("b")
    gateway = stack.start_gateway(
        {
            "providers": [provider("pa", a), provider("pb", b)],
            "deployments": [deployment("m", "pa")],
        }
    )
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    assert (
        httpx.post(stack.url + "/v1/chat/completions", json=body).headers["x-fleetgate-route"]
        == "pa"
    )
    gateway.pipeline.holder.swap(
        build_fleet(
            fleet_config(
                {
                    "providers": [provider("pa", a), provider("pb", b)],
                    "deployments": [deployment("m", "pb")],
                }
            )
        )
    )
    assert (
        httpx.post(stack.url + "/v1/chat/completions", json=body).headers["x-fleetgate-route"]
        == "pb"
    )


def run_cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleetgate", *args],
        capture_output=True,
        text=True,
        input=stdin.decode() if stdin else None,
        timeout=60,
    )


def test_check_command_prints_every_problem_with_location(tmp_path: Path):
    path = tmp_path / "fleet.yaml"
    path.write_text(BAD)
    result = run_cli("check", "--config", str(path))
    assert result.returncode == 1
    assert f"{path}:15: error: deployments[2].context_window: must be a positive integer" in (
        result.stdout
    )
    good = tmp_path / "good.yaml"
    good.write_text(
        "providers: [{id: p, base_url: 'http://h/v1'}]\n"
        "deployments: [{model: m, provider: p, context_window: 4096}]\n"
    )
    result = run_cli("check", "--config", str(good))
    assert result.returncode == 0, result.stderr
    assert "ok: 1 provider(s), 1 deployment(s), 1 model(s)" in result.stdout
