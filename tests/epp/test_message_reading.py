"""How the picker reads Envoy's ext_proc messages: a body's end that comes alone (as Envoy
sends it after most bodies' data) is known by its bytes, without decoding; everything else
is decoded, and a body in several chunks is answered whole."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from fleetgate.epp import service
from fleetgate.epp.evidence import ResponseWatch
from fleetgate.epp.protocol import REQUEST_ID, UPSTREAM_ADDRESS

# a body's end alone, as Envoy 1.3x writes it (seen on the wire): for the pick, with an
# empty metadata context; for the observe call, with the observability flag too
ENVOY_REQUEST_END = b'"\x02\x10\x01B\x00'
ENVOY_RESPONSE_END = b"*\x02\x10\x01B\x00P\x01"


class _Call:
    def __init__(self) -> None:
        self.metadata: dict[bytes, bytes] = {}
        self.sent: list[bytes] = []
        self.finished = 0

    def send(self, *messages: bytes) -> None:
        self.sent.extend(messages)

    def answer(self, *messages: bytes) -> None:
        self.sent.extend(messages)

    def finish(self, *args: Any, **kwargs: Any) -> None:
        self.finished += 1


class _Counted:
    """`pb` as the service module sees it, with each decoding counted."""

    def __init__(self) -> None:
        self.decoded = 0
        counted = self

        class ProcessingRequest:
            @staticmethod
            def FromString(data: bytes) -> pb.ProcessingRequest:
                counted.decoded += 1
                return pb.ProcessingRequest.FromString(data)

        self.ProcessingRequest = ProcessingRequest


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> _Counted:
    counted = _Counted()
    monkeypatch.setattr(service, "pb", counted)
    return counted


@pytest.mark.parametrize(
    ("ends", "phase", "envoy"),
    [
        (service.REQUEST_BODY_ENDS, "request_body", ENVOY_REQUEST_END),
        (service.RESPONSE_BODY_ENDS, "response_body", ENVOY_RESPONSE_END),
    ],
)
def test_each_message_known_as_a_body_s_end_is_one(
    ends: frozenset[bytes], phase: str, envoy: bytes
):
    assert envoy in ends
    for data in ends:
        message = pb.ProcessingRequest.FromString(data)
        assert message.WhichOneof("request") == phase
        body = getattr(message, phase)
        assert body.end_of_stream and body.body == b""
        assert not message.attributes and not message.HasField("protocol_config")


def _headers(*pairs: tuple[str, str]) -> base_pb2.HeaderMap:
    return base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs]
    )


class _Answered(service._Pick):
    """The pick's call, its answer noted instead of made."""

    __slots__ = ("answered",)

    def _answer(self, body: bytes, step: str) -> None:
        self.done = True
        self.answered = (body, step)


def test_a_pick_is_answered_at_its_body_s_end_with_every_chunk(counted: _Counted):
    handler = _Answered(SimpleNamespace(), _Call())  # type: ignore[arg-type]
    head = pb.ProcessingRequest(
        request_headers=pb.HttpHeaders(headers=_headers((":path", "/v1/chat/completions")))
    )
    head.protocol_config.request_body_mode = processing_mode_pb2.ProcessingMode.FULL_DUPLEX_STREAMED
    handler.message(head.SerializeToString())
    for chunk in (b'{"model":', b' "m"}'):
        handler.message(
            pb.ProcessingRequest(request_body=pb.HttpBody(body=chunk)).SerializeToString()
        )
    assert not handler.done
    handler.message(ENVOY_REQUEST_END)
    assert handler.answered == (b'{"model": "m"}', "duplex")
    assert counted.decoded == 3  # the headers and the two chunks: the end was known as it is


def test_a_pick_whose_end_comes_with_its_data_is_answered_then():
    handler = _Answered(SimpleNamespace(), _Call())  # type: ignore[arg-type]
    head = pb.ProcessingRequest(request_headers=pb.HttpHeaders(headers=_headers((":path", "/"))))
    handler.message(head.SerializeToString())
    body = pb.ProcessingRequest(request_body=pb.HttpBody(body=b"{}", end_of_stream=True))
    handler.message(body.SerializeToString())
    assert handler.answered == (b"{}", "body")


class _Picker:
    def __init__(self) -> None:
        self.claimed: list[str] = []
        self.finished: list[ResponseWatch] = []

    def claim(self, request_id: str) -> object:
        self.claimed.append(request_id)
        return object()

    def finish(self, pick: object, watch: ResponseWatch) -> None:
        self.finished.append(watch)


@pytest.mark.parametrize("key", [service.ATTRIBUTES_KEY, "another.filter"])
def test_an_answer_is_seen_to_its_end_and_its_attributes_read_under_any_key(
    counted: _Counted, key: str
):
    picker, call = _Picker(), _Call()
    handler = service._Observe(picker, call)  # type: ignore[arg-type]
    head = pb.ProcessingRequest(
        response_headers=pb.HttpHeaders(
            headers=_headers((":status", "200"), ("content-type", "application/json"))
        )
    )
    head.attributes[key].update({REQUEST_ID: "r-1", UPSTREAM_ADDRESS: "10.0.0.5:8000"})
    handler.message(head.SerializeToString())
    assert picker.claimed == ["r-1"]
    answer = b'{"usage": {"prompt_tokens": 3, "completion_tokens": 1}}'
    handler.message(
        pb.ProcessingRequest(response_body=pb.HttpBody(body=answer)).SerializeToString()
    )
    assert not picker.finished
    handler.message(ENVOY_RESPONSE_END)
    [watch] = picker.finished
    assert (watch.status, watch.served, bytes(watch.body)) == (200, "10.0.0.5:8000", answer)
    assert call.finished == 1
    assert counted.decoded == 2


def test_the_watched_headers_are_read_whatever_the_case_of_their_names():
    response = pb.HttpHeaders(
        headers=_headers((":status", "429"), ("Retry-After", "7"), ("x-not-watched", "1"))
    )
    assert service._watched(response) == {":status": "429", "retry-after": "7"}


def test_a_pick_names_each_endpoint_once_in_order():
    from fleetgate.epp.picker import Pick

    one = SimpleNamespace()
    two = SimpleNamespace()
    pick = Pick.__new__(Pick)
    pick.handed = [(one, ("10.0.0.5:80", "10.0.0.6:80", "10.0.0.5:80"))]  # type: ignore[list-item]
    assert pick.endpoints == ["10.0.0.5:80", "10.0.0.6:80"]
    pick.handed = [(one, ("10.0.0.5:80",)), (two, ("10.0.0.7:80", "10.0.0.5:80"))]  # type: ignore[list-item]
    assert pick.endpoints == ["10.0.0.5:80", "10.0.0.7:80"]


def test_what_a_renamed_answer_held_goes_back_before_its_trailers():
    """A full-duplex answer whose body ends with trailers, not with an end of stream: the
    part of an event the renaming held is sent back before the trailers' answer."""
    from fleetgate.epp.rename import AnswerRename
    from fleetgate.execute.framing import SSE
    from fleetgate.execute.rewrite import rewriter_for

    settled: list[ResponseWatch] = []
    picker = SimpleNamespace(finish=lambda _pick, watch: settled.append(watch))
    call = _Call()
    handler = service._Pick(picker, call)  # type: ignore[arg-type]
    handler.watch, handler.held, handler.echo = ResponseWatch(), object(), True  # type: ignore[assignment]
    handler.watch.headers(200, "text/event-stream", None)
    handler.rename = AnswerRename(rewriter_for("up", "m"), SSE)
    chunk = b'data: {"model":"up","n":1}\n\ndata: {"model":"up","n":2}'
    handler.message(pb.ProcessingRequest(response_body=pb.HttpBody(body=chunk)).SerializeToString())
    handler.message(pb.ProcessingRequest(response_trailers=pb.HttpTrailers()).SerializeToString())
    bodies = [
        m.response_body.response.body_mutation.streamed_response.body
        for m in map(pb.ProcessingResponse.FromString, call.sent)
        if m.HasField("response_body")
    ]
    assert b"".join(bodies) == b'data: {"model":"m","n":1}\n\ndata: {"model":"m","n":2}'
    assert pb.ProcessingResponse.FromString(call.sent[-1]).HasField("response_trailers")
    assert len(settled) == 1 and settled[0].ended
