"""OTLP's protobuf messages, written field by field (opentelemetry-proto's `.proto` files
give the numbers; the tests' receivers parse the result with its generated classes).

Why not the SDK's encoder: it built a `ReadableSpan` with given ids cleanly, but turning a
span into protobuf cost about 150 µs of CPU a span on this project's machine, several times
a whole proxied request's CPU. Written here, with the attributes that repeat (operation,
provider, model, deployment, server address) kept encoded, a span costs a few µs.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from functools import lru_cache

SPAN_INTERNAL, SPAN_SERVER, SPAN_CLIENT = 1, 2, 3
STATUS_OK, STATUS_ERROR = 1, 2
CUMULATIVE = 2  # AggregationTemporality

_DOUBLE = struct.Struct("<d")
_FIXED64 = struct.Struct("<Q")


def _varint_of(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [_varint_of(n) for n in range(1 << 14)]


def varint(n: int) -> bytes:
    if 0 <= n < 16384:
        return _SMALL[n]
    return _varint_of(n & 0xFFFFFFFFFFFFFFFF)  # a negative int64 is its two's complement


# the first two bytes of every short length-delimited field, per tag
_HEADS = [[bytes((tag, n)) for n in range(128)] for tag in range(128)]


def field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field (`tag` is the field number << 3 | 2, one byte here)."""
    n = len(payload)
    if n < 128:
        return _HEADS[tag][n] + payload
    return bytes((tag,)) + (_SMALL[n] if n < 16384 else _varint_of(n)) + payload


def fixed64(tag: int, n: int) -> bytes:
    return bytes((tag,)) + _FIXED64.pack(n)


# AnyValue
def _string_value(value: str) -> bytes:
    return field(0x0A, value.encode())


def _any_value(value: object) -> bytes:
    if isinstance(value, str):
        return _string_value(value)
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + varint(value)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(value)
    if isinstance(value, list | tuple):  # ArrayValue
        return field(0x2A, b"".join(field(0x0A, _any_value(v)) for v in value))
    return _string_value(str(value))


@lru_cache(maxsize=512)
def _key(key: str) -> bytes:
    return field(0x0A, key.encode())


def key_value(key: str, value: object) -> bytes:
    """A KeyValue message."""
    return _key(key) + field(0x12, _any_value(value))


@lru_cache(maxsize=8192, typed=True)  # typed: True and 1 are two values here
def cached_attribute(tag: int, key: str, value: str | float | bool | tuple[str, ...]) -> bytes:
    """An attribute field whose value repeats (an id of the fleet, a count), encoded once."""
    return field(tag, key_value(key, value))


def attributes(tag: int, items: Iterable[tuple[str, object]]) -> bytes:
    """Attribute fields (`tag`: the KeyValue field of the enclosing message), None skipped."""
    return b"".join(field(tag, key_value(k, v)) for k, v in items if v is not None)


def resource(attrs: Sequence[tuple[str, object]]) -> bytes:
    return attributes(0x0A, attrs)


def scope(name: str, version: str) -> bytes:
    return field(0x0A, name.encode()) + field(0x12, version.encode())


# Span.trace_id (its `trace_field`), span_id and start and end times, packed in one go (a
# message's fields may come in any order: the id, which changes with every span, sits with
# the times)
_ID_TIMES = struct.Struct("<18sBB8sBQBQ")
_STATUS = {
    0: b"",  # unset: not written
    **{code: field(0x7A, bytes((0x18, code))) for code in (STATUS_OK, STATUS_ERROR)},
}
_SPAN_TAG = b"\x12"  # ScopeSpans.spans
_SPAN_HEADS = _HEADS[0x12]


def trace_field(trace_id: bytes) -> bytes:
    """Span.trace_id (16 bytes), written once per trace and shared by its spans."""
    return b"\x0a\x10" + trace_id


def parent_field(parent_id: bytes | None, state: str | None = None) -> bytes:
    """Span.parent_span_id (8 bytes) and Span.trace_state, when there are."""
    out = b"\x22\x08" + parent_id if parent_id is not None else b""
    return out + field(0x1A, state.encode()) if state else out


@lru_cache(maxsize=1024)
def span_head(name: str, kind: int) -> bytes:
    """Span.name and Span.kind, the same for every span of one kind and name."""
    return field(0x2A, name.encode()) + bytes((0x30, kind))


def span(
    trace: bytes,
    span_id: bytes,
    parent: bytes,
    head: bytes,
    start_ns: int,
    end_ns: int,
    attrs: bytes,
    status: int = 0,
) -> bytes:
    """A Span message, as the `spans` field of a ScopeSpans (what `trace_request` joins):
    `trace` is its `trace_field`, `parent` its `parent_field`, `head` its `span_head`,
    `attrs` its attribute fields (tag 0x4A), all already encoded; `span_id` is 8 bytes."""
    if end_ns < start_ns:
        end_ns = start_ns
    body = b"".join(
        (
            _ID_TIMES.pack(trace, 0x12, 8, span_id, 0x39, start_ns, 0x41, end_ns),
            parent,
            head,
            attrs,
            _STATUS[status],
        )
    )
    n = len(body)
    if n < 128:  # a span's head: its tag and a one- or two-byte length
        return _SPAN_HEADS[n] + body
    if n < 16384:
        return _SPAN_TAG + _SMALL[n] + body
    return field(0x12, body)


@lru_cache(maxsize=512)
def _double_head(tag: int, key: str) -> bytes:
    """All of a double attribute's field but its 8 value bytes (their length is fixed)."""
    kv_head = _key(key) + b"\x12\x09\x21"
    return bytes((tag, len(kv_head) + 8)) + kv_head


@lru_cache(maxsize=1024)
def string_head(tag: int, key: str, n: int) -> bytes:
    """All of a string attribute's field but its value's `n` bytes."""
    value_head = bytes((0x0A,)) + varint(n)  # AnyValue.string_value
    any_head = bytes((0x12,)) + varint(len(value_head) + n)  # KeyValue.value
    kv_head = _key(key) + any_head + value_head
    return bytes((tag,)) + varint(len(kv_head) + n) + kv_head


def string_attribute(tag: int, key: str, value: str) -> bytes:
    """A string attribute whose value seldom repeats (an id): only its head is cached (by
    the value's length, which an id's seldom changes)."""
    raw = value.encode()
    return string_head(tag, key, len(raw)) + raw


def double_attribute(tag: int, key: str, value: float) -> bytes:
    """An attribute whose value seldom repeats (a duration): only its head is cached."""
    return _double_head(tag, key) + _DOUBLE.pack(value)


SPAN_ATTR = 0x4A  # Span.attributes


def _head(tag: int, size: int) -> bytes:
    """A length-delimited field's tag and length, for a payload of `size` bytes."""
    return bytes((tag,)) + varint(size)


def trace_request(resource_block: bytes, scope_block: bytes, spans: Sequence[bytes]) -> bytes:
    """An ExportTraceServiceRequest: one resource, one scope, these spans (`span`'s). The
    heads are worked out from the lengths, so the spans are copied once, into the result."""
    resource = field(0x0A, resource_block)
    scope = field(0x0A, scope_block)
    scope_spans = len(scope) + sum(map(len, spans))
    scope_head = _head(0x12, scope_spans)
    resource_spans = len(resource) + len(scope_head) + scope_spans
    return b"".join((_head(0x0A, resource_spans), resource, scope_head, scope, *spans))


def histogram_point(
    attrs: Sequence[tuple[str, object]],
    start_ns: int,
    now_ns: int,
    counts: Sequence[int],
    total: float,
    bounds: Sequence[float],
) -> bytes:
    """A HistogramDataPoint: counts per bucket (len(bounds) + 1 of them)."""
    return b"".join(
        (
            attributes(0x4A, attrs),
            fixed64(0x11, start_ns),
            fixed64(0x19, now_ns),
            fixed64(0x21, sum(counts)),
            b"\x29" + _DOUBLE.pack(total),
            field(0x32, b"".join(_FIXED64.pack(c) for c in counts)),
            field(0x3A, b"".join(_DOUBLE.pack(b) for b in bounds)),
        )
    )


def histogram_metric(name: str, description: str, unit: str, points: Iterable[bytes]) -> bytes:
    """A Metric holding a cumulative Histogram."""
    body = b"".join(field(0x0A, p) for p in points) + b"\x10" + varint(CUMULATIVE)
    return (
        field(0x0A, name.encode())
        + field(0x12, description.encode())
        + field(0x1A, unit.encode())
        + field(0x4A, body)
    )


def metrics_request(resource_block: bytes, scope_block: bytes, metrics: Iterable[bytes]) -> bytes:
    """An ExportMetricsServiceRequest: one resource, one scope, these metrics."""
    scope_metrics = field(0x0A, scope_block) + b"".join(field(0x12, m) for m in metrics)
    return field(0x0A, field(0x0A, resource_block) + field(0x12, scope_metrics))
