"""The example fleet in examples/ is valid as it stands: `fleetgate check` accepts it whole,
with no warning, and it holds every part the docs point to it for."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fleetgate.cli import main

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fleet.yaml"


def test_fleetgate_check_accepts_the_example_fleet(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("FLEETGATE_ADMIN_KEY", "an-admin-key-of-enough-length-0123456789")
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-example")
    monkeypatch.setenv("FLEETGATE_DATA_DIR", str(tmp_path))  # a store with no key yet
    assert main(["check", "--config", str(EXAMPLE)]) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.out.splitlines() if "warning" in line]
    # the one warning a fresh copy gets: no client key yet (the first `keys create` ends it)
    assert len(warnings) == 1 and "the store holds no active client key" in warnings[0]
    assert captured.err == ""
    assert "ok: 4 provider(s), 4 deployment(s), 1 model(s)" in captured.out
    assert "virtual model support-bot" in captured.out and "tier careful" in captured.out


def test_the_example_has_every_part_it_promises() -> None:
    fleet = yaml.safe_load(EXAMPLE.read_text())
    assert fleet["auth"]["enabled"] is True and fleet["admin"]["key"].startswith("${")
    kinds = {p["kind"] for p in fleet["providers"]}
    assert {"llamacpp", "vllm", "openrouter"} <= kinds
    assert {d.get("tier", "default") for d in fleet["deployments"]} == {"default", "long"}
    priced = [d for d in fleet["deployments"] if d.get("price")]
    assert [d["provider"] for d in priced] == ["openrouter"]
    assert fleet["virtual_models"] and fleet["tiers"]
    engines = [p for p in fleet["providers"] if p["kind"] in ("llamacpp", "vllm")]
    assert all(p.get("discovery") is True for p in engines)
