"""A collector that is down, or up and stuck, costs no request anything; telemetry that is
off loads no OpenTelemetry or gRPC module at all."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.harness import Stack, wait_until
from tests.telemetry.receivers import HttpReceiver
from tests.telemetry.test_traces import chat, fallback_fleet, telemetry, traceparent

ROOT = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    return port


def _gauge(stack: Stack, name: str) -> float:
    for line in httpx.get(f"{stack.url}/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


@pytest.mark.parametrize("wire", ["grpc", "http/protobuf"])
def test_a_dead_collector_costs_no_request(stack: Stack, wire: str) -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    block = telemetry(endpoint, wire)
    block["otlp"].update(retries=1, retry_backoff_seconds=0.05)  # given up soon
    fallback_fleet(stack, block)
    for _ in range(10):
        assert chat(stack, headers={"traceparent": traceparent()}).status_code == 200
    wait_until(lambda: _gauge(stack, "fleetgate_spans_failed") > 0, 10, "failed exports counted")
    assert _gauge(stack, "fleetgate_otlp_retries") > 0  # each was sent again first
    assert _gauge(stack, "fleetgate_spans_exported") == 0
    assert chat(stack).status_code == 200


def test_a_stuck_collector_delays_no_request_and_drops_are_counted(stack: Stack) -> None:
    stuck = HttpReceiver(hang=True)  # reads each export and never answers
    stack.lt.run(stuck.start())
    try:
        block = telemetry(stuck.endpoint, "http/protobuf", max_queue_spans=8)
        block["otlp"]["timeout_seconds"] = 30
        fallback_fleet(stack, block)
        assert chat(stack).status_code == 200
        wait_until(lambda: len(stuck.raw) == 1, 10, "the first export is stuck in the collector")
        began = time.monotonic()
        for _ in range(20):  # every span now waits behind the stuck export, 8 at most
            assert chat(stack).status_code == 200
        # all served while the export waits for its 30 s deadline
        assert time.monotonic() - began < 20
        assert len(stuck.raw) == 1
        wait_until(lambda: _gauge(stack, "fleetgate_spans_dropped") > 0, 10, "drops counted")
    finally:
        stack.stop_gateway()
        stack.lt.run(stuck.stop())


_OFF_SCRIPT = """
import asyncio, json, socket, sys
from fleetgate.config import validate_config
from fleetgate.fleet import FleetHolder, build_fleet
from fleetgate.pipeline.core import Pipeline
from fleetgate.server.app import Gateway
from fleetgate.server.run import server_for
from fleetgate.testing import FakeEngine

async def main():
    engine = FakeEngine("a")
    await engine.start()
    config, problems = validate_config({
        "providers": [{"id": "pa", "kind": "vllm", "base_url": engine.url + "/v1"}],
        "deployments": [{"id": "pa", "model": "m", "provider": "pa"}],
    })
    gateway = Gateway(Pipeline(FleetHolder(build_fleet(config))))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = server_for(gateway, "127.0.0.1", 0)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    port = sock.getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/json\\r\\n"
        b"traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\\r\\n"
        + f"Content-Length: {len(body)}\\r\\n\\r\\n".encode() + body
    )
    head = await reader.readuntil(b"\\r\\n\\r\\n")
    server.should_exit = True
    await task
    await engine.stop()
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("opentelemetry", "grpc"))
    print(json.dumps({"status": head.split()[1].decode(), "loaded": loaded,
                      "traceparent": "traceparent" in engine.requests[0].headers}))

asyncio.run(main())
"""


def test_telemetry_off_imports_no_opentelemetry_module() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    done = subprocess.run(
        [sys.executable, "-c", _OFF_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"status": "200", "loaded": [], "traceparent": False}
