"""Gateway overhead benchmark: the same load sent to a fake upstream directly and via fleetgate.

Starts `benchmarks.upstream` (pinned to LOAD_CPU), `fleetgate serve` (one worker, pinned to
GW_CPU) and, for reference, `benchmarks.baseline` (a bare pass-through, also on GW_CPU); checks
answers through the gateway, then runs wrk (one thread, on LOAD_CPU) against each, scenario by
scenario. Prints a Markdown table and writes JSON + Markdown to `benchmarks/results/`.
See benchmarks/README.md for the knobs and what each column means.
"""

from __future__ import annotations

import compileall
import http.client
import json
import os
import platform
import shlex
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LUA = HERE / "chat.lua"
CLK_TCK = os.sysconf("SC_CLK_TCK")

# the targets for one worker with the full pipeline
TARGET_CPU_PLAIN_US = 200.0
TARGET_CPU_STREAM_US = 400.0
TARGET_ADDED_P50_C1_MS = 0.3
TARGET_RSS_MB = 80.0
# issue 18: against the floor of the same run, and a start within half a second
TARGET_READY_S = 0.5
TARGET_FLOOR_CPU_RATIO = 1.3
TARGET_FLOOR_P99_RATIO = 1.5
# issue 40: tracing on at sample ratio 1 costs at most this much more CPU per request
TARGET_TRACING_CPU_RATIO = 1.15

ENGINE_ALIAS = "tiny-qwen2tok"  # fleetgate.testing.llama.ALIAS, what the engine answers to
CLIENT_MODELS = {
    "plain": "bench-model",
    "stream": "bench-model-stream",
    "paced": "bench-model-paced",
    # streams that could be continued (a second deployment of the model, on a kind that
    # continues): the first answer's relay holds back its ends; nothing is cut
    "resumable": "bench-model-resumable",
    # its control: the same two deployments, the second on a kind that cannot continue
    # (`openai`), so the plan, routing and balancing of two candidates cost the same and
    # only the continuation differs
    "twin": "bench-model-twin",
}
UPSTREAM_MODELS = {k: v.replace("bench-model", "upstream-bench") for k, v in CLIENT_MODELS.items()}
# the real llama.cpp server (`ENGINE_CONCS`): a short chat, the same model name both ways
ENGINE_MODEL = "bench-model-llama"
STREAM_CHUNKS = 20
GATEWAY = "fleetgate"
BASELINE = "baseline"
RAW_FLOOR = "raw"  # raw_floor.py: no framework at all (issue 42's floor)
RSGI_FLOOR = "rsgi"  # rsgi_floor.py: the raw floor's pass-through on granian's Rust server
# issue 42: against the raw floor of the same run, and the whole process tree's memory
TARGET_RAW_CPU_RATIO = 2.0
TARGET_TREE_RSS_MB = 80.0


class BenchError(Exception):
    """A check or a process failed; the run stops with this message."""


def _ints(raw: str | None, default: list[int]) -> list[int]:
    return default if raw is None else [int(x) for x in raw.replace(",", " ").split()]


@dataclass
class Settings:
    duration: float = 5.0
    warmup: float = 1.0
    repeat: int = 1
    concs: list[int] = field(default_factory=lambda: [1, 64])
    stream_concs: list[int] = field(default_factory=lambda: [1, 64])
    paced_concs: list[int] = field(default_factory=lambda: [16])
    resumable_concs: list[int] = field(default_factory=list)  # as stream, but continuable
    twin_concs: list[int] = field(default_factory=list)  # as resumable, not continuable
    gap_ms: float = 1.0
    engine_concs: list[int] = field(default_factory=list)  # real llama.cpp scenarios
    engine_max_tokens: int = 4
    gw_cpu: int = 1
    load_cpu: int = 0
    baseline: bool = True
    raw_floor: bool = True  # the raw floor too (`raw_floor.py`)
    rsgi_floor: bool = False  # the RSGI floor too (`rsgi_floor.py`; needs granian)
    profile: bool = False
    # fleetgate variants, each its own target: storage.log_writer values, `--workers` counts
    log_writers: list[str] = field(default_factory=lambda: ["process"])
    workers: list[int] = field(default_factory=lambda: [1])
    workers_cpus: set[int] = field(default_factory=set)  # for -wN targets; empty: GW_CPU
    fronts: list[str] = field(default_factory=lambda: ["fleetgate"])  # server.front values
    # OpenTelemetry sample ratios, each one more target (`fleetgate-trace<ratio>`) exporting
    # to a local collector (benchmarks/otlp_sink.py, on LOAD_CPU) over OTLP_PROTOCOL
    trace_ratios: list[float] = field(default_factory=list)
    gateway_cmd: list[str] = field(default_factory=lambda: [sys.executable, "-m", "fleetgate"])
    out: Path = HERE / "results"

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ
        s = cls()
        s.duration = float(env.get("DURATION", s.duration))
        s.warmup = float(env.get("WARMUP", s.warmup))
        s.repeat = max(1, int(env.get("REPEAT", s.repeat)))
        s.concs = _ints(env.get("CONCS"), s.concs)
        s.stream_concs = _ints(env.get("STREAM_CONCS"), s.stream_concs)
        s.paced_concs = _ints(env.get("PACED_CONCS"), s.paced_concs)
        s.resumable_concs = _ints(env.get("RESUMABLE_CONCS"), s.resumable_concs)
        s.twin_concs = _ints(env.get("TWIN_CONCS"), s.twin_concs)
        s.gap_ms = float(env.get("GAP_MS", s.gap_ms))
        s.engine_concs = _ints(env.get("ENGINE_CONCS"), s.engine_concs)
        s.engine_max_tokens = int(env.get("ENGINE_MAX_TOKENS", s.engine_max_tokens))
        s.gw_cpu = int(env.get("GW_CPU", s.gw_cpu))
        s.load_cpu = int(env.get("LOAD_CPU", s.load_cpu))
        s.baseline = env.get("BASELINE", "1") not in ("0", "", "no", "false")
        s.raw_floor = env.get("RAW", "1") not in ("0", "", "no", "false")
        s.rsgi_floor = env.get("RSGI", "0") not in ("0", "", "no", "false")
        s.profile = env.get("PROFILE", "0") not in ("0", "", "no", "false")
        if env.get("LOG_WRITERS"):
            s.log_writers = env["LOG_WRITERS"].replace(",", " ").split()
        s.workers = _ints(env.get("WORKERS"), s.workers) or s.workers
        s.workers_cpus = set(_ints(env.get("WORKERS_CPUS"), []))
        if env.get("FRONTS"):
            s.fronts = env["FRONTS"].replace(",", " ").split()
        s.trace_ratios = [float(x) for x in env.get("TRACE_RATIOS", "").replace(",", " ").split()]
        if env.get("GATEWAY_CMD"):
            s.gateway_cmd = shlex.split(env["GATEWAY_CMD"])
        s.out = Path(env.get("OUT", s.out))
        return s


@dataclass
class Scenario:
    name: str
    kind: str  # plain | stream | paced | engine (plain, against the real llama.cpp server)
    conc: int

    @property
    def stream(self) -> bool:
        return self.kind not in ("plain", "engine")

    @property
    def model(self) -> str:
        return ENGINE_MODEL if self.kind == "engine" else CLIENT_MODELS[self.kind]

    @property
    def path(self) -> str:
        return "/paced/v1/chat/completions" if self.kind == "paced" else "/v1/chat/completions"


def scenarios(s: Settings) -> list[Scenario]:
    out = [Scenario(f"c{c}", "plain", c) for c in s.concs]
    out += [Scenario(f"stream-c{c}", "stream", c) for c in s.stream_concs]
    out += [Scenario(f"paced-c{c}", "paced", c) for c in s.paced_concs]
    out += [Scenario(f"resumable-c{c}", "resumable", c) for c in s.resumable_concs]
    out += [Scenario(f"twin-c{c}", "twin", c) for c in s.twin_concs]
    out += [Scenario(f"engine-c{c}", "engine", c) for c in s.engine_concs]
    return out


def cpu_target(kind: str) -> float:
    return TARGET_CPU_PLAIN_US if kind in ("plain", "engine") else TARGET_CPU_STREAM_US


# ---- processes and /proc ----------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def otlp_collector(py: str) -> tuple[list[str], int, str]:
    """The benchmark collector (`benchmarks.otlp_sink`): its command, the port of its
    `/_stats`, and the endpoint a gateway exports to with `OTLP_PROTOCOL` ("http/protobuf",
    the default, or "grpc")."""
    port = _free_port()
    cmd = [py, "-m", "benchmarks.otlp_sink", "--port", str(port)]
    if otlp_protocol() == "grpc":
        grpc_port = _free_port()
        return [*cmd, "--grpc-port", str(grpc_port)], port, f"http://127.0.0.1:{grpc_port}"
    return cmd, port, f"http://127.0.0.1:{port}"


def otlp_protocol() -> str:
    return os.environ.get("OTLP_PROTOCOL", "http/protobuf")


def telemetry_block(endpoint: str, ratio: float) -> dict[str, Any]:
    """The `telemetry` section of a traced gateway's config."""
    return {"otlp": {"endpoint": endpoint, "protocol": otlp_protocol()}, "sample_ratio": ratio}


def _pinned(cpu: int | set[int]) -> Any:
    return lambda: os.sched_setaffinity(0, {cpu} if isinstance(cpu, int) else cpu)


def pin_all_threads(pid: int, cpu: int) -> None:
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), {cpu})


def checkout_env() -> dict[str, str]:
    """The environment that runs the checkout this file lives in (not whatever fleetgate is
    installed), compiled to bytecode first. An installed gateway runs from bytecode that pip
    compiled at install time; this checkout may have none (PYTHONDONTWRITEBYTECODE), and
    compiling ~150 modules at every start would add its work to the start measured (900 M
    instructions, 45 % of it) and its memory to the RSS."""
    compileall.compile_dir(ROOT / "src", quiet=1)
    pythonpath = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in pythonpath if p))


def descendants(pid: int) -> list[int]:
    """The live processes below `pid` (a gateway's log writer, its workers and theirs)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except FileNotFoundError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except FileNotFoundError:
                continue
            found += kids
            todo += kids
    return found


def cpu_ticks(pid: int) -> tuple[int, int]:
    """The CPU a process spent in user space and in the kernel (utime, stime: all
    threads), in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[11]), int(fields[12])


def _ticks(pid: int) -> int:
    return sum(cpu_ticks(pid))


def _status_kb(pid: int, *keys: str) -> list[int]:
    values = dict.fromkeys(keys, 0)
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(":", 1)[0]
            if key in values:
                values[key] = int(line.split()[1])
    return [values[k] for k in keys]


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


@dataclass
class ProcSample:
    """CPU of a process and of every process below it (its CPU counts, wherever it runs);
    memory of the process itself, and the proportional set size of the whole tree."""

    ticks: int
    rss_kb: int
    hwm_kb: int
    children: int = 0
    tree_pss_kb: int = 0
    children_hwm_kb: int = 0

    @classmethod
    def of(cls, pid: int) -> ProcSample:
        kids = descendants(pid)
        ticks = _ticks(pid)
        kids_hwm = 0
        for kid in kids:
            try:
                ticks += _ticks(kid)
                kids_hwm += _status_kb(kid, "VmHWM")[0]
            except FileNotFoundError:  # exited meanwhile
                pass
        rss, hwm = _status_kb(pid, "VmRSS", "VmHWM")
        pss = _pss_kb(pid) + sum(_pss_kb(k) for k in kids)
        return cls(ticks, rss, hwm, len(kids), pss, kids_hwm)


@dataclass
class Server:
    """A process under test (or the upstream), started by this run."""

    name: str
    port: int
    proc: subprocess.Popen[bytes]
    ready_s: float = 0.0
    ready_cpu_s: float = 0.0  # CPU the process tree used until ready (steadier than wall)
    idle_rss_mb: float = 0.0
    responses: int = 0  # what wrk saw completed, warm-ups included
    store: Path | None = None  # a gateway's SQLite store: its request log is counted

    @property
    def pid(self) -> int:
        return self.proc.pid

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def start_server(
    name: str,
    cmd: list[str],
    port: int,
    ready_path: str,
    cpu: int | set[int],
    env: dict[str, str],
    cwd: Path,
    log: Path,
) -> Server:
    with open(log, "wb") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_pinned(cpu),
            start_new_session=True,
        )
    server = Server(name, port, proc)
    try:
        server.ready_s = wait_http(port, ready_path, started + 60, proc) - started
        server.ready_cpu_s = ProcSample.of(proc.pid).ticks / CLK_TCK
    except BenchError as exc:
        stop(proc)
        raise BenchError(f"{name}: {exc}; see {log}") from None
    return server


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


# ---- HTTP helpers (stdlib, only for checks, never under load) -----------------------------


def http_request(
    port: int, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data else {}
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def wait_http(port: int, path: str, deadline: float, proc: subprocess.Popen[bytes]) -> float:
    """Poll until GET path answers 200; returns when it did (perf_counter)."""
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"exited with {proc.returncode} before answering {path}")
        try:
            status, _, _ = http_request(port, "GET", path)
            if status == 200:
                return time.perf_counter()
        except OSError:
            pass
        time.sleep(0.005)
    raise BenchError(f"no 200 from 127.0.0.1:{port}{path} in time")


def chat_body(kind: str, model: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": "Say hello in five words."}],
        "max_tokens": 32,
    }
    if kind != "plain":
        body["stream"] = True
    return body


def sse_payloads(raw: bytes) -> list[bytes]:
    return [line[5:].strip() for line in raw.split(b"\n") if line.startswith(b"data:")]


def check_gateway(port: int, upstream_port: int, engine: bool = False) -> list[str]:
    """Answers through the gateway are 200 and carry the client's model name; fail loudly."""
    done = []
    if engine:
        status, headers, raw = http_request(
            port, "POST", "/v1/chat/completions", chat_body("plain", ENGINE_MODEL)
        )
        where = f"gateway answer from the real engine for {ENGINE_MODEL!r}"
        if status != 200 or json.loads(raw).get("model") != ENGINE_MODEL:
            raise BenchError(f"{where}: HTTP {status}: {raw[:300]!r}")
        done.append(f"engine: 200, model {ENGINE_MODEL!r}, route {headers['x-fleetgate-route']}")
    for kind, model in CLIENT_MODELS.items():
        status, headers, raw = http_request(
            port, "POST", "/v1/chat/completions", chat_body(kind, model)
        )
        where = f"gateway {kind} answer for {model!r}"
        if status != 200:
            raise BenchError(f"{where}: HTTP {status}: {raw[:300]!r}")
        if "x-fleetgate-route" not in headers:
            raise BenchError(f"{where}: no X-Fleetgate-Route header")
        if kind == "plain":
            answer = json.loads(raw)
            if answer.get("model") != model:
                raise BenchError(f"{where}: model is {answer.get('model')!r}")
            if "bench-ok" not in answer["choices"][0]["message"]["content"]:
                raise BenchError(f"{where}: unexpected content {raw[:200]!r}")
        else:
            if not headers.get("content-type", "").startswith("text/event-stream"):
                raise BenchError(f"{where}: content-type {headers.get('content-type')!r}")
            payloads = sse_payloads(raw)
            if not payloads or payloads[-1] != b"[DONE]":
                raise BenchError(f"{where}: the stream does not end with [DONE]")
            chunks = [json.loads(p) for p in payloads[:-1]]
            wrong = {c.get("model") for c in chunks} - {model}
            if wrong:
                raise BenchError(f"{where}: chunks carry model(s) {sorted(map(str, wrong))}")
            with_choices = sum(1 for c in chunks if c.get("choices"))
            if with_choices != STREAM_CHUNKS or "usage" not in chunks[-1]:
                raise BenchError(
                    f"{where}: {with_choices} completion chunks (want {STREAM_CHUNKS}) "
                    "and a final usage chunk"
                )
        done.append(f"{kind}: 200, model {model!r}, route {headers['x-fleetgate-route']}")
    _, _, raw = http_request(upstream_port, "GET", "/_stats")
    seen = json.loads(raw)["models"]
    for kind, name in UPSTREAM_MODELS.items():
        if seen.get(name, 0) < 1:
            raise BenchError(
                f"the upstream never saw model {name!r} for {kind} (saw {sorted(seen)}): "
                "the gateway did not rewrite the model name on the way up"
            )
    done.append(f"upstream saw {sorted(seen)}")
    return done


# ---- load ---------------------------------------------------------------------------------


def run_wrk(
    url: str, sc: Scenario, duration: float, cpu: int, max_tokens: int = 32
) -> dict[str, Any]:
    env = dict(
        os.environ,
        BENCH_MODEL=sc.model,
        BENCH_STREAM=str(int(sc.stream)),
        BENCH_MAX_TOKENS=str(max_tokens),
    )
    cmd = [
        "wrk",
        "-t1",
        f"-c{sc.conc}",
        f"-d{max(1, round(duration))}s",  # wrk takes whole seconds
        "--timeout",
        "10s",
        "--latency",
        "-s",
        str(LUA),
        url,
    ]
    proc = subprocess.run(
        cmd,
        env=env,
        capture_output=True,
        text=True,
        timeout=duration + 60,
        preexec_fn=_pinned(cpu),
        check=False,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("WRK_JSON "):
            return dict(json.loads(line[len("WRK_JSON ") :]))
    raise BenchError(f"wrk gave no result (rc {proc.returncode}): {proc.stderr or proc.stdout}")


def start_profiler(pid: int, duration: float, cpu: int, out: Path) -> subprocess.Popen[bytes]:
    if shutil.which("py-spy") is None:
        raise BenchError("PROFILE=1 needs py-spy (pip install py-spy)")
    cmd = [
        "py-spy",
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(max(1, round(duration))),
        "--rate",
        "250",
        "--format",
        "raw",
        "--nonblocking",
        "-o",
        str(out),
    ]
    return subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_pinned(cpu)
    )


def measure(
    target: Server,
    sc: Scenario,
    url: str,
    upstream: Server | None,
    s: Settings,
    profile_to: Path | None = None,
) -> dict[str, Any]:
    """One closed-loop wrk run; CPU and memory of `target` (and the upstream) around it."""
    max_tokens = s.engine_max_tokens if sc.kind == "engine" else 32
    if s.warmup > 0:
        target.responses += int(run_wrk(url, sc, s.warmup, s.load_cpu, max_tokens)["requests"])
    profiler = (
        start_profiler(target.pid, s.duration, s.load_cpu, profile_to) if profile_to else None
    )
    before = ProcSample.of(target.pid)
    up_before = ProcSample.of(upstream.pid) if upstream else None
    t0 = time.perf_counter()
    wrk = run_wrk(url, sc, s.duration, s.load_cpu, max_tokens)
    wall = time.perf_counter() - t0
    after = ProcSample.of(target.pid)
    if profiler is not None:
        profiler.wait(timeout=60)
    requests = int(wrk["requests"])
    target.responses += requests
    cpu_s = (after.ticks - before.ticks) / CLK_TCK
    row: dict[str, Any] = {
        "target": target.name,
        "scenario": sc.name,
        "kind": sc.kind,
        "conc": sc.conc,
        "requests": requests,
        "errors": sum(int(v) for v in wrk["errors"].values()),
        "rps": requests / (wrk["duration_us"] / 1e6),
        "p50_ms": wrk["p50_us"] / 1000,
        "p90_ms": wrk["p90_us"] / 1000,
        "p99_ms": wrk["p99_us"] / 1000,
        "mean_ms": wrk["mean_us"] / 1000,
        "cpu_s": cpu_s,
        "cpu_pct": 100 * cpu_s / wall,
        "cpu_us_per_req": 1e6 * cpu_s / requests if requests else None,
        "rss_mb": after.rss_kb / 1024,
        "hwm_mb": after.hwm_kb / 1024,
        "tree_pss_mb": after.tree_pss_kb / 1024,
    }
    if upstream is not None and up_before is not None:
        up_cpu = (ProcSample.of(upstream.pid).ticks - up_before.ticks) / CLK_TCK
        row["upstream_cpu_us_per_req"] = 1e6 * up_cpu / requests if requests else None
    if profile_to is not None:
        row["profile"] = str(profile_to)
    return row


def log_completeness(gateway: Server) -> dict[str, int]:
    """After a gateway stopped: its request log's rows against the responses wrk saw (a
    few more rows are expected: the checks' requests, and those in flight when a wrk run
    ended)."""
    assert gateway.store is not None
    with sqlite3.connect(gateway.store) as conn:
        rows = int(conn.execute("SELECT count(*) FROM requests").fetchone()[0])
    return {"rows": rows, "responses": gateway.responses}


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median req/s, with the range of all runs and the median CPU/request."""
    ordered = sorted(runs, key=lambda r: r["rps"])
    row = dict(ordered[(len(ordered) - 1) // 2])
    row["runs"] = len(runs)
    row["rps_min"], row["rps_max"] = ordered[0]["rps"], ordered[-1]["rps"]
    cpu = [r["cpu_us_per_req"] for r in runs if r["cpu_us_per_req"] is not None]
    row["cpu_us_per_req_runs"] = cpu
    row["cpu_us_per_req"] = statistics.median(cpu) if cpu else None
    # the tail of each run too: on a shared machine one run's p99 can be anyone's
    row["p99_ms_runs"] = [r["p99_ms"] for r in runs]
    row["p99_ms_median"] = statistics.median(row["p99_ms_runs"])
    row["errors"] = sum(r["errors"] for r in runs)
    return row


# ---- report -------------------------------------------------------------------------------


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _mark(ok: bool) -> str:
    return "✅" if ok else "❌"


def compare(rows: list[dict[str, Any]]) -> None:
    """Add the versus-direct figures to every other target's rows."""
    direct = {r["scenario"]: r for r in rows if r["target"] == "direct"}
    for r in rows:
        d = direct.get(r["scenario"])
        if r["target"] == "direct" or d is None:
            continue
        r["added_p50_ms"] = r["p50_ms"] - d["p50_ms"]
        r["p50_ratio"] = r["p50_ms"] / d["p50_ms"] if d["p50_ms"] else None
        r["p99_ratio"] = r["p99_ms"] / d["p99_ms"] if d["p99_ms"] else None


def paired_cpu_ratio(row: dict[str, Any], floor: dict[str, Any]) -> float | None:
    """The median of the target's CPU per request over the floor's, run by run: the runs
    of one repetition follow each other within seconds, so a machine whose speed drifts
    over minutes slows both sides of a pair alike (a ratio of the two medians mixes runs
    minutes apart)."""
    ours, theirs = row["cpu_us_per_req_runs"], floor["cpu_us_per_req_runs"]
    if not ours or len(ours) != len(theirs):
        return None
    return statistics.median(a / b for a, b in zip(ours, theirs, strict=True))


def target_checks(result: dict[str, Any]) -> list[dict[str, Any]]:
    """fleetgate against the issue's targets. Paced streams are shown but informational:
    the targets were set with whole-at-once streams, and even the floor misses them paced."""
    checks = []
    floor = {r["scenario"]: r for r in result["rows"] if r["target"] == "baseline"}
    raw = {r["scenario"]: r for r in result["rows"] if r["target"] == RAW_FLOOR}

    def add(what: str, limit: str, value: str, ok: bool, info: bool = False) -> None:
        checks.append({"what": what, "limit": limit, "value": value, "ok": ok, "info": info})

    for r in result["rows"]:
        if r["target"] != GATEWAY:
            continue
        limit = cpu_target(r["kind"])
        streams = ("stream", "paced", "resumable", "twin")
        what = "CPU per 20-chunk stream" if r["kind"] in streams else "CPU per request"
        us = r["cpu_us_per_req"]
        if us is None:
            add(f"{what} ({r['scenario']})", f"≤ {limit:g} µs", "no requests", False)
            continue
        value = f"{us:.0f} µs"
        if r["scenario"] in floor:
            value += f" (floor {floor[r['scenario']]['cpu_us_per_req']:.0f})"
        add(
            f"{what} ({r['scenario']})",
            f"≤ {limit:g} µs",
            value,
            us <= limit,
            info=r["kind"] in ("paced", "engine"),  # engine: a few req/s, idle work weighs
        )
        base = floor.get(r["scenario"])
        ratio = paired_cpu_ratio(r, base) if base is not None else None
        if ratio is not None:
            add(
                f"CPU ÷ floor ({r['scenario']}), median of the runs' pairs",
                f"≤ {TARGET_FLOOR_CPU_RATIO:g}",
                f"{ratio:.2f}",
                ratio <= TARGET_FLOOR_CPU_RATIO,
                info=r["kind"] in ("paced", "engine"),
            )
        raw_row = raw.get(r["scenario"])
        raw_ratio = paired_cpu_ratio(r, raw_row) if raw_row is not None else None
        if raw_ratio is not None:  # issue 42's: shown, not yet held to
            add(
                f"CPU ÷ raw floor ({r['scenario']}), median of the runs' pairs",
                f"≤ {TARGET_RAW_CPU_RATIO:g}",
                f"{raw_ratio:.2f}",
                raw_ratio <= TARGET_RAW_CPU_RATIO,
                info=True,
            )
        if base is not None and r["kind"] == "plain" and r["conc"] in (1, 64):
            p99 = r["p99_ms_median"] / base["p99_ms_median"]
            add(
                f"p99 ÷ floor ({r['scenario']}), medians of the runs",
                f"≤ {TARGET_FLOOR_P99_RATIO:g}",
                f"{p99:.2f}",
                p99 <= TARGET_FLOOR_P99_RATIO,
            )
        if r["kind"] == "plain" and r["conc"] == 1 and "added_p50_ms" in r:
            added = r["added_p50_ms"]
            add(
                "added p50 at c=1",
                f"≤ {TARGET_ADDED_P50_C1_MS} ms",
                f"{added:.3f} ms",
                added <= TARGET_ADDED_P50_C1_MS,
            )
    off = {r["scenario"]: r for r in result["rows"] if r["target"] == GATEWAY}
    for r in result["rows"]:  # tracing on against off, run by run
        if not r["target"].startswith(f"{GATEWAY}-trace") or r["scenario"] not in off:
            continue
        ratio = paired_cpu_ratio(r, off[r["scenario"]])
        if ratio is None:
            continue
        one = r["target"] == f"{GATEWAY}-trace1"
        add(
            f"CPU with tracing ÷ without, {r['target']} ({r['scenario']})",
            f"≤ {TARGET_TRACING_CPU_RATIO:g}" if one else "—",
            f"{ratio:.3f}",
            ratio <= TARGET_TRACING_CPU_RATIO,
            info=not one or r["kind"] in ("paced", "engine"),
        )
    errors = sum(r["errors"] for r in result["rows"] if r["target"] == GATEWAY)
    add("errors under load (socket, timeout, non-2xx)", "0", str(errors), errors == 0)
    gw = result["servers"][GATEWAY]
    if "log" in gw:
        rows, responses = gw["log"]["rows"], gw["log"]["responses"]
        add(
            "request log complete (rows ≥ responses)",
            f"≥ {responses:,}",
            f"{rows:,} rows",
            rows >= responses,
        )
    add(
        "peak RSS (VmHWM)",
        f"≤ {TARGET_RSS_MB:g} MB",
        f"{gw['peak_rss_mb']:.1f} MB",
        gw["peak_rss_mb"] <= TARGET_RSS_MB,
    )
    tree = gw["peak_rss_mb"] + gw["children_peak_rss_mb"]
    add(
        "peak RSS of the process tree (VmHWM, summed)",
        f"≤ {TARGET_TREE_RSS_MB:g} MB",
        f"{tree:.1f} MB",
        tree <= TARGET_TREE_RSS_MB,
        info=True,  # issue 42's: shown, not yet held to
    )
    add(
        "ready after start (/readyz 200)",
        f"≤ {TARGET_READY_S:g} s",
        f"{gw['ready_s']:.3f} s",
        gw["ready_s"] <= TARGET_READY_S,
    )
    return checks


def markdown(result: dict[str, Any]) -> str:
    meta = result["meta"]
    repeat = f", median of {meta['repeat']} runs by req/s" if meta["repeat"] > 1 else ""
    lines = [
        f"## fleetgate overhead benchmark — {meta['date']} (commit {meta['commit']})",
        "",
        f"Servers on CPU {meta['gw_cpu']} (one worker each unless named -wN; CPU counts every "
        "process of a server's tree), wrk -t1 and the fake upstream on "
        f"CPU {meta['load_cpu']}; {meta['duration']:g} s per run after {meta['warmup']:g} s "
        f"warm-up{repeat}. Streams: {STREAM_CHUNKS} chunks + usage + [DONE], sent at once "
        f"(paced: one event every {meta['gap_ms']:g} ms). `direct` = the fake upstream itself "
        "on the servers' CPU; `baseline` = a bare ASGI+aiohttp pass-through (the floor).",
        "",
        "| scenario | target | req/s | p50 ms | p90 ms | p99 ms | p99 ms, median of runs "
        "| +p50 ms | p50 gw/direct | p99 gw/direct | CPU µs/req | CPU % | upstream µs/req "
        "| errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        cpu = _f(r["cpu_us_per_req"], 0)
        if r["target"] == GATEWAY and r["cpu_us_per_req"] is not None:
            limit = cpu_target(r["kind"])
            cpu = f"{cpu} {_mark(r['cpu_us_per_req'] <= limit)} (≤{limit:g})"
        rps = _f(r["rps"], 0)
        if r.get("runs", 1) > 1:
            rps += f" ({r['rps_min']:,.0f}-{r['rps_max']:,.0f})"
        lines.append(
            f"| {r['scenario']} | {r['target']} | {rps} | {_f(r['p50_ms'], 3)} "
            f"| {_f(r['p90_ms'], 3)} | {_f(r['p99_ms'], 3)} | {_f(r.get('p99_ms_median'), 3)} "
            f"| {_f(r.get('added_p50_ms'), 3)} "
            f"| {_f(r.get('p50_ratio'), 2)} | {_f(r.get('p99_ratio'), 2)} | {cpu} "
            f"| {_f(r['cpu_pct'], 0)} | {_f(r.get('upstream_cpu_us_per_req'), 0)} "
            f"| {r['errors']} |"
        )
    lines += ["", "| fleetgate target | limit | measured | |", "|---|---|---:|---|"]
    for c in result["checks"]:
        mark = _mark(c["ok"]) + (" (info)" if c["info"] else "")
        lines.append(f"| {c['what']} | {c['limit']} | {c['value']} | {mark} |")
    lines.append("")
    for name, info in result["servers"].items():
        tree = ""
        if info["children"]:
            tree = (
                f"; {info['children']} child process(es), their peak RSS "
                f"{info['children_peak_rss_mb']:.1f} MB, PSS of all {info['tree_pss_mb']:.1f} MB"
            )
        if "log" in info:
            tree += (
                f"; request log: {info['log']['rows']:,} rows for "
                f"{info['log']['responses']:,} responses"
            )
        lines.append(
            f"- {name}: ready {info['ready_s'] * 1000:.0f} ms after start "
            f"({info['ready_cpu_s'] * 1000:.0f} ms of CPU); RSS idle "
            f"{info['idle_rss_mb']:.1f} MB, peak (VmHWM) {info['peak_rss_mb']:.1f} MB{tree}"
        )
    return "\n".join(lines) + "\n"


# ---- the run ------------------------------------------------------------------------------


@dataclass
class Variant:
    """One fleetgate target: its name in the tables and what differs from the default."""

    name: str
    log_writer: str = "process"
    workers: int = 1
    cpus: set[int] = field(default_factory=set)  # empty: GW_CPU
    trace_ratio: float | None = None  # OpenTelemetry on, at this sample ratio
    front: str = "fleetgate"  # server.front


def variants(s: Settings) -> list[Variant]:
    """The first is the default (named `fleetgate`, held to the targets); each other
    storage.log_writer value, worker count, trace sample ratio and server front is one
    more target."""
    out = [Variant(GATEWAY, s.log_writers[0], s.workers[0], front=s.fronts[0])]
    out += [Variant(f"{GATEWAY}-{lw}", lw, s.workers[0]) for lw in s.log_writers[1:]]
    out += [Variant(f"{GATEWAY}-w{n}", s.log_writers[0], n, s.workers_cpus) for n in s.workers[1:]]
    out += [
        Variant(f"{GATEWAY}-trace{r:g}", s.log_writers[0], s.workers[0], trace_ratio=r)
        for r in s.trace_ratios
    ]
    out += [
        Variant(f"{GATEWAY}-{front}", s.log_writers[0], s.workers[0], front=front)
        for front in s.fronts[1:]
    ]
    return out


def start_engine(s: Settings, work: Path) -> Server:
    """The real llama.cpp server (one slot, one thread) on LOAD_CPU, like the upstream."""
    sys.path.insert(0, str(ROOT / "src"))
    from fleetgate.testing.llama import LlamaServer

    llama = LlamaServer(n_ctx=512, slots=1, threads=1)
    try:
        llama.start()
    except Exception as exc:  # EngineMissing, or it did not come up
        raise BenchError(f"the real engine: {exc}") from None
    assert llama.process is not None
    pin_all_threads(llama.process.pid, s.load_cpu)
    return Server("engine", llama.port, llama.process)


def write_config(
    path: Path,
    upstream_port: int,
    gateway_port: int,
    log_writer: str,
    engine: str | None,
    telemetry: dict[str, Any] | None = None,
    front: str = "fleetgate",
) -> None:
    base = f"http://127.0.0.1:{upstream_port}"
    # JSON is YAML; the upstream names differ from the client names so rewriting is exercised
    config: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": gateway_port, "front": front},
        "storage": {"log_writer": log_writer},
        "providers": [
            {
                "id": "bench-upstream",
                "kind": "openai",
                "base_url": f"{base}/v1",
                "api_key": "sk-upstream-bench",
            },
            {
                "id": "bench-upstream-paced",
                "kind": "openai",
                "base_url": f"{base}/paced/v1",
                "api_key": "sk-upstream-bench",
            },
        ],
        "deployments": [
            {
                "model": CLIENT_MODELS[kind],
                "upstream_model": UPSTREAM_MODELS[kind],
                "provider": "bench-upstream-paced" if kind == "paced" else "bench-upstream",
                "context_window": 32768,
            }
            for kind in CLIENT_MODELS
        ],
    }
    # the resumable model's second deployment: the same upstream, as an engine that can
    # continue an answer (vLLM), so the first one's streams are relayed as continuable
    # (priority 1: the first deployment serves every stream); the twin model's second
    # deployment is the same on an `openai` provider, which cannot continue
    for kind, provider in (("resumable", "vllm"), ("twin", "openai")):
        config["providers"].append(
            {
                "id": f"bench-upstream-{provider}",
                "kind": provider,
                "base_url": f"{base}/v1",
                "api_key": "x",
            }
        )
        config["deployments"].append(
            {
                "model": CLIENT_MODELS[kind],
                "upstream_model": UPSTREAM_MODELS[kind],
                "provider": f"bench-upstream-{provider}",
                "context_window": 32768,
                "priority": 1,
            }
        )
    if engine is not None:
        config["providers"].append({"id": "bench-llama", "kind": "llamacpp", "base_url": engine})
        config["deployments"].append(
            {"model": ENGINE_MODEL, "upstream_model": ENGINE_ALIAS, "provider": "bench-llama"}
        )
    if telemetry is not None:
        config["telemetry"] = telemetry
    path.write_text(json.dumps(config, indent=2))


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    return sorted(value) if isinstance(value, set) else value


def _git_commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        return git("rev-parse", "--short", "HEAD") + (
            "+dirty" if git("status", "--porcelain", "src") else ""
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run(s: Settings) -> dict[str, Any]:
    if shutil.which("wrk") is None:
        raise BenchError("wrk is not installed (Debian/Ubuntu: apt-get install -y wrk)")
    if not {s.gw_cpu, s.load_cpu} <= os.sched_getaffinity(0):
        raise BenchError(f"CPUs {s.gw_cpu} and {s.load_cpu} are not both available here")
    s.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    work = Path(tempfile.mkdtemp(prefix="fleetgate-bench-"))
    env = checkout_env()
    py = sys.executable
    started: list[Server] = []
    rows: list[dict[str, Any]] = []
    servers: dict[str, dict[str, Any]] = {}
    try:
        up_port = _free_port()
        upstream = start_server(
            "upstream",
            [
                py,
                "-m",
                "benchmarks.upstream",
                "--port",
                str(up_port),
                "--gap-ms",
                str(s.gap_ms),
                "--chunks",
                str(STREAM_CHUNKS),
            ],
            up_port,
            "/_stats",
            s.load_cpu,
            env,
            ROOT,
            work / "upstream.log",
        )
        started.append(upstream)
        engine = start_engine(s, work) if s.engine_concs else None
        if engine is not None:
            started.append(engine)
        engine_url = engine.url("/v1") if engine is not None else None
        collector, collector_endpoint = None, ""
        if s.trace_ratios:  # where the tracing targets export, on the load's CPU
            cmd, sink_port, collector_endpoint = otlp_collector(py)
            collector = start_server(
                "collector", cmd, sink_port, "/_stats", s.load_cpu, env, ROOT, work / "sink.log"
            )
            started.append(collector)
        targets = []
        for v in variants(s):
            gw_port = _free_port()
            home = work / v.name  # its own SQLite store (./data) and config
            home.mkdir()
            config_path = home / "fleet.yaml"
            telemetry = None
            if v.trace_ratio is not None and collector is not None:
                telemetry = telemetry_block(collector_endpoint, v.trace_ratio)
            write_config(
                config_path, up_port, gw_port, v.log_writer, engine_url, telemetry, v.front
            )
            cmd = [*s.gateway_cmd, "serve", "--config", str(config_path), "--port", str(gw_port)]
            if v.workers > 1:
                cmd += ["--workers", str(v.workers)]
            log = s.out / f"{stamp}-{v.name}.log"
            cpus = v.cpus or s.gw_cpu
            gateway = start_server(v.name, cmd, gw_port, "/readyz", cpus, env, home, log)
            gateway.store = home / "data" / "fleetgate.db"
            started.append(gateway)
            targets.append(gateway)
            for line in check_gateway(gateway.port, upstream.port, engine is not None):
                print(f"check ok ({v.name}): {line}", file=sys.stderr)
        if s.baseline:
            # the floor, and the floor with as many workers as each -wN target: what
            # several processes cost by themselves
            floors = [(BASELINE, 1, s.gw_cpu)]
            floors += [(f"{BASELINE}-w{n}", n, s.workers_cpus or s.gw_cpu) for n in s.workers[1:]]
            for i, (name, workers, cpus) in enumerate(floors):
                bl_port = _free_port()
                cmd = [py, "-m", "benchmarks.baseline", "--port", str(bl_port)]
                cmd += ["--upstream", upstream.url(""), "--workers", str(workers)]
                if engine is not None:
                    cmd += ["--engine", engine.url("")]
                log = work / f"{name}.log"
                baseline = start_server(name, cmd, bl_port, "/readyz", cpus, env, ROOT, log)
                started.append(baseline)
                targets.insert(i, baseline)
        if s.raw_floor:
            raw_port = _free_port()
            cmd = [py, "-m", "benchmarks.raw_floor", "--port", str(raw_port)]
            cmd += ["--upstream", upstream.url("")]
            log = work / f"{RAW_FLOOR}.log"
            raw = start_server(RAW_FLOOR, cmd, raw_port, "/readyz", s.gw_cpu, env, ROOT, log)
            started.append(raw)
            targets.insert(0, raw)
        if s.rsgi_floor:
            granian = shutil.which("granian")
            if granian is None:
                raise BenchError("RSGI=1 needs granian (pip install granian)")
            rsgi_port = _free_port()
            cmd = [granian, "--interface", "rsgi", "--workers", "1", "--runtime-mode", "st"]
            cmd += ["--runtime-threads", "1", "--loop", "uvloop", "--no-ws"]
            cmd += ["--port", str(rsgi_port), "benchmarks.rsgi_floor:app"]
            rsgi_env = {**env, "RSGI_UPSTREAM": upstream.url("")}
            log = work / f"{RSGI_FLOOR}.log"
            rsgi = start_server(
                RSGI_FLOOR, cmd, rsgi_port, "/readyz", s.gw_cpu, rsgi_env, ROOT, log
            )
            started.append(rsgi)
            targets.insert(0, rsgi)
        for t in targets:
            t.idle_rss_mb = ProcSample.of(t.pid).rss_kb / 1024

        for sc in scenarios(s):
            print(f"running {sc.name} …", file=sys.stderr, flush=True)
            runs: dict[str, list[dict[str, Any]]] = {}
            # the real engine stays where it is (with wrk) for all three targets: what
            # changes is only what sits between them
            behind = engine if sc.kind == "engine" and engine is not None else upstream
            for rep in range(s.repeat):
                if behind is engine:
                    row = measure(engine, sc, engine.url(sc.path), None, s)
                else:  # the fake upstream plays the gateway's role, on the gateway's CPU
                    pin_all_threads(upstream.pid, s.gw_cpu)
                    try:
                        row = measure(upstream, sc, upstream.url(sc.path), None, s)
                    finally:
                        pin_all_threads(upstream.pid, s.load_cpu)
                row["target"] = "direct"
                runs.setdefault("direct", []).append(row)
                for t in targets:
                    if t.name in (RAW_FLOOR, RSGI_FLOOR) and sc.kind == "engine":
                        continue  # it knows the fake upstream only
                    prof = None
                    if s.profile and t.name == GATEWAY:
                        prof = s.out / f"{stamp}-profile-{sc.name}-{rep}.txt"
                    row = measure(t, sc, t.url("/v1/chat/completions"), behind, s, prof)
                    runs.setdefault(t.name, []).append(row)
            rows += [median_run(r) for r in runs.values()]
        for t in targets:
            if t.proc.poll() is not None:
                raise BenchError(f"{t.name} exited with {t.proc.returncode} during the run")
            end = ProcSample.of(t.pid)
            servers[t.name] = {
                "ready_s": t.ready_s,
                "ready_cpu_s": t.ready_cpu_s,
                "idle_rss_mb": t.idle_rss_mb,
                "peak_rss_mb": end.hwm_kb / 1024,
                "children": end.children,
                "children_peak_rss_mb": end.children_hwm_kb / 1024,
                "tree_pss_mb": end.tree_pss_kb / 1024,
            }
    finally:
        for server in reversed(started):
            stop(server.proc)
        for t in started:
            if t.store is not None and t.name in servers:
                servers[t.name]["log"] = log_completeness(t)
        shutil.rmtree(work, ignore_errors=True)

    compare(rows)
    result: dict[str, Any] = {
        "meta": {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "commit": _git_commit(),
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            **{k: _jsonable(v) for k, v in asdict(s).items()},
        },
        "servers": servers,
        "rows": rows,
    }
    result["checks"] = target_checks(result)
    result["all_targets_met"] = all(c["ok"] for c in result["checks"] if not c["info"])
    table = markdown(result)
    (s.out / f"{stamp}.json").write_text(json.dumps(result, indent=2) + "\n")
    (s.out / f"{stamp}.md").write_text(table)
    shutil.copyfile(s.out / f"{stamp}.json", s.out / "latest.json")
    print(table)
    print(f"results: {s.out / (stamp + '.json')}", file=sys.stderr)
    return result


def main() -> int:
    try:
        result = run(Settings.from_env())
    except BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 2
    return 0 if result["all_targets_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
