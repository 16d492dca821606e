"""What a response sends in one turn of the loop leaves in one write
(server/response_cycle.py): uvicorn's own cycle wrote a JSON answer's head and body apart,
and a stream's head, each part and its end marker each on its own."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.server import ServerState

from fleetgate.server.connections import GuardedHttpProtocol
from fleetgate.server.response_cycle import ResponseCycle
from tests.harness import Recording, until


def cycle(method: str = "POST", keep_alive: bool = True) -> tuple[ResponseCycle, Recording]:
    transport = Recording()
    done: list[bool] = []
    c = ResponseCycle(
        scope={"method": method, "headers": []},  # type: ignore[typeddict-item]
        transport=transport,  # type: ignore[arg-type]
        flow=FlowControl(transport),  # type: ignore[arg-type]
        logger=logging.getLogger("test"),
        access_logger=logging.getLogger("test"),
        access_log=False,
        default_headers=[(b"server", b"fleetgate-test")],
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=keep_alive,
        on_response=lambda: done.append(True),
    )
    return c, transport


async def test_a_json_answer_is_one_write() -> None:
    c, t = cycle()
    body = b'{"ok":true}'
    headers = [(b"content-type", b"application/json"), (b"content-length", b"11")]
    await c.send({"type": "http.response.start", "status": 200, "headers": headers})
    assert t.writes == []  # the head waits for its body
    await c.send({"type": "http.response.body", "body": body})
    assert len(t.writes) == 1
    assert t.writes[0] == (
        b"HTTP/1.1 200 OK\r\nserver: fleetgate-test\r\ncontent-type: application/json\r\n"
        b"content-length: 11\r\n\r\n" + body
    )
    assert c.response_complete and not t.closed


async def test_a_stream_leaves_once_per_loop_turn_and_is_chunked() -> None:
    c, t = cycle(keep_alive=False)
    await c.send({"type": "http.response.start", "status": 200, "headers": []})
    await c.send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
    assert t.writes == []  # until the loop's turn ends
    await asyncio.sleep(0)
    assert len(t.writes) == 1  # the head with the first events
    head, _, chunk = t.writes[0].partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head and b"connection: close" in head
    assert chunk == b"9\r\ndata: 1\n\n\r\n"
    await c.send({"type": "http.response.body", "body": b"data: 2\n\n", "more_body": True})
    await c.send({"type": "http.response.body", "body": b""})  # ends in the same turn
    assert t.writes[1:] == [b"9\r\ndata: 2\n\n\r\n0\r\n\r\n"]
    assert c.response_complete and t.closed
    await asyncio.sleep(0)
    assert len(t.writes) == 2  # nothing was left to write at the turn's end


async def test_head_and_bad_answers() -> None:
    c, t = cycle(method="HEAD")
    await c.send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]}
    )
    await c.send({"type": "http.response.body", "body": b""})
    assert t.writes == [b"HTTP/1.1 200 OK\r\nserver: fleetgate-test\r\ncontent-length: 5\r\n\r\n"]
    c, t = cycle()
    with pytest.raises(RuntimeError, match="Invalid HTTP header value"):
        await c.send(
            {"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"1\r\nx: 2")]}
        )
    # every header is checked, the last among several too, names as well as values
    ok = [(b"x-a", b"1"), (b"x-b", b"two words\there")]
    for bad, problem in [
        ((b"x-c", b"3\n"), "value"),
        ((b"x c", b"3"), "name"),
        ((b"x:c", b"3"), "name"),
        ((b"", b"\x00"), "value"),
    ]:
        c, t = cycle()
        with pytest.raises(RuntimeError, match=f"Invalid HTTP header {problem}"):
            await c.send({"type": "http.response.start", "status": 200, "headers": [*ok, bad]})
        assert t.writes == []
    c, t = cycle()
    await c.send({"type": "http.response.start", "status": 204, "headers": ok})
    await asyncio.sleep(0)  # the head leaves at the turn's end
    assert t.writes == [
        b"HTTP/1.1 204 No Content\r\nserver: fleetgate-test\r\n"
        b"x-a: 1\r\nx-b: two words\there\r\n\r\n"
    ]
    c, t = cycle()
    await c.send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]}
    )
    with pytest.raises(RuntimeError, match="shorter than Content-Length"):
        await c.send({"type": "http.response.body", "body": b"abc"})


async def test_the_connection_layer_answers_through_it() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
        )
        await send({"type": "http.response.body", "body": b"ok"})

    class Socketless(Recording):
        def get_extra_info(self, name: str, default: Any = None) -> Any:
            return {"peername": ("127.0.0.1", 5), "sockname": ("127.0.0.1", 6)}.get(name, default)

        def pause_reading(self) -> None: ...
        def resume_reading(self) -> None: ...

    config = uvicorn.Config(app, http=GuardedHttpProtocol, lifespan="off")
    config.load()
    protocol = GuardedHttpProtocol(config, ServerState(), {}, asyncio.get_running_loop())
    transport = Socketless()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    protocol.data_received(b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi")
    assert isinstance(protocol.cycle, ResponseCycle)
    await until(lambda: protocol.cycle.response_complete, what="the answer is sent")
    assert len(transport.writes) == 1 and transport.writes[0].endswith(b"\r\n\r\nok")
    protocol.connection_lost(None)


async def test_nothing_is_written_after_the_connection_closed() -> None:
    c, t = cycle()
    await c.send({"type": "http.response.start", "status": 200, "headers": []})
    t.close()  # the app failed mid-stream: uvicorn closes the transport
    await asyncio.sleep(0)
    assert t.writes == []
