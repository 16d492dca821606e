"""What fleetgate adds to one request's latency in front of the real llama.cpp engine.

Starts one `llama-server` (one slot, one thread; or, with `--upstream fake`, the benchmarks'
fake upstream) and `fleetgate serve` in front of it, then sends the same chat many times,
one at a time over one keep-alive connection per target, alternating direct and through
the gateway so that drift in the machine's load hits both alike. Reports:

- p50 / mean / p90 of both, the added latency (difference of medians, and mean of the
  paired differences) and what the gateway says it spent itself (`X-Fleetgate-Overhead-Ms`);
- the same for the Python floor (`benchmarks/baseline.py`: a bare uvicorn + aiohttp
  pass-through on the gateway's CPUs), sent in the same rotation, with its CPU per
  request: what one sequential request costs this stack before any of fleetgate's work;
- answers that were not 200 (`failures`; e.g. a reset on a pooled connection the engine
  had closed);
- the serving process's CPU time, run-queue wait and timeslices per request
  (`/proc/PID/task/*/schedstat`), and the TCP connections opened to the engine meanwhile
  (from /proc/net/tcp);
- the floor of the same run: the round trip of 200 bytes over loopback TCP between two
  processes on the same CPU and on different CPUs (what each extra process hop costs here),
  and the same piece of Python work run hot and right after an idle wait as long as the
  engine's answer (what waking from that wait costs any process here: `idle_floor`).

`--upstream fake --fake-delay-ms N` puts the fake upstream, answering after N ms of idle
wait, where the engine was: what the engine's wait costs, told apart from its compute.

    python3 benchmarks/engine_latency.py [--requests 400] [--stream] [--max-tokens 1]
        [--prompt-bytes N] [--upstream llama|fake] [--fake-delay-ms N] [--src DIR]
        [--gateway-cpu 0] ...

`--src DIR` runs the gateway from another checkout's `src` (A/B a change); `--profile
FILE` / `--strace FILE` record py-spy / `strace -c` of the gateway during the run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from benchmarks.keepalive import KeepAliveClient  # noqa: E402
from benchmarks.run import start_server, stop  # noqa: E402
from fleetgate.testing.corpus import text_of  # noqa: E402
from fleetgate.testing.llama import ALIAS, LlamaServer, free_port  # noqa: E402

MODEL = "tiny"
PATH = "/v1/chat/completions"


class Client(KeepAliveClient):
    """Posts the run's chat; answers that are not 200 are kept as failures."""

    def __init__(self, port: int) -> None:
        super().__init__(port, timeout=30)
        self.failures: list[str] = []

    def post(self, body: bytes) -> tuple[float, dict[str, str]]:
        elapsed, status, headers, data = self.request("POST", PATH, body)
        if status != 200:
            self.failures.append(f"{status} {data[:160]!r}")
        return elapsed, headers


def connections_to(port: int) -> set[int]:
    """Client ports of the TCP connections to a local port now (any state)."""
    ports: set[int] = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if int(fields[1].rsplit(":", 1)[1], 16) == port:
                        ports.add(int(fields[2].rsplit(":", 1)[1], 16))
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


def schedstat(pid: int) -> tuple[int, int, int]:
    """(ns on a CPU, ns waiting for one, timeslices) over all of a process's threads."""
    totals = [0, 0, 0]
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                values = [int(v) for v in f.read().split()]
        except FileNotFoundError:
            continue  # a thread that ended
        totals = [t + v for t, v in zip(totals, values, strict=True)]
    return totals[0], totals[1], totals[2]


def hop_floor(cross: bool, rounds: int = 2000) -> dict[str, float]:
    """The round trip of 200 bytes over loopback TCP to a forked echo process, on the same
    CPU as this one or on another: what one process hop costs on this machine now."""
    here = min(os.sched_getaffinity(0))
    cpus = sorted(range(os.cpu_count() or 1))
    there = next((c for c in cpus if c != here), here) if cross else here
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        pid = os.fork()
        if pid == 0:  # the echo process
            os.sched_setaffinity(0, {there})
            conn, _ = listener.accept()
            while data := conn.recv(1000):
                conn.sendall(data)
            os._exit(0)
        saved = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {here})
        times = []
        with socket.create_connection(listener.getsockname()) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(rounds):
                started = time.perf_counter()
                sock.sendall(b"x" * 200)
                got = 0
                while got < 200:
                    got += len(sock.recv(1000))
                times.append(time.perf_counter() - started)
        os.waitpid(pid, 0)
        os.sched_setaffinity(0, saved)
    times.sort()
    return {
        "p50_us": times[len(times) // 2] * 1e6,
        "p90_us": times[int(len(times) * 0.9)] * 1e6,
        "p99_us": times[int(len(times) * 0.99)] * 1e6,
    }


def idle_floor(gap: float, rounds: int = 60) -> dict[str, float]:
    """The same piece of Python work (a 3 KB chat's JSON encoded and decoded 20 times), run
    back to back and right after sleeping `gap` seconds (as long as an engine's answer):
    what waking from an idle wait costs any process on this machine (cold caches, a
    descheduled virtual CPU), the floor of what a pass-through adds in front of a slow
    engine, whatever it runs."""
    chat = {
        "messages": [{"role": "user", "content": text_of("prose", random.Random(7), 3000)}],
        "n": 1,
    }

    def work() -> float:
        started = time.perf_counter()
        for _ in range(20):
            json.loads(json.dumps(chat))
        return time.perf_counter() - started

    hot = [work() for _ in range(rounds)]
    cold = []
    for _ in range(rounds):
        time.sleep(gap)
        cold.append(work())
    hot_us, cold_us = statistics.median(hot) * 1e6, statistics.median(cold) * 1e6
    return {
        "gap_ms": gap * 1000,
        "hot_us": hot_us,
        "after_gap_us": cold_us,
        "ratio": cold_us / hot_us,
    }


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": statistics.median(ordered) * 1000,
        "mean_ms": statistics.fmean(ordered) * 1000,
        "p90_ms": ordered[int(len(ordered) * 0.9)] * 1000,
    }


@dataclass
class Upstream:
    """The engine under the gateway: the real llama.cpp server, or the benchmarks' fake."""

    kind: str  # provider kind
    port: int
    pid: int
    stop: Callable[[], None]
    model: str  # the name it answers to

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def start_upstream(
    which: str, work: Path, env: dict[str, str], n_ctx: int, delay_ms: float = 0.0
) -> Upstream:
    if which == "llama":
        engine = LlamaServer(n_ctx=n_ctx, slots=1, threads=1).start()
        assert engine.process is not None
        return Upstream("llamacpp", engine.port, engine.process.pid, engine.stop, ALIAS)
    port = free_port()
    command = [sys.executable, "-m", "benchmarks.upstream", "--port", str(port)]
    server = start_server(
        "upstream",
        [*command, "--delay-ms", str(delay_ms)],
        port,
        "/_stats",
        set(range(os.cpu_count() or 1)),
        env,
        ROOT,
        work / "upstream.log",
    )
    return Upstream("openai", port, server.pid, lambda: stop(server.proc), "upstream-model")


def write_config(path: Path, upstream: Upstream, port: int, n_ctx: int) -> None:
    config = {
        "server": {"host": "127.0.0.1", "port": port},
        "providers": [{"id": "cpp", "kind": upstream.kind, "base_url": upstream.base_url}],
        "deployments": [
            {
                "model": MODEL,
                "provider": "cpp",
                "upstream_model": upstream.model,
                "context_window": n_ctx,
            }
        ],
    }
    path.write_text(json.dumps(config))


def _prompt(size: int) -> str:
    """A short question, or about `size` bytes of the standard library's English prose (the
    same text every time: the engine's prompt cache keeps its cost small and steady)."""
    if size < 1000:
        return "Say hello in five words."
    return text_of("prose", random.Random(7), size)[:size]


def _cpus(arg: str) -> set[int]:
    return set(range(os.cpu_count() or 1)) if arg == "any" else {int(c) for c in arg.split(",")}


@dataclass
class Settings:
    requests: int = 400
    stream: bool = False
    max_tokens: int = 1
    prompt_bytes: int = 0
    upstream: str = "llama"
    fake_delay_ms: float = 0.0  # the fake's idle wait before each answer
    src: Path = ROOT / "src"  # the checkout the gateway runs
    cpus: dict[str, set[int]] | None = None
    profile: Path | None = None
    strace: Path | None = None


def _watchers(s: Settings, pid: int) -> list[subprocess.Popen[bytes]]:
    watchers = []
    if s.profile is not None:  # py-spy on the gateway while it serves the measured run
        cmd = ["py-spy", "record", "--format", "raw", "--rate", "1000", "--nonblocking"]
        cmd += ["--pid", str(pid), "--output", str(s.profile)]
        watchers.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    if s.strace is not None:  # strace -c of the gateway's threads during the run
        cmd = ["strace", "-c", "-f", "-o", str(s.strace), "-p", str(pid)]
        watchers.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    if watchers:
        time.sleep(1.0)  # attached
    return watchers


def run(s: Settings) -> dict[str, Any]:
    cpus = s.cpus or {w: _cpus("any") for w in ("gateway", "engine", "client")}
    n_ctx = 512 if s.prompt_bytes < 1000 else 8192
    work = Path(tempfile.mkdtemp(prefix="fleetgate-latency-"))
    pythonpath = [str(s.src), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in pythonpath if p))
    env["FLEETGATE_DATA_DIR"] = str(work)
    floor = {"same_cpu": hop_floor(False), "cross_cpu": hop_floor(True)}
    engine = start_upstream(s.upstream, work, env, n_ctx, s.fake_delay_ms)
    for tid in os.listdir(f"/proc/{engine.pid}/task"):
        os.sched_setaffinity(int(tid), cpus["engine"])
    os.sched_setaffinity(0, cpus["client"])
    gateway = None
    try:
        port = free_port()
        config = work / "fleet.json"
        write_config(config, engine, port, n_ctx)
        gateway = start_server(
            "fleetgate",
            [sys.executable, "-m", "fleetgate", "serve", "--config", str(config)],
            port,
            "/readyz",
            cpus["gateway"],
            env,
            ROOT,
            work / "gateway.log",
        )
        body: dict[str, Any] = {
            "model": MODEL,
            "messages": [{"role": "user", "content": _prompt(s.prompt_bytes)}],
            "max_tokens": s.max_tokens,
            "temperature": 0,
        }
        if s.stream:
            body["stream"] = True
        direct_body = json.dumps({**body, "model": engine.model}).encode()
        gateway_body = json.dumps(body).encode()
        floor_port = free_port()
        baseline = start_server(
            "baseline",
            [
                *(sys.executable, "-m", "benchmarks.baseline", "--port", str(floor_port)),
                *("--upstream", f"http://127.0.0.1:{engine.port}"),
                *("--engine", f"http://127.0.0.1:{engine.port}"),
            ],
            floor_port,
            "/readyz",
            cpus["gateway"],
            env,
            ROOT,
            work / "baseline.log",
        )
        # the floor's model: its name for the real engine (sent as the engine's alias), or
        # the fake's own name (the fake answers to any)
        floor_model = "bench-model-llama" if s.upstream == "llama" else engine.model
        floor_body = json.dumps({**body, "model": floor_model}).encode()
        direct, through, bare = Client(engine.port), Client(port), Client(floor_port)
        for _ in range(20):  # warm-up: connections, caches, the engine's prompt cache
            direct.post(direct_body)
            through.post(gateway_body)
            bare.post(floor_body)
        warm_failures = len(through.failures)
        before = connections_to(engine.port)
        watchers = _watchers(s, gateway.pid)
        sched_before = schedstat(gateway.pid)
        floor_sched_before = schedstat(baseline.pid)
        d_times: list[float] = []
        g_times: list[float] = []
        f_times: list[float] = []
        own: list[float] = []
        order = ("direct", "fleetgate", "floor")
        with PortWatch(engine.port, before) as watch:
            for i in range(s.requests):
                for target in order[i % 3 :] + order[: i % 3]:  # each goes first in turn
                    if target == "direct":
                        d_times.append(direct.post(direct_body)[0])
                    elif target == "floor":
                        f_times.append(bare.post(floor_body)[0])
                    else:
                        elapsed, headers = through.post(gateway_body)
                        g_times.append(elapsed)
                        if "x-fleetgate-overhead-ms" in headers:
                            own.append(float(headers["x-fleetgate-overhead-ms"]))
        cpu_ns, wait_ns, slices = (
            a - b for a, b in zip(schedstat(gateway.pid), sched_before, strict=True)
        )
        floor_cpu_ns, floor_wait_ns, _ = (
            a - b for a, b in zip(schedstat(baseline.pid), floor_sched_before, strict=True)
        )
        stop(baseline.proc)
        for watcher in watchers:
            watcher.send_signal(signal.SIGINT)
            watcher.wait(30)
        paired = [g - d for g, d in zip(g_times, d_times, strict=True)]
        floor_paired = [f - d for f, d in zip(f_times, d_times, strict=True)]
        d, g, f = summary(d_times), summary(g_times), summary(f_times)
        failures = through.failures[warm_failures:]
        return {
            "requests": s.requests,
            "upstream": s.upstream,
            "fake_delay_ms": s.fake_delay_ms,
            "src": str(s.src),
            "stream": s.stream,
            "max_tokens": s.max_tokens,
            "body_bytes": len(gateway_body),
            "load_average": os.getloadavg(),
            "cpus": {k: sorted(v) for k, v in cpus.items()},
            "hop_floor": floor,
            # the same work hot and after an idle wait as long as the direct answer
            "idle_floor": idle_floor(min(d["p50_ms"] / 1000, 0.2)),
            "direct": d,
            "fleetgate": g,
            "added_p50_ms": g["p50_ms"] - d["p50_ms"],
            "added_mean_ms": statistics.fmean(paired) * 1000,
            "added_ratio_p50": g["p50_ms"] / d["p50_ms"],
            "floor": f,
            "floor_added_p50_ms": f["p50_ms"] - d["p50_ms"],
            "floor_added_mean_ms": statistics.fmean(floor_paired) * 1000,
            "floor_cpu_ms_per_request": floor_cpu_ns / 1e6 / s.requests,
            "floor_runqueue_wait_ms_per_request": floor_wait_ns / 1e6 / s.requests,
            "gateway_overhead_header_p50_ms": statistics.median(own) if own else None,
            "failures": len(failures),
            "first_failure": failures[0] if failures else None,
            # the serving process, per gateway request: its CPU time, the time its threads
            # waited for a CPU while runnable, and the times they were scheduled in
            "gateway_cpu_ms_per_request": cpu_ns / 1e6 / s.requests,
            "gateway_runqueue_wait_ms_per_request": wait_ns / 1e6 / s.requests,
            "gateway_timeslices_per_request": slices / s.requests,
            # connections opened to the engine by the gateway and the direct client together
            "engine_connections_opened": len(watch.seen),
            "direct_client_reconnects": direct.reconnects,
        }
    finally:
        stop(gateway.proc if gateway is not None else None)
        engine.stop()


def line(r: dict[str, Any]) -> str:
    """One line of the figures that matter."""
    floor = r["hop_floor"]
    return (
        f"{r['upstream']} (delay {r['fake_delay_ms']:g} ms) stream={r['stream']} "
        f"body={r['body_bytes']}B "
        f"load={r['load_average'][0]:.1f}: direct p50 {r['direct']['p50_ms']:.2f} ms, "
        f"added p50 {r['added_p50_ms']:.2f} mean {r['added_mean_ms']:.2f} ms "
        f"(own {r['gateway_overhead_header_p50_ms'] or 0:.3f}), failures {r['failures']}, "
        f"gateway CPU {r['gateway_cpu_ms_per_request']:.2f} ms/req, run-queue wait "
        f"{r['gateway_runqueue_wait_ms_per_request']:.2f} ms/req, engine connections "
        f"{r['engine_connections_opened']}; Python floor: added p50 "
        f"{r['floor_added_p50_ms']:.2f} mean {r['floor_added_mean_ms']:.2f} ms, CPU "
        f"{r['floor_cpu_ms_per_request']:.2f} ms/req, run-queue wait "
        f"{r['floor_runqueue_wait_ms_per_request']:.2f} ms/req; hop floor same CPU "
        f"{floor['same_cpu']['p50_us']:.0f} us, cross CPU {floor['cross_cpu']['p50_us']:.0f} "
        f"us (p90 {floor['cross_cpu']['p90_us']:.0f}); the same work after an idle wait "
        f"of {r['idle_floor']['gap_ms']:.0f} ms: {r['idle_floor']['ratio']:.2f}x "
        f"({r['idle_floor']['hot_us']:.0f} -> {r['idle_floor']['after_gap_us']:.0f} us)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--max-tokens", type=int, default=1)
    parser.add_argument("--prompt-bytes", type=int, default=0, help="a long prompt (n_ctx 8192)")
    parser.add_argument("--upstream", choices=("llama", "fake"), default="llama")
    parser.add_argument(
        "--fake-delay-ms", type=float, default=0.0, help="the fake's idle wait per answer"
    )
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the gateway's src")
    for who in ("gateway", "engine", "client"):
        parser.add_argument(f"--{who}-cpu", default="any", help="CPUs, e.g. 0 or 0,1 (any)")
    parser.add_argument("--profile", type=Path, help="py-spy raw profile of the gateway")
    parser.add_argument("--strace", type=Path, help="strace -c summary of the gateway")
    parser.add_argument("--json", action="store_true", help="the whole result as JSON")
    args = parser.parse_args()
    settings = Settings(
        requests=args.requests,
        stream=args.stream,
        max_tokens=args.max_tokens,
        prompt_bytes=args.prompt_bytes,
        upstream=args.upstream,
        fake_delay_ms=args.fake_delay_ms,
        src=args.src.resolve(),
        cpus={w: _cpus(getattr(args, f"{w}_cpu")) for w in ("gateway", "engine", "client")},
        profile=args.profile,
        strace=args.strace,
    )
    result = run(settings)
    print(json.dumps(result, indent=2) if args.json else line(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
