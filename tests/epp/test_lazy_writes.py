"""An observe call's end (its status, and the reset of the rest of it) is waited for by
nobody: it goes out with the connection's next frames that are waited for, in one write,
or on its own within LAZY_SECONDS. The picker's own HTTP/2 connection is fed the frames a
data plane sends, and what it writes is read back frame by frame."""

from __future__ import annotations

import asyncio
import struct

import hpack
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from grpc_health.v1 import health_pb2

from fleetgate.epp.http2 import (
    DATA,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    LAZY_SECONDS,
    PREFACE,
    RST_STREAM,
    SETTINGS,
    Http2Connection,
    frame,
)
from fleetgate.epp.protocol import ROLE_HEADER, ROLE_OBSERVE
from fleetgate.epp.run import PickerServer
from fleetgate.epp.service import PROCESS_PATH
from tests.harness import Stack, deployment, provider

_HEAD = struct.Struct(">IBI")


class _Transport:
    """What the connection writes, one entry a write."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.written = asyncio.Event()

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        self.written.set()

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def _frames(data: bytes) -> list[tuple[int, int, int]]:
    """(type, flags, stream) of each frame in `data`."""
    out, pos = [], 0
    while pos < len(data):
        length_kind, flags, stream = _HEAD.unpack_from(data, pos)
        out.append((length_kind & 0xFF, flags, stream))
        pos += 9 + (length_kind >> 8)
    return out


def _call(encoder: hpack.Encoder, stream: int, path: str, message: bytes, role: str = "") -> bytes:
    headers = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "picker"),
        ("content-type", "application/grpc"),
    ]
    if role:
        headers.append((ROLE_HEADER, role))
    block = encoder.encode(headers)
    body = b"\0" + len(message).to_bytes(4, "big") + message
    return frame(HEADERS, END_HEADERS, stream, block) + frame(DATA, 0, stream, body)


def test_an_observe_calls_end_goes_out_with_the_next_answer_waited_for(stack: Stack):
    engine = stack.engine("e")
    gateway = stack.start_gateway(
        {"providers": [provider("e", engine)], "deployments": [deployment("m", "e")]}
    )
    server = PickerServer(gateway.pipeline, "127.0.0.1", 0)
    stack.lt.run(server.start())
    # a response the picker did not pick: its call is ended at once, and lazily
    unpicked = pb.ProcessingRequest(
        response_headers=pb.HttpHeaders(end_of_stream=True)
    ).SerializeToString()
    check = health_pb2.HealthCheckRequest(service="").SerializeToString()

    async def scenario() -> tuple[list[bytes], list[bytes], list[bytes]]:
        conn = Http2Connection(server.dispatch, set())
        transport = _Transport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        conn.data_received(PREFACE + frame(SETTINGS, 0, 0))
        opening = list(transport.writes)
        transport.writes.clear()
        encoder = hpack.Encoder()
        conn.data_received(_call(encoder, 1, PROCESS_PATH, unpicked, ROLE_OBSERVE))
        held = list(transport.writes)  # nothing: its end waits
        conn.data_received(_call(encoder, 3, "/grpc.health.v1.Health/Check", check))
        together = list(transport.writes)
        transport.writes.clear()
        transport.written.clear()
        conn.data_received(_call(encoder, 5, PROCESS_PATH, unpicked, ROLE_OBSERVE))
        await asyncio.wait_for(transport.written.wait(), LAZY_SECONDS + 5)  # on its own
        alone = list(transport.writes)
        conn.close()
        return opening, held, [*together, b"|", *alone]

    opening, held, rest = stack.lt.run(scenario())
    stack.lt.run(server.stop(0))
    assert opening  # the connection's SETTINGS went out at once
    assert held == []
    split = rest.index(b"|")
    together, alone = rest[:split], rest[split + 1 :]
    assert len(together) == 1  # the observe call's end and the health answer: one write
    frames = _frames(together[0])
    assert (HEADERS, END_HEADERS | END_STREAM, 1) in frames  # the observe call's status
    assert (RST_STREAM, 0, 1) in frames  # the rest of it is not wanted
    assert (HEADERS, END_HEADERS | END_STREAM, 3) in frames  # the health answer's status
    assert len(alone) == 1
    assert (HEADERS, END_HEADERS | END_STREAM, 5) in _frames(alone[0])
