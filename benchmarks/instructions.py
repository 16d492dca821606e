"""Instructions per request, fleetgate against the floor, counted by valgrind's callgrind.

CPU seconds move by 30 % between runs minutes apart on a shared 2-core machine; instruction
counts do not (the same binary, inputs and environment give the same total whatever else
the machine is doing). This runs the floor (`benchmarks.baseline`) and `fleetgate serve`
each under `valgrind --tool=callgrind --trace-children=yes` with collection off, sends a
warm-up, switches collection on in every process of the tree (the request-log writer
included), sends `REQUESTS` requests at `CONC` connections with `hey`, waits until the
request log holds a row for every request sent (so the writer's work for them is counted),
switches collection off, and divides each tree's instruction total by the requests.
Before that (unless `START=0`) each server is started once with collection on from its
first instruction and counted until it first answers /readyz 200.

Run: `python3 -m benchmarks.instructions` (env: `FRONT` "fleetgate" (fleetgate's
`server.front`), `RAW` 1 (the raw floor, `raw_floor.py`, counted too), `REQUESTS` 1500,
`WARMUP` 200, `CONCS` "1 64", `KINDS` "plain stream", `START` 1, `TRACE_RATIOS` "": each
ratio is one more fleetgate with OpenTelemetry on at that sample ratio, exporting to
`benchmarks.otlp_sink` over `OTLP_PROTOCOL` (http/protobuf, or grpc), its count also shown
against tracing off). Needs valgrind and hey
(`apt-get install -y valgrind hey`). Under valgrind everything runs about 50 times
slower, so a run takes minutes; latency figures mean nothing here, only the counts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.run import (
    BASELINE,
    CLIENT_MODELS,
    GATEWAY,
    RAW_FLOOR,
    ROOT,
    STREAM_CHUNKS,
    BenchError,
    Server,
    _free_port,
    _git_commit,
    chat_body,
    checkout_env,
    descendants,
    otlp_collector,
    start_server,
    stop,
    telemetry_block,
    write_config,
)

# A dump's "totals:" line; its "summary:" line says the same when collection was on from
# the start (and 0 otherwise), so it is not added.
_TOTALS = re.compile(rb"^totals: (\d+)", re.M)


@dataclass
class Target:
    name: str
    server: Server
    out_dir: Path
    store: Path | None = None
    sent: int = 0


def _callgrind(out_dir: Path, at_start: bool = False) -> list[str]:
    return [
        "valgrind",
        "--tool=callgrind",
        "--trace-children=yes",
        f"--instr-atstart={'yes' if at_start else 'no'}",
        f"--callgrind-out-file={out_dir}/cg.%p",
    ]


def _control(pid: int, *flags: str) -> None:
    """`callgrind_control FLAGS` for the process and every process below it."""
    for p in [pid, *descendants(pid)]:
        subprocess.run(["callgrind_control", *flags, str(p)], capture_output=True, check=False)


def _instructions(out_dir: Path, main_pid: int, keep: Path | None = None) -> tuple[int, int]:
    """Instructions in the dumps since the last zeroing: (the server process, its children).
    `keep`: a folder the dumps are copied to first (for callgrind_annotate)."""
    own = kids = 0
    for f in out_dir.glob("cg.*"):
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, keep / f.name)
        count = sum(int(m) for m in _TOTALS.findall(f.read_bytes()))
        if f.name.split(".")[1] == str(main_pid):
            own += count
        else:
            kids += count
        f.unlink()
    return own, kids


def _counted(t: Target, work: Callable[[], None], keep: Path | None = None) -> tuple[int, int]:
    """What the tree executes while `work` runs: collection on, then dump."""
    pid = t.server.pid
    _control(pid, "-z")  # zero what was gathered so far
    for f in t.out_dir.glob("cg.*"):
        f.unlink()
    _control(pid, "-i", "on")
    work()
    _control(pid, "-i", "off")
    _control(pid, "-d")
    return _instructions(t.out_dir, pid, keep)


def _hey(port: int, kind: str, conc: int, n: int) -> int:
    """Sends n requests (rounded down to a multiple of conc, as hey does); returns how many."""
    n -= n % conc
    body = json.dumps(chat_body(kind, CLIENT_MODELS[kind]))
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    cmd = ["hey", "-n", str(n), "-c", str(conc), "-t", "120", "-m", "POST"]
    cmd += ["-T", "application/json", "-d", body, url]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    codes = re.findall(r"\[(\d{3})\]\s+(\d+) responses", done.stdout)
    ok = sum(int(c) for s, c in codes if s == "200")
    if done.returncode != 0 or ok != n:
        raise BenchError(f"hey: {ok}/{n} answered 200: {done.stdout[-400:]} {done.stderr[-400:]}")
    return n


def _log_rows(store: Path) -> int:
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5) as db:
            return int(db.execute("SELECT count(*) FROM requests").fetchone()[0])
    except sqlite3.Error:
        return 0


def _wait_rows(t: Target, deadline_s: float = 120.0) -> None:
    if t.store is None:
        return
    deadline = time.monotonic() + deadline_s
    while _log_rows(t.store) < t.sent:
        if time.monotonic() > deadline:
            raise BenchError(f"{t.name}: {_log_rows(t.store)} log rows for {t.sent} requests")
        time.sleep(0.2)


@dataclass
class Counts:
    requests: int
    own: int  # the server process
    children: int  # its request-log writer
    idle_per_s: float  # the same tree, no requests: what it does by the clock alone
    seconds: float  # how long the counted load took

    @property
    def per_request(self) -> float:
        return (self.own + self.children) / self.requests

    @property
    def net_per_request(self) -> float:
        """Per request, less what the clock alone did meanwhile. Under valgrind a request
        takes ~50 times as long, so timers weigh ~50 times what they do at full speed."""
        clock = min(self.idle_per_s * self.seconds, self.own + self.children)
        return (self.own + self.children - clock) / self.requests


def measure(
    t: Target, kind: str, conc: int, n: int, warmup: int, keep: Path | None = None
) -> Counts:
    warmup = max(warmup, conc)  # hey sends at least one request per connection
    t.sent += _hey(t.server.port, kind, conc, warmup)
    _wait_rows(t)
    sent = 0
    started = time.monotonic()

    def load() -> None:
        nonlocal sent
        sent = _hey(t.server.port, kind, conc, n)
        t.sent += sent
        _wait_rows(t)  # the writer's work for these rows counts too

    own, kids = _counted(t, load, keep)
    elapsed = time.monotonic() - started
    idle_own, idle_kids = _counted(t, lambda: time.sleep(min(elapsed, 5.0)))
    return Counts(sent, own, kids, (idle_own + idle_kids) / min(elapsed, 5.0), elapsed)


def guarded(run: Callable[[], int]) -> int:
    """`run`'s exit status, or 2 with the reason when the benchmark could not run."""
    try:
        return run()
    except BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 2


def main() -> int:
    return guarded(run)


def _trace_name(ratio: float) -> str:
    return f"{GATEWAY}-trace{ratio:g}"


def _server_cmd(
    name: str, port: int, up_port: int, home: Path, collector: str | None = None
) -> list[str]:
    py = sys.executable
    if name in (BASELINE, RAW_FLOOR):
        return [
            py,
            "-m",
            "benchmarks.baseline" if name == BASELINE else "benchmarks.raw_floor",
            "--port",
            str(port),
            "--upstream",
            f"http://127.0.0.1:{up_port}",
        ]
    config = home / "fleet.yaml"
    telemetry = None
    if name.startswith(f"{GATEWAY}-trace") and collector is not None:
        ratio = float(name.removeprefix(f"{GATEWAY}-trace"))
        telemetry = telemetry_block(collector, ratio)
    front = os.environ.get("FRONT", "fleetgate")
    write_config(config, up_port, port, "process", None, telemetry, front=front)
    return [py, "-m", "fleetgate", "serve", "--config", str(config), "--port", str(port)]


def start_instructions(
    name: str, up_port: int, work: Path, env: dict[str, str], collector: str | None = None
) -> int:
    """What the server process executes from its first instruction until it first answers
    /readyz 200 (interpreter start, imports, a new store's tables, the listener): the
    start-up figure that does not move with the machine's speed."""
    home = work / f"start-{name}"
    out_dir = home / "cg"
    out_dir.mkdir(parents=True)
    port = _free_port()
    cmd = _callgrind(out_dir, at_start=True) + _server_cmd(name, port, up_port, home, collector)
    server = start_server(name, cmd, port, "/readyz", {1}, env, home, work / f"start-{name}.log")
    try:
        subprocess.run(
            ["callgrind_control", "-d", str(server.pid)], capture_output=True, check=False
        )
        return _instructions(out_dir, server.pid)[0]
    finally:
        stop(server.proc)


def tools_missing() -> bool:
    """Whether a tool these counts need is missing (said on stderr)."""
    for tool in ("valgrind", "callgrind_control", "hey"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed (apt-get install -y valgrind hey)", file=sys.stderr)
            return True
    return False


def load_knobs(requests: int, warmup: int, concs: str) -> tuple[int, int, list[int], list[str]]:
    """`REQUESTS`, `WARMUP`, `CONCS` and `KINDS` from the environment, else these defaults."""
    return (
        int(os.environ.get("REQUESTS", str(requests))),
        int(os.environ.get("WARMUP", str(warmup))),
        [int(c) for c in os.environ.get("CONCS", concs).split()],
        os.environ.get("KINDS", "plain stream").split(),
    )


def run() -> int:
    if tools_missing():
        return 2
    n, warmup, concs, kinds = load_knobs(1500, 200, "1 64")
    ratios = [float(r) for r in os.environ.get("TRACE_RATIOS", "").replace(",", " ").split()]
    work = Path(tempfile.mkdtemp(prefix="fleetgate-instr-"))
    env = checkout_env()
    py = sys.executable
    started: list[Server] = []
    results: dict[str, dict[str, Counts]] = {}
    starts: dict[str, int] = {}
    try:
        up_port = _free_port()
        up_cmd = [py, "-m", "benchmarks.upstream", "--port", str(up_port)]
        up_cmd += ["--chunks", str(STREAM_CHUNKS)]
        upstream = start_server("upstream", up_cmd, up_port, "/_stats", 0, env, ROOT, work / "up")
        started.append(upstream)
        collector = None
        if ratios:
            sink_cmd, sink_port, collector = otlp_collector(py)
            sink = start_server(
                "collector", sink_cmd, sink_port, "/_stats", 0, env, ROOT, work / "c"
            )
            started.append(sink)
        traced = [_trace_name(r) for r in ratios]
        if os.environ.get("START", "1") == "1":
            print("running start …", file=sys.stderr, flush=True)
            for name in (BASELINE, GATEWAY, *traced):
                starts[name] = start_instructions(name, up_port, work, env, collector)
        targets: list[Target] = []
        floors = (BASELINE, RAW_FLOOR) if os.environ.get("RAW", "1") == "1" else (BASELINE,)
        for name in (*floors, GATEWAY, *traced) if kinds else ():
            port = _free_port()
            out_dir = work / f"cg-{name}"
            out_dir.mkdir()
            home = work / name
            home.mkdir()
            server = start_server(
                name,
                _callgrind(out_dir) + _server_cmd(name, port, up_port, home, collector),
                port,
                "/readyz",
                {1},
                env,
                home,
                work / f"{name}.log",
            )
            started.append(server)
            store = home / "data" / "fleetgate.db" if name not in floors else None
            targets.append(Target(name, server, out_dir, store))
        for kind in kinds:
            for conc in concs:
                scenario = f"c{conc}" if kind == "plain" else f"{kind}-c{conc}"
                print(f"running {scenario} …", file=sys.stderr, flush=True)
                for t in targets:
                    counts = measure(t, kind, conc, n, warmup)
                    results.setdefault(scenario, {})[t.name] = counts
    finally:
        for server in reversed(started):
            stop(server.proc)
        shutil.rmtree(work, ignore_errors=True)
    print(f"instructions per request (callgrind), commit {_git_commit()}, {n} requests each\n")
    print(
        "| scenario | floor | fleetgate | of it, the log writer | ÷ floor "
        "| idle M/s, floor / fleetgate | ÷ floor, net of the clock |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for scenario, row in results.items():
        floor, gw = row[BASELINE], row[GATEWAY]
        writer = gw.children / gw.requests
        print(
            f"| {scenario} | {floor.per_request / 1e6:.3f} M | {gw.per_request / 1e6:.3f} M "
            f"| {writer / 1e6:.3f} M | {gw.per_request / floor.per_request:.2f} "
            f"| {floor.idle_per_s / 1e6:.2f} / {gw.idle_per_s / 1e6:.2f} "
            f"| {gw.net_per_request / floor.net_per_request:.2f} |"
        )
    raws = {scenario: row[RAW_FLOOR] for scenario, row in results.items() if RAW_FLOOR in row}
    if raws:
        print("\n| scenario | raw floor | fleetgate ÷ raw | net of the clock |")
        print("|---|---:|---:|---:|")
        for scenario, raw in raws.items():
            gw = results[scenario][GATEWAY]
            print(
                f"| {scenario} | {raw.per_request / 1e6:.3f} M "
                f"| {gw.per_request / raw.per_request:.2f} "
                f"| {gw.net_per_request / raw.net_per_request:.2f} |"
            )
    for name in traced if results else ():
        print(f"\n{name} against tracing off (instructions per request, ÷ off, net of the clock)")
        for scenario, row in results.items():
            off, on = row[GATEWAY], row[name]
            print(
                f"- {scenario}: {on.per_request / 1e6:.3f} M vs {off.per_request / 1e6:.3f} M, "
                f"{on.per_request / off.per_request:.3f}, "
                f"net {on.net_per_request / off.net_per_request:.3f}"
            )
    if starts:
        floor_start, gw_start = starts[BASELINE], starts[GATEWAY]
        print(
            f"| start, to the first /readyz 200 | {floor_start / 1e6:,.0f} M "
            f"| {gw_start / 1e6:,.0f} M | - | {gw_start / floor_start:.2f} | - | - |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
