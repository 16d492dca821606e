"""Paced concurrent streams: N streams of 64 chunks 20 ms apart, through fleetgate and
through the two floors, in one run.

The fake upstream (`upstream.py`, `/paced/v1`) writes each event on its own, `PACE_MS`
apart, so every server in between handles each event on its own. The client
(`paced_client.py`) opens N streams at once, `ROUNDS` waves of them, and times each
event. Client and upstream share `LOAD_CPU`; each server under test is pinned to `GW_CPU`:

- `direct`: the client reads the upstream itself (what the harness alone shows);
- `raw`: `raw_floor.py`, an `asyncio.Protocol` + httptools pass-through, no framework;
- `uvicorn`: `baseline.py`, raw ASGI on uvicorn with an aiohttp client;
- `fleetgate`: `fleetgate serve`, one worker, the full pipeline and its log writer.

For each N (`STREAMS`, default 64 256 512 1024) and each target, in that order, it reports
TTFT and inter-chunk gap (p50, p99; p99 added over `direct`), stalled streams (a gap over
`STALL` times the pace), CPU µs per relayed chunk (the CPU of the target's process tree,
utime + stime, over all the events of all its streams) and its ratio to each floor's of the
same N, and the process tree's peak RSS (the VmHWM of each process it started, summed).

Run: `python3 -m benchmarks.paced_streams` (about 1 minute with the defaults); settings:
`STREAMS`, `ROUNDS` (2), `PACE_MS` (20), `CHUNKS` (64), `STALL` (5), `TARGETS`
("direct raw uvicorn fleetgate"; `fleetgate-uvicorn` adds fleetgate on `server.front:
uvicorn`), `GW_CPU` (1), `LOAD_CPU` (0), `OUT`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.run import (
    CLIENT_MODELS,
    CLK_TCK,
    GATEWAY,
    HERE,
    ROOT,
    UPSTREAM_MODELS,
    BenchError,
    ProcSample,
    Server,
    _free_port,
    _git_commit,
    _ints,
    checkout_env,
    descendants,
    start_server,
    stop,
    write_config,
)

RAW, UVICORN, DIRECT = "raw", "uvicorn", "direct"


def tree_peak_rss_mb(pid: int) -> float:
    """The VmHWM of a process and of every process below it, summed."""
    total = 0
    for p in [pid, *descendants(pid)]:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1])
        except FileNotFoundError:
            pass
    return total / 1024


def client(
    port: int, path: str, model: str, streams: int, rounds: int, env: dict[str, str]
) -> dict[str, Any]:
    s = os.environ
    cmd = [sys.executable, "-m", "benchmarks.paced_client", "--port", str(port)]
    cmd += ["--path", path, "--model", model, "--streams", str(streams)]
    cmd += ["--rounds", str(rounds), "--pace-ms", s.get("PACE_MS", "20")]
    cmd += ["--stall", s.get("STALL", "5"), "--events", str(int(s.get("CHUNKS", "64")) + 2)]
    cmd += ["--cpu", s.get("LOAD_CPU", "0")]
    # one stream's length: N streams under way from the first wave's end on
    length_ms = (int(s.get("CHUNKS", "64")) + 1) * float(s.get("PACE_MS", "20"))
    cmd += ["--spread-ms", s.get("SPREAD_MS", str(length_ms))]
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, timeout=600)
    if out.returncode != 0:
        raise BenchError(f"the client failed: {out.stderr.decode()[-2000:]}")
    return dict(json.loads(out.stdout))


def measure(
    target: str, server: Server, streams: int, rounds: int, env: dict[str, str]
) -> dict[str, Any]:
    if target == DIRECT:
        path, model = "/paced/v1/chat/completions", UPSTREAM_MODELS["paced"]
    else:
        path, model = "/v1/chat/completions", CLIENT_MODELS["paced"]
    before = ProcSample.of(server.pid).ticks
    row = client(server.port, path, model, streams, rounds, env)
    cpu_s = (ProcSample.of(server.pid).ticks - before) / CLK_TCK
    chunks = row["streams"] * row["events"]
    row.update(target=target, concurrent=streams, cpu_s=cpu_s)
    row["cpu_us_per_chunk"] = cpu_s / chunks * 1e6 if target != DIRECT else None
    row["tree_peak_rss_mb"] = tree_peak_rss_mb(server.pid) if target != DIRECT else None
    return row


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# Paced streams, {result['meta']['date']} ({result['meta']['commit']})",
        "",
        f"{result['meta']['chunks']} chunks {result['meta']['pace_ms']:g} ms apart, "
        f"{result['meta']['rounds']} waves of N; servers on CPU {result['meta']['gw_cpu']}, "
        f"client and upstream on CPU {result['meta']['load_cpu']}.",
        "",
        "| N | target | TTFT p50 / p99 ms | +TTFT p99 ms | gap p50 / p99 ms | +gap p99 ms "
        "| stalled | errors | CPU µs/chunk | ÷ raw | ÷ uvicorn | tree peak RSS MB |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['concurrent']} | {r['target']} "
            f"| {_f(r['ttft_p50_ms'])} / {_f(r['ttft_p99_ms'])} | {_f(r.get('added_ttft_p99_ms'))} "
            f"| {_f(r['gap_p50_ms'])} / {_f(r['gap_p99_ms'])} | {_f(r.get('added_gap_p99_ms'))} "
            f"| {r['stalled']} | {r['errors'] + r['short']} | {_f(r['cpu_us_per_chunk'])} "
            f"| {_f(r.get('raw_ratio'), 2)} | {_f(r.get('uvicorn_ratio'), 2)} "
            f"| {_f(r['tree_peak_rss_mb'])} |"
        )
    ready = result["servers"]
    lines += [
        "",
        "Ready (s, wall / CPU): "
        + ", ".join(
            f"{name} {v['ready_s']:.2f} / {v['ready_cpu_s']:.2f}" for name, v in ready.items()
        ),
    ]
    return "\n".join(lines) + "\n"


def run() -> dict[str, Any]:
    env_ = os.environ
    counts = _ints(env_.get("STREAMS"), [64, 256, 512, 1024])
    rounds = int(env_.get("ROUNDS", "2"))
    gw_cpu, load_cpu = int(env_.get("GW_CPU", "1")), int(env_.get("LOAD_CPU", "0"))
    targets = env_.get("TARGETS", f"{DIRECT} {RAW} {UVICORN} {GATEWAY}").split()
    out_dir = Path(env_.get("OUT", HERE / "results"))
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    work = Path(tempfile.mkdtemp(prefix="fleetgate-paced-"))
    env = checkout_env()
    py = sys.executable
    started: list[Server] = []
    servers: dict[str, Server] = {}
    rows: list[dict[str, Any]] = []
    try:
        up_port = _free_port()
        cmd = [py, "-m", "benchmarks.upstream", "--port", str(up_port)]
        cmd += ["--gap-ms", env_.get("PACE_MS", "20"), "--chunks", env_.get("CHUNKS", "64")]
        upstream = start_server(
            "upstream", cmd, up_port, "/_stats", load_cpu, env, ROOT, work / "upstream.log"
        )
        started.append(upstream)
        servers[DIRECT] = upstream
        for name in targets:
            if name == DIRECT:
                continue
            port = _free_port()
            if name == RAW:
                cmd = [py, "-m", "benchmarks.raw_floor", "--port", str(port)]
                cmd += ["--upstream", upstream.url("")]
                home = ROOT
            elif name == UVICORN:
                cmd = [py, "-m", "benchmarks.baseline", "--port", str(port)]
                cmd += ["--upstream", upstream.url("")]
                home = ROOT
            else:
                home = work / name
                home.mkdir()
                # `fleetgate-uvicorn`: fleetgate with that `server.front`
                front = name.removeprefix(f"{GATEWAY}-") if name != GATEWAY else "fleetgate"
                write_config(home / "fleet.yaml", up_port, port, "process", None, front=front)
                cmd = [py, "-m", "fleetgate", "serve", "--config", str(home / "fleet.yaml")]
                cmd += ["--port", str(port)]
            log = out_dir / f"{stamp}-paced-{name}.log"
            server = start_server(name, cmd, port, "/readyz", gw_cpu, env, home, log)
            started.append(server)
            servers[name] = server
        for name in targets:  # a warm-up wave each
            measure(name, servers[name], 16, 1, env)
        for n in counts:
            print(f"paced streams: {n} at once …", file=sys.stderr, flush=True)
            by_target = {name: measure(name, servers[name], n, rounds, env) for name in targets}
            direct = by_target.get(DIRECT)
            for name, row in by_target.items():
                if direct is not None and name != DIRECT:
                    row["added_ttft_p99_ms"] = row["ttft_p99_ms"] - direct["ttft_p99_ms"]
                    row["added_gap_p99_ms"] = row["gap_p99_ms"] - direct["gap_p99_ms"]
                for floor in (RAW, UVICORN):
                    base = by_target.get(floor, {}).get("cpu_us_per_chunk")
                    if base and row["cpu_us_per_chunk"] is not None:
                        row[f"{floor}_ratio"] = row["cpu_us_per_chunk"] / base
                rows.append(row)
        for name, server in servers.items():
            if server.proc.poll() is not None:
                raise BenchError(f"{name} exited with {server.proc.returncode} during the run")
    finally:
        for server in reversed(started):
            stop(server.proc)
        shutil.rmtree(work, ignore_errors=True)
    result: dict[str, Any] = {
        "meta": {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "commit": _git_commit(),
            "rounds": rounds,
            "pace_ms": float(env_.get("PACE_MS", "20")),
            "chunks": int(env_.get("CHUNKS", "64")),
            "gw_cpu": gw_cpu,
            "load_cpu": load_cpu,
        },
        "servers": {
            name: {"ready_s": s.ready_s, "ready_cpu_s": s.ready_cpu_s}
            for name, s in servers.items()
            if name != DIRECT
        },
        "rows": rows,
    }
    table = markdown(result)
    (out_dir / f"{stamp}-paced.json").write_text(json.dumps(result, indent=2) + "\n")
    (out_dir / f"{stamp}-paced.md").write_text(table)
    print(table)
    return result


def main() -> int:
    try:
        run()
    except BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
