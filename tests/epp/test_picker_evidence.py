"""What the picker learns and keeps while Envoy carries the bytes: the request log with the
endpoint, affinity across turns, exact counts near a boundary, an answer cut before its
end, and how it is operated (its HTTP side through Envoy, its gRPC health)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import httpx
import openai
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from fleetgate.control.plane import ControlOptions
from fleetgate.epp.picker import Pick
from fleetgate.epp.protocol import BODY_MODES, EXT_PROC_SERVICE
from fleetgate.testing.fake_engine import Fault
from tests.epp.bootstraps import gateway_filter
from tests.epp.stack import EppStack
from tests.harness import Stack, client_requests, deployment, provider, wait_until
from tests.tiers import chat_calls, tiered_config, words

ADMIN = "admin-secret"


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=20)


def _records(stack: Stack) -> list[Any]:
    assert stack.gateway is not None
    return list(stack.gateway.pipeline.recent._records.values())


def _replicas(stack: Stack, n: int) -> dict[str, Any]:
    engines = [stack.engine(f"r{i}") for i in range(1, n + 1)]
    return {
        "providers": [provider(e.name, e) for e in engines],
        "deployments": [deployment("m", e.name) for e in engines],
    }


def test_the_request_log_holds_each_request_with_its_endpoint(
    stack: Stack, epp: EppStack, tmp_path: Path
):
    options = ControlOptions(data_dir=str(tmp_path / "data"), admin_key=ADMIN)
    envoy = epp.start(_replicas(stack, 2), options=options)
    client = _client(envoy.url)
    ids = []
    for text in ("one", "two", "three"):
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": text}]
        )
        ids.append(raw.headers["x-request-id"])  # the id the picker gave the request
    engines = {f"127.0.0.1:{e.port}": e.name for e in stack.engines.values()}
    for request_id in ids:
        # the picker's HTTP side, reached through Envoy like any path it does not pick for
        url = f"{envoy.url}/v1/requests/{request_id}"
        wait_until(lambda u=url: httpx.get(u).status_code == 200, 5, "the record kept")
        record = httpx.get(url).json()
        assert record["status"] == 200
        assert record["deployment_id"] in ("r1", "r2")
        assert engines[record["notes"]["endpoint"]] == record["deployment_id"]
    # the same rows reach the stored request log, read through the admin API
    headers = {"Authorization": f"Bearer {ADMIN}"}

    def logged() -> list[dict[str, Any]]:
        resp = httpx.get(f"{envoy.url}/admin/requests", headers=headers)
        assert resp.status_code == 200, resp.text
        return [r for r in resp.json()["data"] if r["request_id"] in ids]

    wait_until(lambda: len(logged()) == 3, 10, "three rows in the request log")
    assert {r["deployment_id"] for r in logged()} <= {"r1", "r2"}


def test_each_conversation_stays_on_one_replica(stack: Stack, epp: EppStack):
    """Turns of one conversation follow its first (affinity learned from the answers the
    picker saw), while new conversations spread over the replicas."""
    envoy = epp.start(_replicas(stack, 3))
    client = _client(envoy.url)
    talks: list[list[dict[str, Any]]] = [
        [{"role": "system", "content": f"You are tutor number {n}. " * 30}] for n in range(6)
    ]
    served: list[list[str]] = [[] for _ in talks]
    for turn in range(3):
        for n, talk in enumerate(talks):  # interleaved, as clients would be
            talk.append({"role": "user", "content": f"Question {turn}?"})
            answer = client.chat.completions.create(model="m", messages=talk, max_tokens=8)
            served[n].append(answer.system_fingerprint or "")
            talk.append({"role": "assistant", "content": answer.choices[0].message.content})
    assert all(len(set(replicas)) == 1 for replicas in served), served
    assert len({replicas[0] for replicas in served}) >= 2, served  # not all on one


def test_an_exact_count_is_asked_near_the_boundary(stack: Stack, epp: EppStack):
    """The fake engine counts words: a prompt the estimate costs low, placed by its count."""
    base = stack.engine("base", context_window=1000)
    long = stack.engine("long", context_window=10000)
    envoy = epp.start(tiered_config(base, long))
    messages = [{"role": "user", "content": words(1200, ".")}]  # estimated ~950..1550
    answer = _client(envoy.url).chat.completions.create(model="m", messages=messages, max_tokens=10)
    assert answer.system_fingerprint == "fake-long"
    assert base.tokenize_calls == 1 and chat_calls(base) == 0  # counted, never sent there
    assert chat_calls(long) == 1


@pytest.mark.parametrize("body_mode", BODY_MODES)
def test_a_pick_that_needs_no_count_is_answered_in_the_turn_its_body_came(
    stack: Stack, epp: EppStack, body_mode: str
):
    """A plan with nothing to await is made and answered where the body arrived, in no task
    of its own; one that asks an exact count goes on in a task and is answered all the same."""
    base = stack.engine("base", context_window=1000)
    long = stack.engine("long", context_window=10000)
    envoy = epp.start(tiered_config(base, long), body_mode=body_mode)
    assert epp.picker is not None
    picker = epp.picker.picker
    pick = picker.pick
    answered_in: list[asyncio.Task[Any] | None] = []

    async def watched(*args: Any, **kwargs: Any) -> Pick:
        made = await pick(*args, **kwargs)
        answered_in.append(asyncio.current_task())
        return made

    picker.pick = watched  # type: ignore[method-assign]
    client = _client(envoy.url)
    short = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=10
    )
    assert short.system_fingerprint == "fake-base"
    assert base.tokenize_calls == 0
    near = [{"role": "user", "content": words(1200, ".")}]  # counted near the boundary
    counted = client.chat.completions.create(model="m", messages=near, max_tokens=10)
    assert counted.system_fingerprint == "fake-long"
    assert base.tokenize_calls == 1
    assert answered_in[0] is None  # no task: the turn the body came in
    assert isinstance(answered_in[1], asyncio.Task)  # the count was awaited in one


def test_grpc_health_says_serving_for_each_name(stack: Stack, epp: EppStack):
    epp.start(_replicas(stack, 1))
    assert epp.picker is not None
    with grpc.insecure_channel(f"127.0.0.1:{epp.picker.port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for name in ("", "liveness", "readiness", EXT_PROC_SERVICE):
            answer = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING, name


def test_grpc_health_watch_follows_readiness_and_unknown_methods_are_unimplemented(
    stack: Stack, epp: EppStack
):
    epp.start(_replicas(stack, 1))
    picker = epp.picker
    assert picker is not None
    with grpc.insecure_channel(f"127.0.0.1:{picker.port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        watch = stub.Watch(health_pb2.HealthCheckRequest(service="readiness"), timeout=10)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        stack.lt.run(picker.mark_ready(False))
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
        watch.cancel()
        try:
            stub.Check(health_pb2.HealthCheckRequest(service="nothing-of-that-name"), timeout=5)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.NOT_FOUND
        else:
            raise AssertionError("an unknown name was answered")
        unknown = channel.unary_unary("/fleetgate.Nothing/Here")
        try:
            unknown(b"", timeout=5)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNIMPLEMENTED
        else:
            raise AssertionError("an unknown method was answered")


def test_a_client_that_does_not_speak_http2_is_sent_away(stack: Stack, epp: EppStack):
    """An HTTP/1 request on the gRPC port: the picker answers with a GOAWAY
    (PROTOCOL_ERROR) and closes the connection; it keeps serving the others."""
    epp.start(_replicas(stack, 1))
    picker = epp.picker
    assert picker is not None
    with socket.create_connection(("127.0.0.1", picker.port), timeout=5) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: picker\r\n\r\n")
        received = b""
        while chunk := sock.recv(65536):  # until the picker closes the connection
            received += chunk
    frames = []
    while len(received) >= 9:
        length = int.from_bytes(received[:3], "big")
        frames.append((received[3], received[9 : 9 + length]))
        received = received[9 + length :]
    goaway = [payload for kind, payload in frames if kind == 7]
    assert goaway and int.from_bytes(goaway[0][4:8], "big") == 1  # PROTOCOL_ERROR
    with grpc.insecure_channel(f"127.0.0.1:{picker.port}") as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=5
        )
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_serve_never_imports_grpc():
    """The proxy's start-up path loads no gRPC and no Envoy protos (`-X importtime`)."""
    code = (
        "import fleetgate.launch, fleetgate.assemble, fleetgate.server.run, "
        "fleetgate.control.build, fleetgate.server.app"
    )
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        check=True,
    )
    modules = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()]
    assert "fleetgate.server.app" in modules  # the listing is the real one
    loaded = [m for m in modules if m.split(".")[0] in ("grpc", "envoy", "xds", "grpc_health")]
    assert loaded == []
    # and the picker's own path does load them (the check above can fail)
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import fleetgate.epp.run"],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()]
    assert "envoy.service.ext_proc.v3.external_processor_pb2" in loaded


def test_client_keys_are_checked_by_the_picker(stack: Stack, epp: EppStack, sqlite_url: str):
    """The same keys as the proxy: none is a 401 in the client's shape, a key for another
    model a 403; a good key passes, and the engine never sees it."""
    config = _replicas(stack, 1)
    config["auth"] = {"enabled": True}
    envoy = epp.start(config, options=ControlOptions(database_url=sqlite_url, admin_key=ADMIN))
    api = httpx.Client(base_url=envoy.url, headers={"Authorization": f"Bearer {ADMIN}"})
    secret = api.post("/admin/keys", json={"name": "app", "allowed_models": ["m"]}).json()["key"]
    other = api.post("/admin/keys", json={"name": "x", "allowed_models": ["z"]}).json()["key"]
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    url = envoy.url + "/v1/chat/completions"
    missing = httpx.post(url, json=body)
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "invalid_api_key"
    wrong = httpx.post(url, json=body, headers={"Authorization": f"Bearer {other}"})
    assert wrong.status_code == 403
    good = httpx.post(url, json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=10)
    assert good.status_code == 200
    engine = stack.engines["r1"]
    assert (
        len(client_requests(engine)) == 1
        and "Authorization" not in client_requests(engine)[0].headers
    )


@pytest.mark.parametrize("shape", ["two filters", "a gateway's one filter"])
def test_a_stream_cut_before_its_end_is_recorded_as_interrupted_and_charged_to_none(
    stack: Stack, epp: EppStack, shape: str
):
    """The upstream breaks after three events: the client gets a broken answer, and the
    record says so, not 200 and whole. The data plane does not say whether the upstream
    broke or the client left (a user's stop looks the same), so no endpoint is charged."""
    a = stack.engine("a", tokens_per_second=50, reply_words=40)
    config = {"providers": [provider("a", a)], "deployments": [deployment("m", "a")]}
    edit = gateway_filter("FULL_DUPLEX_STREAMED") if shape != "two filters" else None
    envoy = epp.start(config, edit=edit)
    a.fail_next(Fault("break_stream", after_chunks=3))
    with pytest.raises(openai.APIConnectionError):
        for _chunk in _client(envoy.url).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            pass
    # the observe call is ended by Envoy's deferred close (5 s) of an observability stream
    wait_until(lambda: len(_records(stack)) == 1, 15, "the cut stream recorded")
    record = _records(stack)[0]
    assert record.status == 200 and record.error_code == "stream_interrupted"
    assert record.attempts[-1].error_class == "stream_broken"
    gateway = stack.gateway
    assert gateway is not None
    health = gateway.pipeline.state.health("a")
    assert health.failures == 0 and health.successes == 0 and health.inflight == 0


def test_a_stream_whose_first_event_is_an_error_is_recorded_as_that_error(
    stack: Stack, epp: EppStack
):
    """A 200 stream that carries an engine's error in place of an answer (SGLang's shape,
    a message with a secret in it): recorded as the error, charged to its endpoint, its
    message redacted, as the proxy reads it."""
    a = stack.engine("a", error_style="sglang")
    key = "sk-upstream-secret-4f9a2c"
    config = {  # a hosted provider's key, which the redactor knows (the proxy's alone)
        "providers": [provider("a", a), provider("hosted", a, api_key=key)],
        "deployments": [deployment("m", "a"), deployment("other", "hosted")],
    }
    message = f"scheduler crashed serving key {key}"
    envoy = epp.start(config)
    a.fail_next(Fault("stream_error_event", status=503, message=message))
    stream = _client(envoy.url).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    with pytest.raises(openai.APIError):
        for _chunk in stream:
            pass
    wait_until(lambda: len(_records(stack)) == 1, 10, "the stream recorded")
    record = _records(stack)[0]
    attempt = record.attempts[-1]
    assert attempt.status == 503 and attempt.error_class == "server_error"
    assert "scheduler crashed" in (attempt.message or "")
    assert key not in (attempt.message or "")
    gateway = stack.gateway
    assert gateway is not None
    health = gateway.pipeline.state.health("a")
    assert health.failures == 1 and health.successes == 0 and health.inflight == 0
