"""Newline-delimited JSON streams, as Ollama's native API sends them (one object a line)."""

from __future__ import annotations

import orjson

CONTENT_TYPE = "application/x-ndjson"


def is_error_line(line: bytes) -> bool:
    """Ollama reports a failure inside a stream as a line `{"error": "..."}`."""
    return line.startswith(b'{"error"') or (
        line.startswith(b"{") and b'"error"' in line[:64] and b'"done"' not in line
    )


def error_line(message: str) -> bytes:
    return orjson.dumps({"error": message}) + b"\n"
