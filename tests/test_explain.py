"""The explain endpoint and CLI print the plan a real request would follow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import yaml

from fleetgate.testing import Fault
from tests.harness import Stack, deployment, provider

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_explain_shows_order_and_dropped_reasons_without_sending(stack: Stack):
    a = stack.engine("a")
    b = stack.engine("b")
    stack.start_gateway(
        {
            "providers": [provider("pa", a), provider("pb", b)],
            "deployments": [deployment("m", "pa", priority=1), deployment("m", "pb", priority=0)],
        }
    )
    plan = httpx.post(stack.url + "/v1/routing/explain", json=BODY).json()
    assert [c["deployment"] for c in plan["candidates"]] == ["pb", "pa"]
    assert plan["resolution"] == "explicit"
    assert a.requests == [] and b.requests == []
    # a 429 puts pb in a cooldown: explain shows it dropped, with the reason
    b.fail_next(Fault("status", status=429, retry_after=30))
    real = httpx.post(stack.url + "/v1/chat/completions", json=BODY)
    assert real.headers["x-fleetgate-route"] == "pa"
    plan = httpx.post(stack.url + "/v1/routing/explain", json=BODY).json()
    assert [c["deployment"] for c in plan["candidates"]] == ["pa"]
    assert plan["dropped"][0]["deployment"] == "pb"
    assert plan["dropped"][0]["filter"] == "availability"
    assert plan["dropped"][0]["reason"].startswith("rate limited for")


def test_explain_of_an_unknown_model_is_the_same_404(stack: Stack):
    a = stack.engine("a")
    stack.start_gateway({"providers": [provider("pa", a)], "deployments": [deployment("m", "pa")]})
    resp = httpx.post(stack.url + "/v1/routing/explain", json={**BODY, "model": "zz"})
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "model_not_found"


def test_explain_cli(tmp_path: Path):
    config = {
        "providers": [
            {"id": "p1", "base_url": "http://127.0.0.1:9/v1"},
            {"id": "p2", "base_url": "http://127.0.0.1:9/v1", "api_key": "${FG_EXPLAIN_UNSET}"},
        ],
        "deployments": [{"model": "m", "provider": "p1"}, {"model": "m", "provider": "p2"}],
    }
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "req.json").write_text(json.dumps(BODY))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "fleetgate",
            "explain",
            "--config",
            str(tmp_path / "fleet.yaml"),
            str(tmp_path / "req.json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert [c["deployment"] for c in plan["candidates"]] == ["p1/m"]
    assert plan["dropped"] == [
        {
            "deployment": "p2/m",
            "filter": "availability",
            "reason": "no credentials (FG_EXPLAIN_UNSET is not set)",
        }
    ]
