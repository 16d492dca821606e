"""Server-sent events, as OpenAI-compatible upstreams stream them."""

from __future__ import annotations

from collections.abc import Iterator

DONE = b"[DONE]"


class EventSplitter:
    """Cuts a byte stream into whole SSE events (without the blank line that ends each)."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n")
        buffer = self._buffer + chunk if self._buffer else chunk
        start = 0
        while True:
            end = buffer.find(b"\n\n", start)
            if end < 0:
                break
            if end > start:
                yield buffer[start:end]
            start = end + 2
        self._buffer = buffer[start:]

    def rest(self) -> bytes:
        rest, self._buffer = self._buffer.strip(), b""
        return rest


def event_data(event: bytes) -> bytes | None:
    """The payload of an event's `data:` lines (joined), or None for comments etc."""
    if event.startswith(b"data:") and b"\n" not in event:
        return event[5:].lstrip(b" ")
    parts = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(parts) if parts else None


def is_error_event(data: bytes) -> bool:
    return data.startswith(b'{"error"') or (
        data.startswith(b"{") and b'"error"' in data[:64] and b'"choices"' not in data
    )
