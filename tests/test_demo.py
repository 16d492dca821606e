"""`fleetgate demo` starts a simulated fleet, answers, and shows a fallback."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai

from tests.harness import wait_until


def _checkout_env() -> dict[str, str]:
    """Run this checkout's fleetgate in the subprocess, whatever is installed."""
    src = str(Path(__file__).resolve().parents[1] / "src")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}


def test_demo_serves_and_shows_a_fallback():
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetgate", "demo", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_checkout_env(),
    )
    try:
        lines = []
        deadline = time.monotonic() + 30
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "Ctrl-C stops the demo" in line:
                break
        out = "".join(lines)
        assert "Ctrl-C stops the demo" in out, out
        assert "answered by steady (attempts 2" in out and "fallback" in out
        assert "prompt -> 200, answered by long" in out  # the long-context tier
        assert "support-bot (virtual) -> 200, answered by steady" in out
        base = re.search(r"gateway on (http://127\.0\.0\.1:\d+)", out).group(1)
        client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
        seen = set()
        for _ in range(4):
            raw = client.chat.completions.with_raw_response.create(
                model="demo-chat", messages=[{"role": "user", "content": "hi"}]
            )
            assert raw.parse().model == "demo-chat"
            seen.add(raw.headers["x-fleetgate-fallback-count"])
        assert seen == {"0", "1"}
        assert client.embeddings.create(model="demo-embed", input="x").data
        # the admin API runs on the demo's SQLite store, with the key it printed
        key = re.search(r"Bearer (fg-admin-[\w-]+)", out).group(1)
        assert f"The dashboard: {base}/ui  (sign in with the admin key {key})" in out
        assert httpx.get(base + "/ui", timeout=10).status_code == 200

        def logged() -> list[object]:
            # the log is written in background batches: the rows come a moment after the
            # answers, later on a busy machine
            resp = httpx.get(
                base + "/admin/requests", headers={"Authorization": f"Bearer {key}"}, timeout=10
            )
            assert resp.status_code == 200, resp.text
            return list(resp.json()["data"])

        wait_until(lambda: bool(logged()), 15, "the demo's requests in the admin log")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
