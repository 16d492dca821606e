"""One process on the gateway's own server (server/serving.py): what uvicorn's process
machinery did for it is still done. Answers carry a current `date`, a port that is taken
is one clear line and status 1, and a graceful stop waits for an answer only as long as
it may."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from email.utils import parsedate_to_datetime
from pathlib import Path

import httpx

from fleetgate.server.serving import Server
from tests.harness import Stack, gateway_on_one_engine, wait_until
from tests.test_serve import checkout_env, one_model_config


def test_answers_carry_the_date_and_the_server_name(stack: Stack) -> None:
    gateway_on_one_engine(stack)
    assert isinstance(stack._server, Server)  # the default front runs on it
    answer = httpx.get(stack.url + "/healthz", timeout=5)
    assert answer.status_code == 200
    assert answer.headers["server"] == "fleetgate"
    assert abs(parsedate_to_datetime(answer.headers["date"]).timestamp() - time.time()) < 5


def test_a_taken_port_is_one_line_and_status_one(stack: Stack, tmp_path: Path) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    config = one_model_config(stack, tmp_path)
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "fleetgate",
                "serve",
                "--config",
                str(config),
                "--port",
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=checkout_env(tmp_path),
        )
    finally:
        holder.close()
    assert result.returncode == 1, result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "--port" in result.stderr and "Traceback" not in result.stderr


def test_a_graceful_stop_cancels_what_outlasts_its_bound(stack: Stack) -> None:
    gateway_on_one_engine(stack)
    engine = stack.engines["a"]
    engine.latency = 30  # far past the bound below
    outcomes: list[object] = []

    def ask() -> None:
        try:
            outcomes.append(
                httpx.post(
                    stack.url + "/v1/chat/completions",
                    json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                    timeout=20,
                ).status_code
            )
        except httpx.HTTPError as exc:
            outcomes.append(exc)

    asking = threading.Thread(target=ask)
    asking.start()
    wait_until(lambda: engine.active == 1, 5, "the request reached the engine")
    server = stack._server
    assert isinstance(server, Server)
    server.graceful_seconds = 0.5
    began = time.monotonic()
    stack.stop_gateway()
    assert time.monotonic() - began < 5  # not the answer's 30 s
    asking.join(10)
    assert outcomes and outcomes[0] != 200  # cut off: never passed as a whole answer
