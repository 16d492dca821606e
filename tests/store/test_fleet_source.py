"""`storage.fleet_source`: the fleet file is applied when it changed, never silently ignored;
`fleetgate diff` shows file against store without applying anything."""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetgate.cli import main
from tests.admin.helpers import admin, options, two_tier_fleet
from tests.cluster.test_replicas import _options
from tests.harness import LoopThread, Stack, wait_until

CONTROL = "fleetgate.control"


def _edited(config: dict[str, Any]) -> dict[str, Any]:
    """The file after an operator's edit: pb's window changes, model m gets a new text."""
    out = copy.deepcopy(config)
    out["deployments"][1]["context_window"] = 50_000
    out["models"][0]["description"] = "edited in the file"
    return out


def _restart(
    stack: Stack, config: dict[str, Any], db_url: str, caplog: pytest.LogCaptureFixture
) -> Any:
    stack.stop_gateway()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=CONTROL):
        return stack.start_gateway(config, options(db_url))


def test_an_unchanged_file_changes_nothing(
    stack: Stack, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = two_tier_fleet(stack)
    version = stack.start_gateway(config, options(db_url)).pipeline.holder.fleet.version
    gw = _restart(stack, config, db_url, caplog)
    assert gw.pipeline.holder.fleet.version == version
    assert "applied" not in caplog.text and "runtime edits" not in caplog.text
    assert admin(stack).get("/admin/status").json()["fleet_source"] == "file"


def test_a_changed_file_is_applied_and_summarised(
    stack: Stack, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = two_tier_fleet(stack)
    version = stack.start_gateway(config, options(db_url)).pipeline.holder.fleet.version
    gw = _restart(stack, _edited(config), db_url, caplog)
    fleet = gw.pipeline.holder.fleet
    assert fleet.deployments["pb"].context_window == 50_000
    assert fleet.version == version + 1  # one change, as an admin edit would be
    assert admin(stack).get("/admin/models/m").json()["description"] == "edited in the file"
    lines = [r.getMessage() for r in caplog.records if "applied the changed" in r.getMessage()]
    assert lines == [
        f"applied the changed fleet file (config version {version + 1}): changed "
        "deployments/pb, models/m; it replaced no runtime edits"
    ]
    # the config history has it, as it has every change
    latest, seeded = admin(stack).get("/admin/config/history").json()["data"]
    assert (latest["version"], seeded["version"]) == (version + 1, version)
    assert latest["events"] == [
        {"type": "file_applied", "message": "applied the changed fleet file"}
    ]
    assert latest["changes"] == [
        {"kind": "deployments", "id": "pb", "action": "changed"},
        {"kind": "models", "id": "m", "action": "changed"},
    ]
    # the next start with the same (now applied) file changes nothing more
    assert (
        _restart(stack, _edited(config), db_url, caplog).pipeline.holder.fleet.version
        == version + 1
    )


def test_a_changed_file_replaces_admin_edits_and_says_which(
    stack: Stack, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = two_tier_fleet(stack)
    stack.start_gateway(config, options(db_url))
    api = admin(stack)
    assert api.patch("/admin/deployments/pa", json={"priority": 7}).is_success
    assert api.post("/admin/models", json={"id": "extra"}).status_code == 201
    assert api.patch("/admin/deployments/pb", json={"context_window": 50_000}).is_success

    # with the same file the admin edits survive a restart...
    gw = _restart(stack, config, db_url, caplog)
    assert gw.pipeline.holder.fleet.deployments["pa"].priority == 7
    assert (
        "the store keeps its runtime edits (changed deployments/pa, deployments/pb; "
        "added models/extra)" in caplog.text
    )

    # ...and a changed file replaces them: the fleet is the file's
    gw = _restart(stack, _edited(config), db_url, caplog)
    fleet = gw.pipeline.holder.fleet
    assert fleet.deployments["pa"].priority == 0
    assert fleet.deployments["pb"].context_window == 50_000
    assert [m["id"] for m in admin(stack).get("/admin/models").json()["data"]] == ["m"]
    line = next(r.getMessage() for r in caplog.records if "applied the" in r.getMessage())
    assert line.endswith(
        "changed deployments/pa, models/m; removed models/extra; it replaced these runtime "
        "edits: changed deployments/pa; added models/extra"
    ), line  # pb's edit matched the file's, so it was not replaced


def test_fleet_source_store_keeps_the_store_and_points_at_diff(
    stack: Stack, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = {**two_tier_fleet(stack), "storage": {"fleet_source": "store"}}
    version = stack.start_gateway(config, options(db_url)).pipeline.holder.fleet.version
    gw = _restart(stack, _edited(config), db_url, caplog)
    assert gw.pipeline.holder.fleet.version == version
    assert gw.pipeline.holder.fleet.deployments["pb"].context_window == 100_000
    assert "storage.fleet_source is `store`" in caplog.text
    assert "`fleetgate diff --config FILE` shows how" in caplog.text


def test_a_store_seeded_without_a_record_of_its_file(
    stack: Stack, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A store seeded before the file was recorded: a differing file is applied, and the
    log says it cannot tell runtime edits from file edits."""
    config = two_tier_fleet(stack)
    gw = stack.start_gateway(config, options(db_url))
    control = gw.control
    assert control is not None
    stack.lt.run(
        control.db.transaction(
            lambda conn: conn.execute("DELETE FROM store_meta WHERE \"key\" = 'fleet_file'")
        )
    )
    gw = _restart(stack, _edited(config), db_url, caplog)
    assert gw.pipeline.holder.fleet.deployments["pb"].context_window == 50_000
    assert "kept no record of the file it was seeded from" in caplog.text


@pytest.fixture
def replica_b(loop_thread: LoopThread) -> Iterator[Stack]:
    s = Stack(loop_thread)
    yield s
    s.close()


def test_a_replica_applying_a_changed_file_tells_the_running_ones(
    stack: Stack, replica_b: Stack, pg_url: str, redis_url: str, redis_namespace: str
) -> None:
    opts = _options(pg_url, redis_url, redis_namespace)
    config = two_tier_fleet(stack)
    a = stack.start_gateway(config, opts)
    a.control.options.poll_interval = 3600.0  # type: ignore[union-attr]  # Redis only
    replica_b.engines = {}
    replica_b.start_gateway(_edited(config), opts)
    wait_until(
        lambda: a.pipeline.holder.fleet.deployments["pb"].context_window == 50_000, 5, "A sees it"
    )


# ---- fleetgate diff ---------------------------------------------------------------------


def _diff(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["diff", "--config", str(path)])
    return code, capsys.readouterr().out


def _write(tmp_path: Path, config: dict[str, Any]) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_diff_shows_file_against_store_and_applies_nothing(
    stack: Stack,
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("FLEETGATE_DATABASE_URL", db_url)
    config = two_tier_fleet(stack)
    config["providers"][0]["api_key"] = "sk-literal-old"
    path = _write(tmp_path, config)

    # a store never used: serve would seed it
    code, out = _diff(path, capsys)
    assert code == 1
    assert "the store is empty: `fleetgate serve` seeds it from this file." in out
    assert "+ providers/pa  (in the file, not in the store)" in out

    # seeded by serve, same file: nothing to show
    stack.start_gateway(config, options(db_url))
    code, out = _diff(path, capsys)
    assert code == 0, out
    assert "unchanged since it was last applied" in out and "no differences." in out

    # admin edits since the last start: shown as runtime edits, kept by serve
    api = admin(stack)
    assert api.patch("/admin/deployments/pa", json={"priority": 7}).is_success
    code, out = _diff(path, capsys)
    assert code == 1
    assert "~ deployments/pa  [runtime edit since the file was last applied]" in out
    assert "    priority: 7 -> (unset)" in out
    assert "keeps the store, runtime edits included" in out

    # a changed file: field by field, secrets masked, and nothing applied
    edited = _edited(config)
    edited["providers"][0]["api_key"] = "sk-literal-new"
    path = _write(tmp_path, edited)
    before = api.get("/admin/deployments").json()
    code, out = _diff(path, capsys)
    assert code == 1
    assert "the file changed since it was last applied: `fleetgate serve` applies it" in out
    assert "~ deployments/pb\n    context_window: 100000 -> 50000" in out
    assert '    description: "two windows" -> "edited in the file"' in out
    assert "~ providers/pa\n    a literal secret changed (values not shown)" in out
    assert "sk-literal" not in out
    assert "4 difference(s) (store -> file)." in out
    assert api.get("/admin/deployments").json() == before


def test_diff_says_what_is_wrong_with_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FLEETGATE_DATABASE_URL", "mysql://u:secret@db/fleet")
    path = _write(tmp_path, {"providers": [{"id": "p", "base_url": "http://127.0.0.1:9/v1"}]})
    assert main(["diff", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "database URL mysql://…" in err and "secret" not in err
