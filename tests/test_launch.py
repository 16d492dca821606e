"""`fleetgate.launch`, the command's entry point: the cyclic collector is off while the
command starts, and on again for the command's own work (a long-lived `serve` or `demo`
that never collected would keep every cycle it ever made)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.test_serve import checkout_env


def run_python(code: str, tmp_path: Path) -> list[str]:
    """What `code` printed, word by word, run in a fresh interpreter on this checkout."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=checkout_env(tmp_path),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_command_runs_with_the_collector_on(tmp_path: Path):
    config = tmp_path / "fleet.yaml"
    config.write_text(yaml.safe_dump({"providers": [], "deployments": []}))
    out = run_python(
        "import gc, sys\n"
        "import fleetgate.launch as launch\n"
        "print(gc.isenabled())\n"
        f"launch.main(['check', '--config', {str(config)!r}])\n"
        "print(gc.isenabled())\n",
        tmp_path,
    )
    assert out[0] == "False"  # while the command's modules were imported
    assert out[-1] == "True"


def test_serve_turns_the_collector_on_once_start_up_is_frozen(tmp_path: Path):
    out = run_python(
        "import gc\n"
        "import fleetgate.launch\n"
        "from fleetgate.gc_tuning import tune_gc\n"
        "print(gc.isenabled())\n"
        "tune_gc()\n"
        "print(gc.isenabled(), gc.get_freeze_count() > 0)\n",
        tmp_path,
    )
    assert out == ["False", "True", "True"]
