"""The command line says what it works on, in units people read, and warns only about what
the fleet means to serve."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fleetgate.cli import main


def test_keys_without_a_config_refuses_to_make_a_new_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # another directory, with no store in it
    monkeypatch.delenv("FLEETGATE_DATABASE_URL", raising=False)
    monkeypatch.delenv("FLEETGATE_DATA_DIR", raising=False)
    assert main(["keys", "create", "--name", "x"]) == 1
    captured = capsys.readouterr()
    assert "no store to use" in captured.err and "--config" in captured.err
    assert captured.out == ""  # no secret printed
    assert not (tmp_path / "data").exists()  # and no store made


def test_keys_say_which_store_and_spend_in_its_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({"storage": {"data_dir": str(store)}}))
    monkeypatch.delenv("FLEETGATE_DATABASE_URL", raising=False)
    monkeypatch.delenv("FLEETGATE_DATA_DIR", raising=False)
    assert main(["keys", "create", "--config", str(path), "--name", "x", "--budget", "5"]) == 0
    assert f"store: sqlite:///{store.resolve()}/fleetgate.db" in capsys.readouterr().err
    # without --config, from elsewhere: the store the environment names, said so
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLEETGATE_DATA_DIR", str(store))
    assert main(["keys", "list"]) == 0
    captured = capsys.readouterr()
    assert f"store: sqlite:///{store.resolve()}/fleetgate.db" in captured.err
    assert "of budget 5" in captured.out
    assert "in the unit of the deployments' `price` (per million tokens)" in captured.out


def test_spend_is_written_without_an_exponent() -> None:
    from fleetgate.commands.keys import amount

    assert amount(4.2e-06) == "0.0000042"
    assert amount(0.5) == "0.5" and amount(0) == "0" and amount(12.5) == "12.5"


def _check(tmp_path: Path, capsys: pytest.CaptureFixture[str], fleet: dict) -> str:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet))
    assert main(["check", "--config", str(path)]) == 0
    return capsys.readouterr().out


def test_check_warns_about_images_only_for_a_fleet_that_serves_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = {
        "providers": [
            {"id": "gpu-a", "kind": "llamacpp", "base_url": "http://10.0.0.1:8080/v1"},
            {"id": "gpu-b", "kind": "llamacpp", "base_url": "http://10.0.0.2:8080/v1"},
            {"id": "hosted", "kind": "openrouter", "base_url": "https://openrouter.ai/api/v1"},
        ],
        "deployments": [
            {"id": "a", "model": "m", "provider": "gpu-a"},
            {"id": "b", "model": "m", "provider": "gpu-b"},
            {"id": "h", "model": "m", "provider": "hosted", "priority": 1},
        ],
    }
    out = _check(tmp_path, capsys, fleet)
    assert "image 1/3" in out  # said, as a count
    assert "image requests" not in out  # but not warned about: nobody declared images
    fleet["deployments"][2]["modalities"] = ["text", "image"]
    out = _check(tmp_path, capsys, fleet)
    assert "warning: model m: image requests have a single point of failure: only h" in out
