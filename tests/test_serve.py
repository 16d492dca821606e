"""`fleetgate serve` runs the gateway from a config file, with one or several workers."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.harness import Stack, wait_until

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_model_config(stack: Stack, tmp_path: Path) -> Path:
    """A fleet file: model `m` on fake engine `a` (upstream name `up`)."""
    config = {
        "providers": [{"id": "p", "kind": "vllm", "base_url": stack.engine("a").url + "/v1"}],
        "deployments": [{"model": "m", "provider": "p", "upstream_model": "up"}],
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def checkout_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment for a `fleetgate` subprocess: this checkout's code, a fresh store."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        "FLEETGATE_DATA_DIR": str(tmp_path / "data"),
        **extra,
    }


def ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


@contextlib.contextmanager
def serving(
    stack: Stack, tmp_path: Path, *args: str, command: list[str] | None = None, **env: str
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`fleetgate serve` (or `command`) on the one-model fleet file with this checkout's
    code and a fresh store: yields its URL and process once ready; leaving stops it with
    SIGTERM, which must end it with status 0."""
    path = one_model_config(stack, tmp_path)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = ["serve", "--config", str(path), "--port", str(port), *args]
    proc = subprocess.Popen(
        [*(command or [sys.executable, "-m", "fleetgate"]), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=checkout_env(tmp_path, **env),
    )
    try:
        wait_until(lambda: ready(url), 30, "gateway ready")
        yield url, proc
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, proc.stdout.read() if proc.stdout else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def chat(url: str) -> httpx.Response:
    """One small chat request for model `m`."""
    return httpx.post(
        url + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
        timeout=10,
    )


@pytest.mark.parametrize("workers", [1, 2])
def test_serve_from_config_file(stack: Stack, tmp_path: Path, workers: int):
    with serving(stack, tmp_path, "--workers", str(workers)) as (url, _):
        resp = chat(url)
        assert resp.status_code == 200
        assert resp.json()["model"] == "m"
        assert stack.engines["a"].requests[-1].body["model"] == "up"


def test_serve_refuses_an_invalid_config(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text("deployments: [{model: m, provider: nowhere}]\n")
    result = subprocess.run(
        [sys.executable, "-m", "fleetgate", "serve", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "deployments[0].provider: unknown provider 'nowhere'" in result.stderr


def _serve_with_store(
    tmp_path: Path, url: str, workers: int = 1
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "providers: [{id: p, base_url: 'http://127.0.0.1:9/v1'}]\n"
        "deployments: [{model: m, provider: p}]\n"
    )
    argv = ["serve", "--config", str(path), "--port", "0", "--workers", str(workers)]
    return subprocess.run(
        [sys.executable, "-m", "fleetgate", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=checkout_env(tmp_path, FLEETGATE_DATABASE_URL=url),
    )


@pytest.mark.parametrize("workers", [1, 2])
def test_serve_refuses_an_unsupported_database_url(tmp_path: Path, workers: int):
    result = _serve_with_store(tmp_path, "mysql://u:secret@db/fleet", workers)
    assert result.returncode == 1
    assert "database URL mysql://…" in result.stderr
    assert "sqlite:///PATH" in result.stderr and "FLEETGATE_DATABASE_URL" in result.stderr
    assert "secret" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("workers", [1, 2])
def test_serve_says_which_store_it_cannot_open(tmp_path: Path, workers: int):
    port = free_port()  # nothing listens there
    url = f"postgresql://fleet:secret@127.0.0.1:{port}/fleet"
    result = _serve_with_store(tmp_path, url, workers)
    assert result.returncode != 0
    assert f"cannot open the store at postgresql+psycopg://fleet:***@127.0.0.1:{port}/fleet" in (
        result.stderr
    )
    assert "Check that the database is running" in result.stderr
    assert "secret" not in result.stderr and "Traceback" not in result.stderr
