"""The gateway's own server front (server/front.py): proxied requests reach the pipeline
without the ASGI app, every other path still runs it, and what a connection must do
besides (pipelining, chunked bodies, `Expect: 100-continue`, a client gone mid-stream, a
graceful stop) holds on real sockets. `server.front: uvicorn` still selects uvicorn's
protocol."""

from __future__ import annotations

import asyncio
import http.client
import io
import socket
import threading
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from uvicorn.server import ServerState

from fleetgate.server.app import Gateway
from fleetgate.server.front import FrontProtocol
from tests.harness import (
    Recording,
    Stack,
    gateway_on_one_engine,
    raw_connection,
    until,
    wait_until,
)

CHAT = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})


class _Kept(io.BufferedReader):
    def close(self) -> None:  # http.client closes it after each answer: the next follows
        pass


class _Answers:
    """Reads one answer after another from one connection (http.client, one buffer)."""

    def __init__(self, sock: socket.socket) -> None:
        self.file = _Kept(socket.SocketIO(sock, "rb"))

    def makefile(self, _mode: str) -> Any:
        return self.file

    def next(self) -> tuple[int, dict[str, str], bytes]:
        answer = http.client.HTTPResponse(self)  # type: ignore[arg-type]
        answer.begin()
        body = answer.read()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, body


def _post(path: bytes, body: bytes, *extra: bytes) -> bytes:
    head = [b"POST " + path + b" HTTP/1.1", b"Host: gw", b"Content-Type: application/json"]
    head += [*extra, b"Content-Length: %d" % len(body)]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


@pytest.mark.parametrize("front", ["fleetgate", "uvicorn"])
def test_proxied_requests_skip_the_asgi_app(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, front: str
) -> None:
    called: list[str] = []
    asgi_call = Gateway.__call__

    async def counted(self: Gateway, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            called.append(scope["path"])
        await asgi_call(self, scope, receive, send)

    monkeypatch.setattr(Gateway, "__call__", counted)
    gateway_on_one_engine(stack, front=front)
    answer = httpx.post(stack.url + "/v1/chat/completions", content=CHAT, timeout=5)
    assert answer.status_code == 200 and answer.json()["model"] == "m"
    streamed = orjson.loads(CHAT)
    streamed["stream"] = True
    with httpx.stream("POST", stack.url + "/v1/chat/completions", json=streamed) as r:
        events = [line for line in r.iter_lines() if line.startswith("data:")]
    assert r.status_code == 200 and events[-1] == "data: [DONE]"
    assert httpx.get(stack.url + "/v1/models", timeout=5).json()["data"][0]["id"] == "m"
    if front == "fleetgate":  # only the gateway's own endpoint went through ASGI
        assert called == ["/v1/models"]
    else:
        assert called == ["/v1/chat/completions", "/v1/chat/completions", "/v1/models"]


def test_pipelined_requests_are_answered_in_order_on_one_connection(stack: Stack) -> None:
    gateway_on_one_engine(stack)
    sock = raw_connection(stack)
    sock.sendall(
        _post(b"/v1/chat/completions", CHAT, b"X-Request-Id: first")
        + b"GET /healthz HTTP/1.1\r\nHost: gw\r\nX-Request-Id: second\r\n\r\n"
        + _post(b"/v1/chat/completions", CHAT.replace(b'"m"', b'"nope"'))
        + _post(b"/v1/chat/completions", CHAT, b"X-Request-Id: fourth")
    )
    answers = _Answers(sock)
    first, second, third, fourth = (answers.next() for _ in range(4))
    assert first[0] == 200 and first[1]["x-request-id"] == "first"
    assert orjson.loads(first[2])["model"] == "m"
    assert second[0] == 200 and second[1]["x-request-id"] == "second"
    assert third[0] == 404 and orjson.loads(third[2])["error"]["code"] == "model_not_found"
    assert fourth[0] == 200 and fourth[1]["x-request-id"] == "fourth"
    sock.close()


def test_a_chunked_body_is_read_and_one_past_the_limit_refused(stack: Stack) -> None:
    gateway_on_one_engine(stack, max_body_bytes=400)
    sock = raw_connection(stack)
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n"
    halves = (CHAT[:20], CHAT[20:])
    sock.sendall(head + b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in halves) + b"0\r\n\r\n")
    status, _, body = _Answers(sock).next()
    assert status == 200 and orjson.loads(body)["model"] == "m"
    sock.close()
    sock = raw_connection(stack)  # 500 bytes, no length said beforehand
    sock.sendall(head.replace(b"/v1/chat/completions", b"/v1/messages") + b"1f4\r\n" + b"x" * 500)
    status, headers, body = _Answers(sock).next()
    assert status == 413 and headers["connection"] == "close"
    error = orjson.loads(body)
    assert error["type"] == "error"  # the path's protocol: Anthropic
    assert "larger than the 400-byte limit" in error["error"]["message"]
    sock.close()


def test_expect_100_continue_is_answered_before_the_body(stack: Stack) -> None:
    gateway_on_one_engine(stack)
    sock = raw_connection(stack)
    head, _, body = _post(b"/v1/chat/completions", CHAT, b"Expect: 100-continue").partition(
        b"\r\n\r\n"
    )
    sock.sendall(head + b"\r\n\r\n")
    assert sock.recv(1024) == b"HTTP/1.1 100 Continue\r\n\r\n"
    sock.sendall(body)
    status, _, answer = _Answers(sock).next()
    assert status == 200 and orjson.loads(answer)["model"] == "m"
    sock.close()


def test_a_client_gone_mid_stream_ends_its_request_and_its_task(stack: Stack) -> None:
    gateway_on_one_engine(stack)
    engine = stack.engines["a"]
    engine.tokens_per_second = 20  # a slow stream
    engine.reply_words = 200
    sock = raw_connection(stack)
    streamed = orjson.loads(CHAT)
    streamed["stream"] = True
    sock.sendall(_post(b"/v1/chat/completions", orjson.dumps(streamed)))
    received = b""
    while b"data:" not in received:
        received += sock.recv(4096)
    assert received.startswith(b"HTTP/1.1 200 OK\r\n")
    sock.close()
    wait_until(lambda: engine.cancelled == 1, 5, "the upstream stream cancelled")
    server = stack._server
    assert server is not None
    wait_until(lambda: not server.server_state.tasks, 5, "the request's task ended")
    wait_until(lambda: not server.server_state.connections, 5, "the connection forgotten")
    assert stack.gateway is not None
    assert stack.gateway.pipeline.state.health("pa").inflight == 0


def test_a_graceful_stop_finishes_the_answer_under_way_and_closes(stack: Stack) -> None:
    gateway_on_one_engine(stack)
    engine = stack.engines["a"]
    engine.latency = 0.5
    answers: list[httpx.Response] = []
    asking = threading.Thread(
        target=lambda: answers.append(
            httpx.post(stack.url + "/v1/chat/completions", content=CHAT, timeout=5)
        )
    )
    asking.start()
    wait_until(lambda: engine.active == 1, 5, "the request reached the engine")
    stack.stop_gateway()
    asking.join(5)
    assert answers and answers[0].status_code == 200
    assert answers[0].headers["connection"] == "close"


async def test_an_answer_leaves_in_as_few_writes_as_its_turns() -> None:
    """A whole answer is one write; a stream's head goes with its first part, at the
    turn's end; a later part, and the end, leave at once."""
    turns: list[asyncio.Event] = [asyncio.Event() for _ in range(2)]

    class Proxied:  # what the front calls for a proxied path (Gateway.proxied)
        connection_limits = None

        async def proxied(self, scope: Any, route: Any, body: bytes, reply: Any) -> None:
            if orjson.loads(body).get("stream"):
                await reply.start(200, [(b"content-type", b"text/event-stream")])
                reply.write(b"data: 1\n\n")
                await turns[0].wait()
                reply.write(b"data: 2\n\n")
                await turns[1].wait()
                await reply.end()
            else:
                await reply.whole(200, b'{"ok":true}', [(b"x-request-id", b"r")])

    config = uvicorn.Config(Proxied(), http=FrontProtocol, lifespan="off")
    config.load()
    state = ServerState()
    protocol = FrontProtocol(config, state, {}, asyncio.get_running_loop())
    transport = Recording()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    protocol.data_received(_post(b"/v1/chat/completions", CHAT))
    await until(lambda: bool(transport.writes), what="the answer")
    assert len(transport.writes) == 1
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert transport.writes[0].endswith(b'content-length: 11\r\n\r\n{"ok":true}')
    transport.writes.clear()
    protocol.data_received(_post(b"/v1/chat/completions", b'{"model": "m", "stream": true}'))
    await until(lambda: bool(transport.writes), what="the stream's head")
    head, first = transport.writes[0].split(b"\r\n\r\n", 1)
    assert b"transfer-encoding: chunked" in head and first == b"9\r\ndata: 1\n\n\r\n"
    turns[0].set()
    await until(lambda: len(transport.writes) == 2, what="the second part")
    assert transport.writes[1] == b"9\r\ndata: 2\n\n\r\n"
    turns[1].set()
    await until(lambda: len(transport.writes) == 3, what="the end")
    assert transport.writes[2] == b"0\r\n\r\n" and not transport.closed
    assert state.total_requests == 2
    protocol.connection_lost(None)


async def test_a_client_that_reads_slower_holds_the_stream_back() -> None:
    """While the transport's buffer is full (`pause_writing`), a stream's writer is told
    to drain and waits; it goes on once the client has read (`resume_writing`)."""
    sent: list[int] = []

    class Streaming:
        connection_limits = None

        async def proxied(self, scope: Any, route: Any, body: bytes, reply: Any) -> None:
            await reply.start(200, [(b"content-type", b"text/event-stream")])
            for n in range(3):
                if reply.write(b"data: %d\n\n" % n):
                    await reply.drain()
                sent.append(n)
            await reply.end()

    config = uvicorn.Config(Streaming(), http=FrontProtocol, lifespan="off")
    config.load()
    protocol = FrontProtocol(config, ServerState(), {}, asyncio.get_running_loop())
    transport = Recording()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    protocol.pause_writing()  # the client reads nothing
    protocol.data_received(_post(b"/v1/chat/completions", b'{"model": "m", "stream": true}'))
    await until(lambda: bool(transport.writes), what="the head and first part, flushed")
    for _ in range(5):
        await asyncio.sleep(0)
    assert sent == [] and b"data: 0" in transport.writes[0]
    protocol.resume_writing()
    await until(lambda: sent == [0, 1, 2], what="the rest, once the client reads")
    assert transport.writes[-1] == b"0\r\n\r\n"
    protocol.connection_lost(None)


def test_a_connection_that_ends_leaves_nothing_for_the_collector(stack: Stack) -> None:
    """A connection that ends, its answers whole, refused or its client gone mid-stream, is
    freed by reference counting, as are the upstream connections the pool closes: no
    protocol, parser, request or refusal is left in a cycle. Under load, such cycles (one
    per connection, or per refused request) were what the collector found: its passes of
    tens of milliseconds, and memory that grew between them."""
    import gc

    import httptools

    from fleetgate.errors import GatewayError
    from fleetgate.execute.http1 import _Connection
    from fleetgate.pipeline.exchange import Exchange
    from fleetgate.server.front_request import FrontRequest
    from fleetgate.testing.fake_engine import Fault
    from tests.harness import client_requests

    gateway_on_one_engine(stack)
    engine = stack.engines["a"]
    server = stack._server
    kinds = (
        FrontProtocol,
        FrontRequest,
        _Connection,
        httptools.HttpRequestParser,
        httptools.HttpResponseParser,
        GatewayError,
        Exchange,
    )
    stream = orjson.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    )
    gc.collect()
    gc.disable()
    try:
        for body in (CHAT, stream, CHAT, stream):  # a new connection each
            with httpx.Client(base_url=stack.url, timeout=10) as client:
                answer = client.post("/v1/chat/completions", content=body)
                assert answer.status_code == 200 and answer.content
        engine.hold()
        for n in range(5, 8):  # clients that leave while their streams are under way
            sock = raw_connection(stack)
            sock.sendall(_post(b"/v1/chat/completions", stream))
            wait_until(lambda n=n: len(client_requests(engine)) == n, 10, "request sent on")
            sock.close()
        engine.release()
        engine.fail_next(Fault("break_stream"))  # an upstream stream that breaks
        with httpx.Client(base_url=stack.url, timeout=10) as client:
            broken = client.post("/v1/chat/completions", content=stream)
            assert b"stream_interrupted" in broken.content
        engine.set_fault(Fault("status", status=503))
        codes = []
        for _ in range(3):  # the engine fails, then its circuit is open: no route
            with httpx.Client(base_url=stack.url, timeout=10) as client:
                codes.append(client.post("/v1/chat/completions", content=CHAT).json())
        assert codes[-1]["error"]["code"] == "no_route"
        state = server.server_state
        wait_until(lambda: not (state.connections or state.tasks), 10, "connections ended")
        stack.stop_gateway()  # the pool closes its upstream connections
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        left = sorted(type(o).__name__ for o in gc.garbage if isinstance(o, kinds))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == []
