"""Instructions per request of the endpoint picker behind the real Envoy, and of the proxy,
counted by valgrind's callgrind in one run.

`benchmarks/epp.py` compares CPU seconds, which move by 10 to 30 % between runs on a shared
machine; instruction counts do not. This starts `fleetgate epp` and `fleetgate serve` on the
same fleet (`benchmarks.epp.fleet`: one fake upstream, the same model names both ways), each
under `valgrind --tool=callgrind --trace-children=yes` with collection off, and Envoy (not
under valgrind) with `fleetgate envoy-config`'s bootstrap in front of the picker. For each
scenario it sends a warm-up, then `REQUESTS` requests with `hey` (through Envoy to the
picker; straight to the proxy), with collection on in every process of the tree (the
request-log writer included) until the request log holds a row for each request, and
divides the tree's instructions by the requests (`benchmarks.instructions.measure`).

Run: `python3 -m benchmarks.epp_instructions` (env: `REQUESTS` 1000, `WARMUP` 100, `CONCS`
"1 16", `KINDS` "plain stream", `PATHS` "picker proxy", `BODY_MODE` (the bootstrap's default),
`CALLGRIND_DIR`: keep each scenario's dumps there, for `callgrind_annotate`; `SINGLE=1`: the
one ext_proc filter a gateway writes, the response on the pick's call). Needs
valgrind, hey and the `test` extra (Envoy's wheel). Under valgrind the picker answers about
50 times slower than at full speed, so Envoy's timeouts towards it are raised here; latency
means nothing in this run, only the counts.
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

import yaml

from benchmarks.epp import SINGLE, _envoy, fleet, shaped
from benchmarks.instructions import (
    Counts,
    Target,
    _callgrind,
    _control,
    guarded,
    load_knobs,
    measure,
    tools_missing,
)
from benchmarks.run import (
    BenchError,
    Server,
    _free_port,
    _git_commit,
    checkout_env,
    stop,
    wait_http,
)
from fleetgate.epp.protocol import BODY_MODES

PICKER, PROXY = "picker", "proxy"
# Envoy's waits for the picker, raised for a picker that runs under valgrind
SLOW_TIMEOUT = "60s"


def _start(name: str, cmd: list[str], port: int, env: dict[str, str], work: Path) -> Server:
    with open(work / f"{name}.log", "wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = Server(name, port, proc)
    try:
        wait_http(port, "/readyz", time.perf_counter() + 300, proc)
    except BenchError as exc:
        stop(proc)
        raise BenchError(f"{name}: {exc}; see {work / f'{name}.log'}") from None
    return server


def slow_bootstrap(bootstrap: str) -> dict[str, Any]:
    """The bootstrap with Envoy's timeouts towards the picker raised (nothing else changed,
    but for `SINGLE=1`: a gateway's one-filter shape, `benchmarks.epp.shaped`)."""
    doc = yaml.safe_load(bootstrap)
    if SINGLE:
        doc = shaped(doc)
    hcm = doc["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    for f in hcm["typed_config"]["http_filters"]:
        config = f.get("typed_config", {})
        if "grpc_service" in config:
            config["grpc_service"]["timeout"] = SLOW_TIMEOUT
            if "message_timeout" in config:
                config["message_timeout"] = SLOW_TIMEOUT
    return doc


def main() -> int:
    return guarded(run)


def run() -> int:
    if tools_missing():
        return 2
    n, warmup, concs, kinds = load_knobs(1000, 100, "1 16")
    paths = os.environ.get("PATHS", f"{PICKER} {PROXY}").split()
    keep_dir = os.environ.get("CALLGRIND_DIR")
    keep = Path(keep_dir).resolve() if keep_dir else None
    work = Path(tempfile.mkdtemp(prefix="fleetgate-epp-instr-"))
    env = checkout_env()
    py = sys.executable
    procs: list[subprocess.Popen[bytes]] = []
    targets: dict[str, Target] = {}
    results: dict[str, dict[str, Counts]] = {}
    ports = {n: _free_port() for n in ("up", "epp", "http", "proxy", "listen", "admin")}
    try:
        up_cmd = [py, "-m", "benchmarks.upstream", "--port", str(ports["up"])]
        with open(work / "up.log", "wb") as out:
            procs.append(subprocess.Popen(up_cmd, env=env, stdout=out, stderr=subprocess.STDOUT))
        wait_http(ports["up"], "/_stats", time.perf_counter() + 30, procs[-1])
        if PROXY in paths:
            out_dir = work / "cg-proxy"
            out_dir.mkdir()
            config = fleet(ports["up"], ports["up"], ports["proxy"], work / "proxy-data")
            (work / "proxy.yaml").write_text(json.dumps(config))
            cmd = [py, "-m", "fleetgate", "serve", "--config", str(work / "proxy.yaml")]
            server = _start(PROXY, _callgrind(out_dir) + cmd, ports["proxy"], env, work)
            procs.append(server.proc)
            store = work / "proxy-data" / "fleetgate.db"
            targets[PROXY] = Target(PROXY, server, out_dir, store)
        if PICKER in paths:
            out_dir = work / "cg-picker"
            out_dir.mkdir()
            config = fleet(ports["up"], ports["up"], ports["http"], work / "epp-data")
            (work / "epp.yaml").write_text(json.dumps(config))
            cmd = [py, "-m", "fleetgate", "epp", "--config", str(work / "epp.yaml")]
            cmd += ["--host", "127.0.0.1", "--port", str(ports["epp"])]
            cmd += ["--http-port", str(ports["http"])]
            picker = _start(PICKER, _callgrind(out_dir) + cmd, ports["http"], env, work)
            procs.append(picker.proc)
            envoy_cmd = [py, "-m", "fleetgate", "envoy-config", "--config", str(work / "epp.yaml")]
            envoy_cmd += ["--epp", f"127.0.0.1:{ports['epp']}"]
            envoy_cmd += ["--listen", f"127.0.0.1:{ports['listen']}"]
            envoy_cmd += ["--http", f"127.0.0.1:{ports['http']}"]
            envoy_cmd += ["--admin", f"127.0.0.1:{ports['admin']}"]
            envoy_cmd += ["--body-mode", os.environ.get("BODY_MODE", BODY_MODES[0])]
            bootstrap = subprocess.run(
                envoy_cmd,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            procs.append(_envoy(slow_bootstrap(bootstrap), work, "envoy", ports["admin"]))
            # hey talks to Envoy; the counted tree is the picker's
            front = Server(PICKER, ports["listen"], picker.proc)
            store = work / "epp-data" / "fleetgate.db"
            targets[PICKER] = Target(PICKER, front, out_dir, store)
        for kind in kinds:
            for conc in concs:
                scenario = f"{kind}-c{conc}"
                for name, t in targets.items():
                    print(f"running {name} {scenario} …", file=sys.stderr, flush=True)
                    kept = keep / f"{name}-{scenario}" if keep is not None else None
                    counts = measure(t, kind, conc, n, warmup, kept)
                    results.setdefault(scenario, {})[name] = counts
    finally:
        for t in targets.values():
            _control(t.server.pid, "-i", "off")
        for proc in reversed(procs):
            stop(proc)
        shutil.rmtree(work, ignore_errors=True)
    print(report(results, n))
    return 0


def report(results: dict[str, dict[str, Counts]], n: int) -> str:
    lines = [
        f"instructions per request (callgrind), commit {_git_commit()}, {n} requests each\n",
        "| scenario | picker | proxy | picker ÷ proxy | net of the clock: picker / proxy "
        "| ÷ | of each, the log writer |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for scenario, row in results.items():
        picker, proxy = row.get(PICKER), row.get(PROXY)
        cells = [f"{c.per_request / 1e6:.3f} M" if c else "-" for c in (picker, proxy)]
        nets = " / ".join(f"{c.net_per_request / 1e6:.3f} M" if c else "-" for c in (picker, proxy))
        both = picker is not None and proxy is not None
        ratio = f"{picker.per_request / proxy.per_request:.2f}" if both else "-"
        net = f"{picker.net_per_request / proxy.net_per_request:.2f}" if both else "-"
        writers = " / ".join(
            f"{c.children / c.requests / 1e6:.3f} M" if c else "-" for c in (picker, proxy)
        )
        lines.append(
            f"| {scenario} | {cells[0]} | {cells[1]} | {ratio} | {nets} | {net} | {writers} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
