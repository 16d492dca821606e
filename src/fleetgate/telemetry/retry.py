"""When an export the collector refused is sent again, and after how long.

OTLP's rule: a collector that is down or busy (gRPC `UNAVAILABLE`, `RESOURCE_EXHAUSTED`;
HTTP 429, 502, 503 and 504; a refused connection) may take the batch later, so it is sent
again after an exponential backoff with jitter, or after the delay the collector asked for
(gRPC `RetryInfo` in the status details, HTTP `Retry-After`), a bounded number of times.
Anything else (a 400, a deadline passed on a collector that is stuck) is given up at once.
"""

from __future__ import annotations

import random
from email.utils import parsedate_to_datetime
from time import time

RETRYABLE_GRPC = frozenset({"UNAVAILABLE", "RESOURCE_EXHAUSTED"})
RETRYABLE_HTTP = frozenset({429, 502, 503, 504})
MAX_DELAY = 30.0  # seconds: no wait between two sends is longer, whatever was asked
_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"


def backoff(retry: int, initial: float) -> float:
    """The wait before the `retry`-th send again (1 for the first): `initial` doubled each
    time, up to `MAX_DELAY`, with half of it random so that replicas spread out."""
    delay = min(MAX_DELAY, initial * 2 ** (retry - 1))
    return delay * (0.5 + random.random() / 2)


def delay(retry: int, initial: float, asked: float | None) -> float:
    """The wait before a send again: what the collector asked for, else the backoff."""
    if asked is not None:
        return min(MAX_DELAY, max(0.0, asked))
    return backoff(retry, initial)


def retry_after(value: str | None) -> float | None:
    """Seconds from an HTTP `Retry-After` (seconds, or a date); None when absent or unread."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time())
    except (TypeError, ValueError):
        return None


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """The (field number, value) pairs of a protobuf message: varints and length-delimited
    values (a 64- or 32-bit one is skipped); ValueError when the bytes are no message."""
    out: list[tuple[int, int | bytes]] = []
    at = 0

    def varint() -> int:
        nonlocal at
        n = shift = 0
        while True:
            if at >= len(data) or shift > 63:
                raise ValueError("truncated varint")
            byte = data[at]
            at += 1
            n |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return n

    while at < len(data):
        key = varint()
        number, kind = key >> 3, key & 7
        if kind == 0:
            out.append((number, varint()))
        elif kind == 2:
            size = varint()
            if at + size > len(data):
                raise ValueError("truncated field")
            out.append((number, data[at : at + size]))
            at += size
        elif kind in (1, 5):
            at += 8 if kind == 1 else 4
        else:
            raise ValueError(f"wire type {kind}")
    return out


def grpc_retry_delay(status_details: bytes | None) -> float | None:
    """The delay a `google.rpc.Status` (the `grpc-status-details-bin` trailer) asks for in
    its `RetryInfo` detail, in seconds; None when it asks for none."""
    if not status_details:
        return None
    try:
        for number, detail in _fields(status_details):
            if number != 3 or not isinstance(detail, bytes):  # Status.details: Any
                continue
            parts = dict(_fields(detail))
            if parts.get(1) != _RETRY_INFO.encode():
                continue
            info = dict(_fields(parts[2])) if isinstance(parts.get(2), bytes) else {}
            duration = info.get(1)  # RetryInfo.retry_delay: Duration
            if not isinstance(duration, bytes):
                return None
            span = dict(_fields(duration))
            seconds, nanos = span.get(1, 0), span.get(2, 0)
            if isinstance(seconds, int) and isinstance(nanos, int):
                return seconds + nanos / 1e9
    except ValueError:
        return None
    return None
