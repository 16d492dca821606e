"""A stream dropped before it started (its client gone while the head was being written)
still gives its upstream connection and its slot back."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import time
from typing import Any

import orjson

from fleetgate.testing import Fault
from tests.harness import Stack, deployment, provider


def test_a_stream_whose_head_never_left_frees_its_connection(stack: Stack, client_for) -> None:
    engine = stack.engine("a")
    config = {
        "providers": [provider("pa", engine, max_concurrency=1, timeouts={"total": 5})],
        "deployments": [deployment("m", "pa")],
    }
    gateway = stack.start_gateway(config)
    body = orjson.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    )
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[str] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # the client is still there: no disconnect to hear
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["type"])
        raise ConnectionResetError("the client went away while the head was written")

    async def drive() -> None:
        with contextlib.suppress(ConnectionResetError):
            await gateway(scope, receive, send)

    stack.lt.run(drive())
    assert sent and sent[0] == "http.response.start"
    assert len(engine.requests) == 1  # the stream had begun upstream

    # the provider's one connection is free again: the next stream is served at once
    started = time.monotonic()
    client = client_for(stack, timeout=4.0)
    chunks = list(
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert chunks and time.monotonic() - started < 3.0
    assert len(engine.requests) == 2


def test_streams_leave_no_generator_for_the_loop_to_close(stack: Stack, client_for) -> None:
    """An async generator left before its end is closed by the event loop, in a task of its
    own, once it is collected: CPU on every stream. The gateway's streams leave none, the
    whole ones and those that fail over after their first event was an error."""
    failing, good = stack.engine("failing"), stack.engine("good")
    config = {
        "providers": [provider("pf", failing), provider("pg", good)],
        "deployments": [deployment("m", "pf", priority=0), deployment("m", "pg", priority=1)],
    }
    stack.start_gateway(config)
    for _ in range(2):  # two streams begin with a retryable error event: they fall back
        failing.fail_next(Fault("stream_error_event", message="overloaded", status=503))
    finalized: list[str] = []

    async def count_finalized() -> Any:
        hooks = sys.get_asyncgen_hooks()  # the serving loop's, in its own thread

        def finalizer(agen: Any) -> None:
            finalized.append(agen.__qualname__)
            hooks.finalizer(agen)

        sys.set_asyncgen_hooks(firstiter=hooks.firstiter, finalizer=finalizer)
        return hooks

    hooks = stack.lt.run(count_finalized())
    try:
        client = client_for(stack)
        for _ in range(6):
            chunks = list(
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}], stream=True
                )
            )
            assert chunks
        for _ in range(3):  # and whole answers
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        stack.lt.run(asyncio.sleep(0))  # a finalizer runs on the loop, as garbage goes
        gc.collect()
        stack.lt.run(asyncio.sleep(0))
        assert finalized == []
        assert len(good.requests) == 9 and len(failing.requests) >= 2  # two fell back
    finally:

        async def restore() -> None:
            sys.set_asyncgen_hooks(*hooks)

        stack.lt.run(restore())
