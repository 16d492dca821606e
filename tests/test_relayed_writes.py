"""A plain stream on the gateway's own front is written to its client by the upstream
connection's callback (`UpstreamResponse.pipe`), no task woken per read: its events
still arrive whole and in order, its usage still reaches the record, and a client that
reads slower than the upstream sends still holds the upstream back (nothing piles up in
the gateway). Real sockets on loopback."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx
import orjson
import pytest

from fleetgate.execute import http1
from fleetgate.server.front_request import FrontRequest
from fleetgate.testing import Fault, fake_engine
from tests.harness import Stack, deployment, provider, raw_connection, wait_until


def _stream_request(words: str = "three words here") -> bytes:
    body = orjson.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": words}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def _events(body: bytes) -> list[bytes]:
    """The data of each event of a chunked SSE answer's body."""
    data = b""
    while True:
        size, _, body = body.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        data += body[:n]
        body = body[n + 2 :]
    return [e.removeprefix(b"data: ") for e in data.split(b"\n\n") if e]


def _read_answer(sock: socket.socket) -> tuple[bytes, bytes]:
    received = b""
    while not received.endswith(b"\r\n0\r\n\r\n"):
        part = sock.recv(65536)
        assert part, "the connection closed before the answer's end"
        received += part
    head, _, body = received.partition(b"\r\n\r\n")
    return head, body


def _streamed(stack: Stack) -> tuple[bytes, list[bytes]]:
    """One streamed chat over a raw connection: its head (a 200) and its events' data."""
    sock = raw_connection(stack)
    sock.sendall(_stream_request())
    head, body = _read_answer(sock)
    sock.close()
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    return head, _events(body)


def _request_id(head: bytes) -> str:
    return next(
        line.split(b": ", 1)[1].decode()
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"x-request-id:")
    )


def _record(stack: Stack, rid: str) -> dict[str, Any]:
    url = f"{stack.url}/v1/requests/{rid}"
    wait_until(lambda: httpx.get(url).status_code == 200, 10, "the request's record")
    return dict(httpx.get(url).json())


def test_a_plain_streams_events_are_written_in_the_upstreams_callback(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = stack.engine("a", reply_words=12, tokens_per_second=200)  # a read per event
    stack.start_gateway(
        {"providers": [provider("pa", engine)], "deployments": [deployment("m", "pa")]}
    )
    writers: list[asyncio.Task[Any] | None] = []
    write = FrontRequest.write

    def noted(self: FrontRequest, chunk: bytes) -> bool:
        writers.append(asyncio.current_task())
        return write(self, chunk)

    monkeypatch.setattr(FrontRequest, "write", noted)
    head, events = _streamed(stack)
    assert events[-1] == b"[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    assert all(c["model"] == "m" for c in chunks)  # the client's name, set in the callback
    words = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert words == "a says: " + " ".join(f"w{i}" for i in range(1, 13))
    # the head's events went with the task that answers; every later read, in a callback
    assert writers[0] is not None and len(writers) > 5
    assert all(task is None for task in writers[1:])
    attempt = _record(stack, _request_id(head))["attempts"][0]
    assert (attempt["prompt_tokens"], attempt["completion_tokens"]) == (4, 12)


def test_a_slow_client_holds_the_upstream_back_and_gets_the_whole_stream(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    words = 6000  # about 1 MB of events, as fast as the engine writes them
    engine = stack.engine("a", reply_words=words)
    stack.start_gateway(
        {"providers": [provider("pa", engine)], "deployments": [deployment("m", "pa")]}
    )
    paused: list[int] = []
    pause = http1._Connection.pause

    def noted(self: http1._Connection) -> None:
        response = self._response
        paused.append(response._unread if response is not None else -1)
        pause(self)

    monkeypatch.setattr(http1._Connection, "pause", noted)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting
    host, port = stack.url.removeprefix("http://").split(":")
    sock.settimeout(10)
    sock.connect((host, int(port)))
    server = stack._server
    assert server is not None
    wait_until(lambda: len(server.server_state.connections) == 1, 5, "the connection")
    (front,) = server.server_state.connections
    # the gateway's side of the client's socket: a small send buffer too
    front.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
    sock.sendall(_stream_request())
    # the client reads nothing: the front's buffer fills, the relay stops taking the
    # upstream's reads, they wait unread, and at 256 KiB the upstream is paused
    wait_until(lambda: bool(paused), 10, "the upstream connection paused")
    assert front.write_paused
    buffered = front.transport.get_write_buffer_size()
    assert buffered < 1 << 20, f"{buffered} bytes wait for the client in the gateway"
    head, body = _read_answer(sock)
    sock.close()
    events = _events(body)
    assert events[-1] == b"[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "a says: " + " ".join(f"w{i}" for i in range(1, words + 1))  # in order
    assert chunks[-1]["usage"]["completion_tokens"] == words
    # the usage at the end of a megabyte of reads reaches the record
    attempt = _record(stack, _request_id(head))["attempts"][0]
    assert attempt["completion_tokens"] == words


@pytest.mark.parametrize("bad", ["not JSON", "not UTF-8"])
def test_an_event_that_is_not_json_ends_a_piped_stream_with_its_interruption(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    # a read per event; an event read in the upstream's callback is not JSON (a Python
    # repr), or holds a byte no UTF-8 text holds (Latin-1's é)
    engine = stack.engine("a", reply_words=12, tokens_per_second=200)
    if bad == "not JSON":
        engine.fail_next(Fault("invalid_json", after_chunks=6))
    else:
        sse = fake_engine._sse

        def latin1(payload: Any, name: str | None = None) -> bytes:
            return sse(payload, name).replace(b"w5", b"w\xe9")

        monkeypatch.setattr(fake_engine, "_sse", latin1)
    stack.start_gateway(
        {"providers": [provider("pa", engine)], "deployments": [deployment("m", "pa")]}
    )
    head, events = _streamed(stack)
    assert orjson.loads(events[-1])["error"]["code"] == "stream_interrupted"
    good = [orjson.loads(e) for e in events[:-1]]
    words = "".join(c["choices"][0]["delta"].get("content") or "" for c in good)
    assert words.startswith("a says: w1 w2 w3") and "w9" not in words  # none after it
    assert all(c["model"] == "m" for c in good)
    attempt = _record(stack, _request_id(head))["attempts"][0]
    assert attempt["error_class"] == "stream_broken"
