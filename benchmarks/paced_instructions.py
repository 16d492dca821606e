"""Instructions per relayed chunk of a paced stream, counted by valgrind's callgrind.

`paced_streams.py` measures CPU seconds per chunk, which move with whatever else the machine
runs; instruction counts do not. This starts two `fleetgate serve` under `valgrind
--tool=callgrind --trace-children=yes` (collection off), each in front of its own paced
upstream (`upstream.py --pace-streams`: one event per write, `PACE_MS` apart), one streaming
`LOW` chunks per answer and the other `HIGH`. After a warm-up wave it switches collection on
in every process of each tree (the request-log writer included), runs `ROUNDS` waves of
`STREAMS` streams at once through `paced_client.py`, waits for their log rows, switches
collection off, and subtracts what the same tree does by the clock alone over as long. What
a stream costs besides its chunks (accept, plan, the upstream exchange, record, log row) is
the same in both; the difference, over the chunks it adds, is the cost of one relayed chunk:
the upstream read, the event checks, the usage tail, the rename and the client's write (the
system calls' own kernel work not counted).

Under valgrind the gateway runs ~50 times slower: the pace must leave room for each event to
be handled on its own (the client's gap p50 is printed; near `PACE_MS` it was). Keep
`STREAMS` times 1.5 ms well under `PACE_MS`.

Run: `python3 -m benchmarks.paced_instructions` (env: `STREAMS` 8, `ROUNDS` 2, `PACE_MS` 30,
`LOW` 8, `HIGH` 40, `TARGET` "fleetgate" (or "raw": the raw floor, `raw_floor.py`, the same
way), `KEEP`: a folder the dumps of the `HIGH` run are copied to, for `callgrind_annotate`).
Needs valgrind.
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

from benchmarks.instructions import Target, _callgrind, _counted, _wait_rows
from benchmarks.run import (
    CLIENT_MODELS,
    ROOT,
    BenchError,
    Server,
    _free_port,
    _git_commit,
    checkout_env,
    start_server,
    stop,
    write_config,
)


def _client(port: int, streams: int, rounds: int, pace_ms: float, chunks: int) -> dict[str, float]:
    cmd = [sys.executable, "-m", "benchmarks.paced_client", "--port", str(port)]
    cmd += ["--model", CLIENT_MODELS["paced"], "--streams", str(streams)]
    cmd += ["--rounds", str(rounds), "--pace-ms", str(pace_ms), "--events", str(chunks + 2)]
    cmd += ["--stall", "100"]
    out = subprocess.run(cmd, cwd=ROOT, env=checkout_env(), capture_output=True, timeout=900)
    if out.returncode != 0:
        raise BenchError(f"the client failed: {out.stderr.decode()[-2000:]}")
    row = dict(json.loads(out.stdout))
    if row["errors"] or row["short"]:
        raise BenchError(f"streams failed or came short: {row}")
    return row


def main() -> int:
    env_ = os.environ
    streams, rounds = int(env_.get("STREAMS", "8")), int(env_.get("ROUNDS", "2"))
    pace = float(env_.get("PACE_MS", "30"))
    low, high = int(env_.get("LOW", "8")), int(env_.get("HIGH", "40"))
    keep = Path(env_["KEEP"]) if env_.get("KEEP") else None
    raw = env_.get("TARGET", "fleetgate") == "raw"
    env = dict(checkout_env(), PYTHONHASHSEED="0")
    work = Path(tempfile.mkdtemp(prefix="fleetgate-paced-instr-"))
    started: list[Server] = []
    targets: dict[int, Target] = {}
    try:
        for chunks in (low, high):
            up_port = _free_port()
            cmd = [sys.executable, "-m", "benchmarks.upstream", "--port", str(up_port)]
            cmd += ["--pace-streams", "--gap-ms", str(pace), "--chunks", str(chunks)]
            log = work / f"up{chunks}.log"
            started.append(
                start_server("upstream", cmd, up_port, "/_stats", {0, 1}, env, ROOT, log)
            )
            home = work / f"gw{chunks}"
            (home / "cg").mkdir(parents=True)
            port = _free_port()
            cmd = [*_callgrind(home / "cg"), sys.executable, "-m"]
            if raw:
                cmd += ["benchmarks.raw_floor", "--port", str(port)]
                cmd += ["--upstream", f"http://127.0.0.1:{up_port}"]
            else:
                write_config(home / "fleet.yaml", up_port, port, "process", None)
                cmd += ["fleetgate", "serve", "--config", str(home / "fleet.yaml")]
                cmd += ["--port", str(port)]
            server = start_server(
                "fleetgate", cmd, port, "/readyz", {0, 1}, env, home, work / "gw.log"
            )
            started.append(server)
            store = None if raw else home / "data" / "fleetgate.db"
            targets[chunks] = Target("fleetgate", server, home / "cg", store)
        per: dict[int, tuple[float, dict[str, float]]] = {}
        for chunks, t in targets.items():
            _client(t.server.port, streams, 1, pace, chunks)  # warm-up, not counted
            t.sent += streams
            _wait_rows(t)
            row: dict[str, float] = {}

            def load(t: Target = t, chunks: int = chunks, row: dict[str, float] = row) -> None:
                row.update(_client(t.server.port, streams, rounds, pace, chunks))
                t.sent += streams * rounds
                _wait_rows(t)

            began = time.monotonic()
            own, kids = _counted(t, load, keep if chunks == high else None)
            elapsed = time.monotonic() - began
            idle_s = min(elapsed, 5.0)
            idle = sum(_counted(t, lambda s=idle_s: time.sleep(s))) / idle_s
            per[chunks] = (own + kids - idle * elapsed, row)
            print(
                f"{chunks} chunks: {(own + kids) / 1e6:.1f} M instructions, clock "
                f"{idle * elapsed / 1e6:.1f} M over {elapsed:.1f} s, client gap p50 "
                f"{row['gap_p50_ms']:.1f} ms p99 {row['gap_p99_ms']:.1f} ms",
                file=sys.stderr,
                flush=True,
            )
    except BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 2
    finally:
        for server in reversed(started):
            stop(server.proc)
        shutil.rmtree(work, ignore_errors=True)
    n = streams * rounds
    per_chunk = (per[high][0] - per[low][0]) / (n * (high - low))
    per_stream = per[low][0] / n - low * per_chunk
    print(
        f"{'raw floor' if raw else 'fleetgate'}, commit {_git_commit()}: "
        f"{per_chunk / 1e3:.1f} k instructions per relayed chunk, "
        f"{per_stream / 1e3:.0f} k per stream besides its chunks ({n} streams of {low} and "
        f"{high} chunks, {pace:g} ms apart, {streams} at once)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
