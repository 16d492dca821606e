"""The code base stays ruff clean (the same check a reviewer runs)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_check_is_clean():
    ruff = shutil.which("ruff")
    assert ruff, "ruff is part of the test extra; install with pip install -e '.[test]'"
    result = subprocess.run(
        [ruff, "check", "src", "tests", "benchmarks", "scripts"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean():
    ruff = shutil.which("ruff")
    assert ruff
    result = subprocess.run(
        [ruff, "format", "--check", "src", "tests", "benchmarks", "scripts"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
