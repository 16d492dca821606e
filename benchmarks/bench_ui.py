"""The dashboard's load times in headless Chromium: the Requests page over a 10,000-row
request log and the Fleet page with 200 deployments, each as a ratio to the same page on a
near-empty gateway (2 deployments, no logged requests) measured in the same run.

Time: from navigation to the page marking itself ready with its rows drawn (signed in
already: the admin key is put in the tab's session storage first). Median of --repeat.
Screenshots go to benchmarks/results/ (git-ignored).

Run: python3 benchmarks/bench_ui.py [--rows 10000] [--deployments 200] [--repeat 7]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from benchmarks.bench_request_log import _record  # noqa: E402
from fleetgate.assemble import build_gateway  # noqa: E402
from fleetgate.config import validate_config  # noqa: E402
from fleetgate.control.plane import ControlOptions  # noqa: E402
from fleetgate.store.database import database_url, migrate, open_database  # noqa: E402
from fleetgate.store.request_log import RequestLog  # noqa: E402
from fleetgate.testing.chromium import ARGS, CHROMIUM  # noqa: E402

KEY = "bench-admin-key"
RESULTS = ROOT / "benchmarks" / "results"


def fleet(deployments: int) -> dict[str, Any]:
    models = max(1, deployments // 10)
    return {
        "providers": [
            {"id": f"p{i}", "kind": "vllm", "base_url": f"http://127.0.0.1:9/v{i}"}
            for i in range(deployments)
        ],
        "deployments": [
            {
                "id": f"model-{i % models}/host-{i}",
                "model": f"model-{i % models}",
                "provider": f"p{i}",
                "context_window": 8192 * (1 + i % 4),
                "tier": "long" if i % 4 == 3 else "default",
                "price": {"input": 0.1 * (i % 5), "output": 0.2 * (i % 5)},
            }
            for i in range(deployments)
        ],
    }


async def seed(url: str, rows: int) -> None:
    db = open_database(url)
    try:
        await migrate(db)
        log = RequestLog(db, capacity=rows + 1)
        for start in range(0, rows, 1000):
            await log.write([_record(i) for i in range(start, min(rows, start + 1000))])
    finally:
        await db.dispose()


class Served:
    """A gateway with its store, on loopback, in a thread of its own."""

    def __init__(self, directory: str, deployments: int, rows: int) -> None:
        url = database_url(f"sqlite:///{directory}/fleetgate.db")
        asyncio.run(seed(url, rows))
        config, problems = validate_config(fleet(deployments))
        assert config is not None, problems
        gateway = build_gateway(config, ControlOptions(database_url=url, admin_key=KEY))
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(gateway, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(
            target=lambda: asyncio.run(self.server.serve(sockets=[self.sock])), daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "gateway did not start"
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)


def load_ms(context: Any, url: str, page_name: str, ready_rows: str) -> float:
    page = context.new_page()
    page.add_init_script(f"sessionStorage.setItem('fleetgate.adminKey', {KEY!r})")
    started = time.perf_counter()
    page.goto(f"{url}/ui#/{page_name}")
    page.wait_for_selector(f"#page-{page_name}[data-ready=true] {ready_rows}", state="attached")
    took = (time.perf_counter() - started) * 1000
    page.close()
    return took


def median_ms(context: Any, url: str, page_name: str, rows: str, repeat: int) -> float:
    load_ms(context, url, page_name, rows)  # warm-up: caches, the admin app's first build
    return statistics.median(load_ms(context, url, page_name, rows) for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--deployments", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as small_dir, tempfile.TemporaryDirectory() as big_dir:
        small = Served(small_dir, 2, 0)
        big = Served(big_dir, args.deployments, args.rows)
        try:
            with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
                context = p.chromium.launch_persistent_context(
                    profile,
                    executable_path=CHROMIUM,
                    headless=True,
                    args=ARGS,
                    viewport={"width": 1400, "height": 900},
                )
                figures = {}
                specs = {  # page: (ready on the small gateway, ready on the big one)
                    "requests": ("table#requests", "tr.request"),
                    "fleet": ("tr[data-deployment]", "tr[data-deployment]"),
                }
                for name, (floor_rows, rows) in specs.items():
                    floor = median_ms(context, small.url, name, floor_rows, args.repeat)
                    value = median_ms(context, big.url, name, rows, args.repeat)
                    figures[name] = (value, floor)
                RESULTS.mkdir(parents=True, exist_ok=True)
                for name in ("fleet", "requests"):
                    page = context.new_page()
                    page.add_init_script(f"sessionStorage.setItem('fleetgate.adminKey', {KEY!r})")
                    page.goto(f"{big.url}/ui#/{name}")
                    page.wait_for_selector(f"#page-{name}[data-ready=true]")
                    page.screenshot(path=str(RESULTS / f"ui-{name}.png"), full_page=name != "fleet")
                    page.close()
                context.close()
        finally:
            small.stop()
            big.stop()
    requests_ms, requests_floor = figures["requests"]
    fleet_ms, fleet_floor = figures["fleet"]
    print(
        f"requests page, {args.rows} logged rows: {requests_ms:.0f} ms "
        f"(empty log: {requests_floor:.0f} ms, ratio {requests_ms / requests_floor:.2f})"
    )
    print(
        f"fleet page, {args.deployments} deployments: {fleet_ms:.0f} ms "
        f"(2 deployments: {fleet_floor:.0f} ms, ratio {fleet_ms / fleet_floor:.2f})"
    )
    print(f"screenshots: {RESULTS}/ui-fleet.png, {RESULTS}/ui-requests.png")


if __name__ == "__main__":
    main()
