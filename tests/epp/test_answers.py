"""The pick's answers, written by hand in protobuf's wire format, read back by Envoy's own
protobuf classes as the messages they stand for (the Envoy path tests send them to the
real Envoy: `test_envoy_path.py`)."""

from __future__ import annotations

import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from fleetgate.epp.answers import (
    body_parts,
    header_options,
    pick_answer,
    removed_headers,
    streamed_body,
    token_metadata,
)
from fleetgate.epp.protocol import DESTINATION, LB_NAMESPACE, PICK_NAMESPACE, PICK_TOKEN

OVERWRITE = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
HEADERS = [
    (DESTINATION, "10.0.0.5:8000,10.0.0.6:8000"),
    ("x-request-id", "ca228181-ca8d-4ee0-a195-6e4640c1ef31"),
    ("x-envoy-max-retries", "1"),
    ("content-length", "300"),
]
REMOVED = ("authorization", "x-api-key")


def _expected(in_body: bool, body: bytes | None) -> pb.ProcessingResponse:
    """The same answer built field by field with the protobuf classes."""
    answer = pb.ProcessingResponse()
    common = (answer.request_body if in_body else answer.request_headers).response
    for key, value in HEADERS:
        option = common.header_mutation.set_headers.add(append_action=OVERWRITE)
        option.header.key = key
        option.header.raw_value = value.encode()
    common.header_mutation.remove_headers.extend(REMOVED)
    if in_body and body is not None:
        common.body_mutation.body = body
    lb = answer.dynamic_metadata.fields[LB_NAMESPACE].struct_value
    lb.fields[DESTINATION].string_value = "10.0.0.5:8000,10.0.0.6:8000"
    return answer


@pytest.mark.parametrize(
    ("in_body", "body"),
    [(False, None), (True, None), (True, b'{"model":"m"}'), (True, b"x" * 70000)],
)
def test_the_pick_reads_as_the_message_it_stands_for(in_body: bool, body: bytes | None):
    mutation = header_options(HEADERS) + removed_headers(REMOVED)
    data = pick_answer(in_body, mutation, "10.0.0.5:8000,10.0.0.6:8000", body)
    assert pb.ProcessingResponse.FromString(data) == _expected(in_body, body)


@pytest.mark.parametrize("body", [b"", b'{"model":"m"}', "é".encode() * 100, b"x" * 70000])
def test_the_streamed_body_reads_as_the_message_it_stands_for(body: bytes):
    expected = pb.ProcessingResponse()
    streamed = expected.request_body.response.body_mutation.streamed_response
    streamed.body = body
    streamed.end_of_stream = True
    assert pb.ProcessingResponse.FromString(streamed_body(body)) == expected


@pytest.mark.parametrize("end", [True, False])
@pytest.mark.parametrize("body", [b"", b"data: {}\n\n", b"x" * 70000])
def test_a_response_chunk_sent_back_reads_as_the_message_it_stands_for(body: bytes, end: bool):
    """A gateway that sends the response to the pick's own call in full-duplex mode gets
    each chunk back in the response's phase, ended or not as Envoy showed it."""
    expected = pb.ProcessingResponse()
    streamed = expected.response_body.response.body_mutation.streamed_response
    streamed.body = body
    streamed.end_of_stream = end
    data = streamed_body(body, end=end, response=True)
    assert pb.ProcessingResponse.FromString(data) == expected
    # the request's head of the same size is another one
    assert pb.ProcessingResponse.FromString(streamed_body(body)).HasField("request_body")


def test_streamed_bodies_of_every_size_read_right_past_the_bound_of_those_kept():
    """What goes before a body is kept for each size: the same size again, and sizes past
    the bound (at each length's varint step), read as their messages."""
    sizes = [*range(0, 700), 16_250, 16_383, 16_384, 16_400, 2_097_151, 2_097_152]
    for size in sizes + sizes[::-7]:
        body = bytes([size % 251]) * size
        message = pb.ProcessingResponse.FromString(streamed_body(body))
        streamed = message.request_body.response.body_mutation.streamed_response
        assert streamed.body == body and streamed.end_of_stream


def test_headers_kept_from_pick_to_pick_read_the_same_past_the_bound():
    """The header options' bytes are kept a bounded number; past it they are made again."""
    for n in range(1200):
        headers = [("x-request-id", f"id-{n}"), (DESTINATION, f"10.0.0.{n % 7}:8000")]
        data = pick_answer(False, header_options(headers), headers[1][1], None)
        answer = pb.ProcessingResponse.FromString(data)
        options = answer.request_headers.response.header_mutation.set_headers
        assert [(o.header.key, o.header.raw_value.decode()) for o in options] == headers
        assert all(o.append_action == OVERWRITE for o in options)
        lb = answer.dynamic_metadata.fields[LB_NAMESPACE].struct_value
        assert lb.fields[DESTINATION].string_value == headers[1][1]


def _pick(request_id: str | None, body: bytes | None = None):
    """A pick to `10.0.0.5:8000` for a request that came with `request_id` (None: none)."""
    from types import SimpleNamespace

    from fleetgate.epp.picker import Pick
    from fleetgate.pipeline.exchange import Exchange

    headers = [(b"x-request-id", request_id.encode())] if request_id is not None else []
    provider = SimpleNamespace(timeouts=SimpleNamespace(total=30.0))
    candidate = SimpleNamespace(deployment=SimpleNamespace(provider=provider))
    ex = Exchange("/v1/chat/completions", headers)
    return Pick(ex, None, None, [(candidate, ("10.0.0.5:8000",))], body, "d")  # type: ignore[arg-type]


def _set_headers(answer: bytes) -> dict[str, str]:
    parsed = pb.ProcessingResponse.FromString(answer)
    options = parsed.request_headers.response.header_mutation.set_headers
    return {o.header.key: o.header.raw_value.decode() for o in options}


@pytest.mark.parametrize("given", [None, "bad id with spaces"])
def test_a_pick_sets_its_own_request_id_when_the_request_s_is_not_taken(given: str | None):
    """The observe call finds a pick by the request id Envoy shows it: a request whose id
    the picker does not take gets the picker's own, in the header Envoy sends on."""
    from fleetgate.epp.service import _pick_answer

    for _ in range(2):  # the second time too: such an answer is never one kept
        pick = _pick(given)
        sent = _set_headers(_pick_answer(pick, False))
        assert sent["x-request-id"] == pick.ex.request_id != given
        assert sent[DESTINATION] == "10.0.0.5:8000"


def test_a_pick_leaves_a_taken_request_id_as_it_is_and_its_answer_is_kept():
    from fleetgate.epp.service import _pick_answer

    first = _pick_answer(_pick("ca228181-ca8d-4ee0-a195-6e4640c1ef31"), False)
    again = _pick_answer(_pick("5c1d0a2e-79a4-4d5e-9b0e-2f6c9a1e0b7d"), False)
    assert first == again
    sent = _set_headers(first)
    assert "x-request-id" not in sent
    assert sent == {
        DESTINATION: "10.0.0.5:8000",
        "x-envoy-max-retries": "0",
        "x-envoy-upstream-rq-timeout-ms": "30000",
    }


def test_a_claim_token_after_the_answer_arrives_beside_the_endpoints():
    """Appended to an answer, the token's metadata field is merged into the answer's own:
    Envoy receives both namespaces."""
    mutation = header_options(HEADERS) + removed_headers(REMOVED)
    data = pick_answer(True, mutation, "10.0.0.5:8000,10.0.0.6:8000", None)
    data += token_metadata("a1b2c3-7")
    expected = _expected(True, None)
    token = expected.dynamic_metadata.fields[PICK_NAMESPACE].struct_value
    token.fields[PICK_TOKEN].string_value = "a1b2c3-7"
    assert pb.ProcessingResponse.FromString(data) == expected


@pytest.mark.parametrize("parts", [1, 3])
@pytest.mark.parametrize("body", [None, b"", b'{"model": "served"}'])
def test_a_streamed_body_s_parts_read_as_the_messages_they_stand_for(
    parts: int, body: bytes | None
):
    """After a STREAMED pick, one answer per part of the body, in order: each as it is, or
    the rewritten body in place of the first and nothing in place of the others."""
    expected = []
    for i in range(parts):
        answer = pb.ProcessingResponse()
        answer.request_body.SetInParent()
        if body is not None:
            mutation = answer.request_body.response.body_mutation
            if i == 0:
                mutation.body = body
            else:
                mutation.clear_body = True
        expected.append(answer)
    got = [pb.ProcessingResponse.FromString(data) for data in body_parts(parts, body)]
    assert got == expected
    assert all(g.WhichOneof("response") == "request_body" for g in got)
