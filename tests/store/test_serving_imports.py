"""The serving process runs the store on the database driver alone: SQLAlchemy (about
15 MB resident with its dialects, and the ORM ~8 MB more through `sqlalchemy.ext.asyncio`)
is more than a gateway with a peak-RSS budget of 80 MB can afford. (Alembic, imported
only to upgrade an older store, brings it.)"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import httpx

from tests.harness import Stack, wait_until
from tests.test_serve import chat, serving

ADMIN_KEY = "admin-secret"
FORBIDDEN = ("sqlalchemy", "aiosqlite", "asyncpg", "greenlet")

# `fleetgate serve` as the console script runs it, writing its modules out when it exits
_SERVE = """
import atexit, json, sys
atexit.register(lambda: open(sys.argv[1], "w").write(json.dumps(sorted(sys.modules))))
from fleetgate.cli import main
raise SystemExit(main(sys.argv[2:]))
"""


def test_fleetgate_serve_never_imports_sqlalchemy(stack: Stack, tmp_path: Path) -> None:
    modules = tmp_path / "modules.json"
    serve = [sys.executable, "-c", _SERVE, str(modules)]
    with serving(stack, tmp_path, command=serve, FLEETGATE_ADMIN_KEY=ADMIN_KEY) as (url, _):
        assert chat(url).status_code == 200
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
    loaded = json.loads(modules.read_text())
    assert "fleetgate.store.request_log" in loaded and "fleetgate.store.db" in loaded
    assert [m for m in loaded if m.startswith(FORBIDDEN)] == []


# what the first request does not need, imported only when something asks for it: the
# admin API (FastAPI) at the first /admin call, Alembic when a store is behind the schema,
# aiohttp (and its URL library) when a background poller (discovery, engine load) first
# asks a worker something; difflib when a config has a name to correct; uvicorn (and its
# command line's click) only for `--workers N` or the uvicorn front
DEFERRED = (
    "uvicorn",
    "click",
    "difflib",
    "fleetgate.admin",
    "fastapi",
    "starlette",
    "alembic",
    "statistics",
    "uvicorn.protocols.websockets",
    "aiohttp",
    "yarl",
)


def test_a_gateway_nobody_administers_loads_only_what_serving_needs(
    stack: Stack, tmp_path: Path
) -> None:
    modules = tmp_path / "modules.json"
    # a fresh SQLite store: created, not migrated
    with serving(stack, tmp_path, command=[sys.executable, "-c", _SERVE, str(modules)]) as (
        url,
        _,
    ):
        assert chat(url).status_code == 200
    with sqlite3.connect(tmp_path / "data" / "fleetgate.db") as db:
        assert db.execute("SELECT requested_model FROM requests").fetchall() == [("m",)]
    loaded = json.loads(modules.read_text())
    assert "fleetgate.execute.http1" in loaded and "fleetgate.store.log_writer" in loaded
    assert [m for m in loaded if m.startswith(DEFERRED + FORBIDDEN)] == []
