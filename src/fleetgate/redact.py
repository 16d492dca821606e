"""Secrets out of upstream text: the one scrubber for what leaves the gateway.

An upstream may echo the credential it was sent (a 401 that quotes the key, a proxy that
dumps its headers). Every configured secret value (each provider's `api_key`, each value
of its `keys`, each header value) is replaced by `***` in upstream text before it reaches a
client (error messages, relayed error bodies) or a log line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import orjson

REDACTED = "***"
# shorter values are not worth the name (`1`, `on`) and would blank out ordinary words
MIN_SECRET_LENGTH = 4


class Redactor:
    """Replaces each of a fixed set of secret values (and their JSON-escaped forms)."""

    __slots__ = ("_bytes", "_text")

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if len(secret) >= MIN_SECRET_LENGTH:
                forms.add(secret)
                forms.add(orjson.dumps(secret).decode()[1:-1])  # as a JSON string holds it
        ordered = sorted(forms, key=len, reverse=True)  # the longest match wins
        self._text = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        self._bytes = (
            re.compile(b"|".join(re.escape(f.encode()) for f in ordered)) if ordered else None
        )

    def text(self, value: str) -> str:
        return self._text.sub(REDACTED, value) if self._text is not None else value

    def bytes(self, value: bytes) -> bytes:
        if self._bytes is None:
            return value
        return self._bytes.sub(REDACTED.encode(), value)
