"""The serving process runs the store on SQLAlchemy Core alone: `sqlalchemy.ext.asyncio`
always imports the ORM (~8 MB resident), which a gateway with a peak-RSS budget of 80 MB
cannot afford. (Alembic, imported only to upgrade an older store, may import it.)"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.harness import Stack, wait_until
from tests.test_serve import checkout_env, free_port, one_model_config, ready

ADMIN_KEY = "admin-secret"
FORBIDDEN = ("sqlalchemy.orm", "sqlalchemy.ext.asyncio", "aiosqlite", "asyncpg", "greenlet")

# `fleetgate serve` as the console script runs it, writing its modules out when it exits
_SERVE = """
import atexit, json, sys
atexit.register(lambda: open(sys.argv[1], "w").write(json.dumps(sorted(sys.modules))))
from fleetgate.cli import main
raise SystemExit(main(sys.argv[2:]))
"""


def test_fleetgate_serve_never_imports_the_orm(stack: Stack, tmp_path: Path) -> None:
    path = one_model_config(stack, tmp_path)
    modules = tmp_path / "modules.json"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = ["serve", "--config", str(path), "--port", str(port)]
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVE, str(modules), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=checkout_env(tmp_path, FLEETGATE_ADMIN_KEY=ADMIN_KEY),  # a fresh SQLite store
    )
    try:
        wait_until(lambda: ready(url), 30, "gateway ready")
        resp = httpx.post(
            url + "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
        )
        assert resp.status_code == 200
        admin = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=10
        )
        # the request log wrote its row; the admin API read the store
        wait_until(
            lambda: admin.get("/admin/status").json()["records_written"] >= 1, 10, "row written"
        )
        assert admin.get("/admin/status").json()["database"] == "sqlite"
        assert admin.get("/admin/requests").json()["data"][0]["requested_model"] == "m"
        assert admin.get("/admin/deployments").status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0, proc.stdout.read() if proc.stdout else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    loaded = json.loads(modules.read_text())
    assert "sqlalchemy.engine" in loaded and "fleetgate.store.request_log" in loaded
    assert [m for m in loaded if m.startswith(FORBIDDEN)] == []
