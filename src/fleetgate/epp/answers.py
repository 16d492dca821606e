"""The pick's answers to Envoy, written in protobuf's wire format by hand.

A pick's answer is always the same few fields: the header mutation (set and removed
headers), the `envoy.lb` dynamic metadata with the endpoint list, and the body (rewritten,
or as Envoy left it in full-duplex mode; in STREAMED mode, each of the body's parts is
answered after the pick). Building them as `ProcessingResponse` objects and
serialising them cost more than writing these bytes (a Python call per field and per
sub-message); the tests check that Envoy's own protobuf classes read them back as the
messages they stand for (`tests/epp/test_answers.py`).

Field numbers: envoy/service/ext_proc/v3/external_processor.proto,
envoy/config/core/v3/base.proto and google/protobuf/struct.proto.
"""

from __future__ import annotations

from fleetgate.epp.protocol import DESTINATION, LB_NAMESPACE, PICK_NAMESPACE, PICK_TOKEN

# wire type 2 (length-delimited) and 0 (varint) tags: (field number << 3) | wire type
_REQUEST_HEADERS = 1 << 3 | 2  # ProcessingResponse.request_headers (HeadersResponse)
_REQUEST_BODY = 3 << 3 | 2  # ProcessingResponse.request_body (BodyResponse)
_RESPONSE_BODY = 4 << 3 | 2  # ProcessingResponse.response_body (BodyResponse)
_DYNAMIC_METADATA = 8 << 3 | 2  # ProcessingResponse.dynamic_metadata (Struct)
_RESPONSE = 1 << 3 | 2  # HeadersResponse.response, BodyResponse.response (CommonResponse)
_HEADER_MUTATION = 2 << 3 | 2  # CommonResponse.header_mutation
_BODY_MUTATION = 3 << 3 | 2  # CommonResponse.body_mutation
_SET_HEADERS = 1 << 3 | 2  # HeaderMutation.set_headers (HeaderValueOption)
_REMOVE_HEADERS = 2 << 3 | 2  # HeaderMutation.remove_headers (string)
_HEADER = 1 << 3 | 2  # HeaderValueOption.header (HeaderValue)
_APPEND_ACTION = 3 << 3  # HeaderValueOption.append_action (enum)
_OVERWRITE_IF_EXISTS_OR_ADD = 2
_KEY = 1 << 3 | 2  # HeaderValue.key
_RAW_VALUE = 3 << 3 | 2  # HeaderValue.raw_value
_BODY = 1 << 3 | 2  # BodyMutation.body, StreamedBodyResponse.body
_CLEAR_BODY = 2 << 3  # BodyMutation.clear_body (bool)
_STREAMED_RESPONSE = 3 << 3 | 2  # BodyMutation.streamed_response
_END_OF_STREAM = 2 << 3  # StreamedBodyResponse.end_of_stream (bool)
_FIELDS = 1 << 3 | 2  # Struct.fields (map entry: key 1, value 2)
_ENTRY_KEY = 1 << 3 | 2
_ENTRY_VALUE = 2 << 3 | 2
_STRING_VALUE = 3 << 3 | 2  # Value.string_value
_STRUCT_VALUE = 5 << 3 | 2  # Value.struct_value


def _varint(value: int) -> bytes:
    if value < 0x80:
        return _ONE_BYTE[value]
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_ONE_BYTE = [bytes((n,)) for n in range(0x80)]


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field: its tag, its length, its bytes."""
    size = len(payload)
    if size < 0x80:  # most of them: a one-byte length
        return bytes((tag, size)) + payload
    return bytes((tag,)) + _varint(size) + payload


def header_options(headers: list[tuple[str, str]]) -> bytes:
    """HeaderMutation.set_headers: each header set (replacing one of its name)."""
    cache = _OPTIONS
    out = []
    for header in headers:
        option = cache.get(header)
        if option is None:
            key, value = header
            pair = _field(_KEY, key.encode("latin-1")) + _field(_RAW_VALUE, value.encode("latin-1"))
            option = _field(_SET_HEADERS, _field(_HEADER, pair) + _OVERWRITE)
            if len(cache) >= _CACHED:
                cache.clear()
            cache[header] = option
        out.append(option)
    return b"".join(out)


_OVERWRITE = bytes((_APPEND_ACTION, _OVERWRITE_IF_EXISTS_OR_ADD))
# most headers a pick sets repeat from pick to pick (the endpoints, the retries, the
# timeout): each one's bytes are kept, a bounded number of them
_OPTIONS: dict[tuple[str, str], bytes] = {}
_CACHED = 512


def removed_headers(names: tuple[str, ...]) -> bytes:
    """HeaderMutation.remove_headers (prebuilt by callers: their list is fixed)."""
    return b"".join(_field(_REMOVE_HEADERS, name.encode("latin-1")) for name in names)


_LB_KEY = _field(_ENTRY_KEY, LB_NAMESPACE.encode())
_DESTINATION_KEY = _field(_ENTRY_KEY, DESTINATION.encode())


def _lb_metadata(endpoints: str) -> bytes:
    """ProcessingResponse.dynamic_metadata: `envoy.lb` → {DESTINATION: endpoints} (kept
    for each list, as the header options are)."""
    metadata = _METADATA.get(endpoints)
    if metadata is None:
        value = _field(_ENTRY_VALUE, _field(_STRING_VALUE, endpoints.encode("latin-1")))
        inner = _field(_FIELDS, _DESTINATION_KEY + value)
        outer = _field(_FIELDS, _LB_KEY + _field(_ENTRY_VALUE, _field(_STRUCT_VALUE, inner)))
        metadata = _field(_DYNAMIC_METADATA, outer)
        if len(_METADATA) >= _CACHED:
            _METADATA.clear()
        _METADATA[endpoints] = metadata
    return metadata


_METADATA: dict[str, bytes] = {}
_PICK_KEY = _field(_ENTRY_KEY, PICK_NAMESPACE.encode())
_TOKEN_KEY = _field(_ENTRY_KEY, PICK_TOKEN.encode())


def token_metadata(token: str) -> bytes:
    """ProcessingResponse.dynamic_metadata: `fleetgate.pick` → {token}. Written after an
    answer's own metadata field, it is merged into it (protobuf reads an embedded message
    field that comes twice as one, merged): both namespaces arrive."""
    value = _field(_ENTRY_VALUE, _field(_STRING_VALUE, token.encode("latin-1")))
    inner = _field(_FIELDS, _TOKEN_KEY + value)
    outer = _field(_FIELDS, _PICK_KEY + _field(_ENTRY_VALUE, _field(_STRUCT_VALUE, inner)))
    return _field(_DYNAMIC_METADATA, outer)


def pick_answer(in_body: bool, mutation: bytes, endpoints: str, body: bytes | None) -> bytes:
    """The pick: the request headers' answer (`in_body` False) or the buffered body's
    (`in_body` True, where `body`, when given, replaces the request's), with the header
    `mutation` (set and removed headers) and the endpoints in `envoy.lb` metadata."""
    common = _field(_HEADER_MUTATION, mutation)
    if in_body and body is not None:
        common += _field(_BODY_MUTATION, _field(_BODY, body))
    phase = _REQUEST_BODY if in_body else _REQUEST_HEADERS
    return _field(phase, _field(_RESPONSE, common)) + _lb_metadata(endpoints)


_BODY_PASS = _field(_REQUEST_BODY, b"")  # a BodyResponse with nothing in it: as it is
_BODY_CLEARED = _field(
    _REQUEST_BODY, _field(_RESPONSE, _field(_BODY_MUTATION, bytes((_CLEAR_BODY, 1))))
)


def body_parts(parts: int, body: bytes | None) -> list[bytes]:
    """The answers to the `parts` messages of a body Envoy sent in STREAMED mode, given
    after the pick (the headers' answer), in their order: each part as it is, or, where the
    pick rewrote the body (`body`), the new body in place of the first part and nothing in
    place of the others."""
    if body is None:
        return [_BODY_PASS] * parts
    first = _field(_REQUEST_BODY, _field(_RESPONSE, _field(_BODY_MUTATION, _field(_BODY, body))))
    return [first, *[_BODY_CLEARED] * (parts - 1)]


def streamed_body(body: bytes, end: bool = True, response: bool = False) -> bytes:
    """A body sent back in full-duplex mode: the request's, whole, with its end (the
    default), or a chunk of the response (`response`) as Envoy showed it, ended or not. The
    tags and lengths of the four fields around the body, then the body, copied once. What
    goes before a body depends only on its size and direction: kept for each, a bounded
    number of them."""
    key = (len(body), response)
    head = _STREAMED_HEADS.get(key)
    if head is None:
        head = _streamed_head(*key)
        if len(_STREAMED_HEADS) >= _CACHED:
            _STREAMED_HEADS.clear()
        _STREAMED_HEADS[key] = head
    return b"".join((head, body, _STREAM_END if end else _STREAM_GOES_ON))


def _streamed_head(size: int, response: bool) -> bytes:
    """The tags and lengths before a streamed body of `size` bytes, written from the inside
    out (each field's length counts what it holds)."""
    length = _varint(size)
    tags = [_TAG[_BODY] + length]
    size += 1 + len(length) + 2  # the body's field, and its end beside it
    for tag in (*_NESTING, _RESPONSE_BODY if response else _REQUEST_BODY):
        length = _varint(size)  # each field: its tag, its length, then what it holds
        tags.append(_TAG[tag] + length)
        size += 1 + len(length)
    tags.reverse()
    return b"".join(tags)


_STREAMED_HEADS: dict[tuple[int, bool], bytes] = {}


# the fields the streamed body is nested in, inside out, up to the phase's own
_NESTING = (_STREAMED_RESPONSE, _BODY_MUTATION, _RESPONSE)
_TAG = {tag: bytes((tag,)) for tag in (_BODY, *_NESTING, _REQUEST_BODY, _RESPONSE_BODY)}
_STREAM_END = bytes((_END_OF_STREAM, 1))
_STREAM_GOES_ON = bytes((_END_OF_STREAM, 0))  # written all the same: one head per size
