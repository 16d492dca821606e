"""What fleetgate adds to one request's latency in front of the real llama.cpp engine.

Starts one `llama-server` (n_ctx 512, one slot, one thread) and `fleetgate serve` in front
of it, then sends the same short chat many times, one at a time over one keep-alive
connection per target, alternating direct and through the gateway so that drift in the
machine's load hits both alike. Reports p50 / mean / p90 of both, the added latency
(difference of medians and mean of the paired differences), what the gateway says it
spent itself (`X-Fleetgate-Overhead-Ms`), and how many TCP connections the gateway opened
to the engine (from the engine's side: distinct client ports seen in /proc/net/tcp).

    python3 benchmarks/engine_latency.py [--requests 400] [--stream] [--max-tokens 1]

The floor of the run is the direct figure; the added latency is reported in milliseconds
and as a ratio to it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from benchmarks.run import start_server, stop  # noqa: E402
from fleetgate.testing.llama import ALIAS, LlamaServer, free_port  # noqa: E402

MODEL = "tiny"


class Client:
    """One keep-alive HTTP/1.1 connection, reopened when the server closes it."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.reconnects = 0

    def post(self, path: str, body: bytes) -> tuple[float, dict[str, str], bytes]:
        for attempt in range(2):
            started = time.perf_counter()
            try:
                self.conn.request("POST", path, body, {"Content-Type": "application/json"})
                resp = self.conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, ConnectionError):
                self.conn.close()
                self.reconnects += 1
                if attempt:
                    raise
                continue
            elapsed = time.perf_counter() - started
            headers = {k.lower(): v for k, v in resp.getheaders()}
            if resp.will_close:
                self.conn.close()
                self.reconnects += 1
            if resp.status != 200:
                raise RuntimeError(f"{path} on {self.port}: {resp.status} {data[:200]!r}")
            return elapsed, headers, data
        raise AssertionError("unreachable")


def connections_to(port: int) -> set[int]:
    """Client ports of the TCP connections to a local port now (any state)."""
    ports: set[int] = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    local, remote = fields[1], fields[2]
                    if int(local.rsplit(":", 1)[1], 16) == port:
                        ports.add(int(remote.rsplit(":", 1)[1], 16))
        except FileNotFoundError:
            continue
    return ports


class PortWatch:
    """Samples the engine's client ports while the run goes (a new port: a new connection)."""

    def __init__(self, port: int, exclude: set[int]) -> None:
        self.port = port
        self.exclude = exclude
        self.seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.seen |= connections_to(self.port) - self.exclude
            self._stop.wait(0.002)

    def __enter__(self) -> PortWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": statistics.median(ordered) * 1000,
        "mean_ms": statistics.fmean(ordered) * 1000,
        "p90_ms": ordered[int(len(ordered) * 0.9)] * 1000,
    }


def write_config(path: Path, engine: LlamaServer, port: int) -> None:
    config = {
        "server": {"host": "127.0.0.1", "port": port},
        "providers": [{"id": "cpp", "kind": "llamacpp", "base_url": engine.base_url}],
        "deployments": [
            {"model": MODEL, "provider": "cpp", "upstream_model": ALIAS, "context_window": 512}
        ],
    }
    path.write_text(json.dumps(config))


def run(requests: int, stream: bool, max_tokens: int) -> dict[str, Any]:
    engine = LlamaServer(n_ctx=512, slots=1, threads=1).start()
    gateway = None
    try:
        work = Path(tempfile.mkdtemp(prefix="fleetgate-latency-"))
        port = free_port()
        config = work / "fleet.json"
        write_config(config, engine, port)
        pythonpath = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in pythonpath if p))
        env["FLEETGATE_DATA_DIR"] = str(work)
        gateway = start_server(
            "fleetgate",
            [sys.executable, "-m", "fleetgate", "serve", "--config", str(config)],
            port,
            "/readyz",
            0,
            env,
            ROOT,
            work / "gateway.log",
        )
        body: dict[str, Any] = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Say hello in five words."}],
            "max_tokens": max_tokens,
            "temperature": 0,
        }
        if stream:
            body["stream"] = True
        direct_body = json.dumps({**body, "model": ALIAS}).encode()
        gateway_body = json.dumps(body).encode()
        direct, through = Client(engine.port), Client(port)
        for _ in range(20):  # warm-up: connections, caches, the engine's prompt cache
            direct.post("/v1/chat/completions", direct_body)
            through.post("/v1/chat/completions", gateway_body)
        before = connections_to(engine.port)
        d_times: list[float] = []
        g_times: list[float] = []
        own: list[float] = []
        with PortWatch(engine.port, before) as watch:
            for i in range(requests):
                order = (True, False) if i % 2 else (False, True)
                for is_direct in order:
                    if is_direct:
                        d_times.append(direct.post("/v1/chat/completions", direct_body)[0])
                    else:
                        elapsed, headers, _ = through.post("/v1/chat/completions", gateway_body)
                        g_times.append(elapsed)
                        own.append(float(headers["x-fleetgate-overhead-ms"]))
        paired = [g - d for g, d in zip(g_times, d_times, strict=True)]
        d, g = summary(d_times), summary(g_times)
        return {
            "requests": requests,
            "stream": stream,
            "max_tokens": max_tokens,
            "load_average": os.getloadavg(),
            "direct": d,
            "fleetgate": g,
            "added_p50_ms": g["p50_ms"] - d["p50_ms"],
            "added_mean_ms": statistics.fmean(paired) * 1000,
            "added_ratio_p50": g["p50_ms"] / d["p50_ms"],
            "gateway_overhead_header_p50_ms": statistics.median(own),
            # new connections the gateway (and, separately, the direct client) opened
            "engine_connections_opened": len(watch.seen),
            "direct_client_reconnects": direct.reconnects,
        }
    finally:
        stop(gateway.proc if gateway is not None else None)
        engine.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--max-tokens", type=int, default=1)
    args = parser.parse_args()
    result = run(args.requests, args.stream, args.max_tokens)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
