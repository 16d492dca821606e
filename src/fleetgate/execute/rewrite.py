"""Rewrites the `model` field of upstream JSON and SSE bodies to the client's name."""

from __future__ import annotations

import re
from functools import lru_cache

import orjson

# What follows a `model` key: the colon, and a string value without escapes.
_PLAIN_VALUE = re.compile(rb'(\s*:\s*)"[^"\\]*"')
# What a key's opening quote follows; a quote inside a string follows a backslash
_BEFORE_KEY = frozenset(b"{, \t\r\n")


class ModelRewriter:
    """Sets `model` to the client's name in response bodies, cheaply.

    JSON escapes every quote inside a string, so the byte pattern `"model":"NAME"` is the key
    itself; replacing it is exact. A body whose `model` differs from the name sent upstream
    (providers that answer with a dated name, vLLM answering an alias with its first served
    name) has every `model` key's string value replaced in one pass too, the message /
    response object that Anthropic `message_start` and Responses stream events nest it in
    included. Only a value with escapes, or one that is not a string, is parsed and
    rewritten (at the top level and in those two objects).
    """

    __slots__ = (
        "_client",
        "_client_json",
        "_others",
        "_pairs",
        "compact",
        "compact_to",
        "identity",
    )

    def __init__(self, upstream: str, client: str) -> None:
        self.identity = upstream == client
        self._client = client
        up = orjson.dumps(upstream)
        cl = orjson.dumps(client)
        # the upstream's name after the key, and the client's that replaces it
        self._pairs = ((b'"model":' + up, b'"model":' + cl), (b'"model": ' + up, b'"model": ' + cl))
        # the first pair, the form most upstreams write (`Framing.rewrite` tries it inline)
        self.compact, self.compact_to = self._pairs[0]
        self._others = self._pairs[1:]
        self._client_json = cl

    def json(self, body: bytes, parsed: object = None, compact_tried: bool = False) -> bytes:
        """Rewrite one JSON document (a whole body or one SSE `data:` payload); `parsed`
        is the document already decoded, when the caller has it (it may be changed);
        `compact_tried`: the caller found no compact pair (`compact`) in it already."""
        if self.identity and b'"model"' not in body:
            return body
        for pattern, replacement in self._others if compact_tried else self._pairs:
            # one pass, no search before it: `replace` gives `body` itself back when it
            # finds nothing
            rewritten = body.replace(pattern, replacement)
            if rewritten is not body:
                return rewritten
        if b'"model"' not in body:
            return body
        rewritten = self._plain_values(body)
        if rewritten is not None:
            return rewritten
        data = parsed
        if data is None:
            try:
                data = orjson.loads(body)
            except orjson.JSONDecodeError:
                return body
        if not isinstance(data, dict):
            return body
        changed = False
        for obj in (data, data.get("message"), data.get("response")):
            if isinstance(obj, dict) and "model" in obj and obj["model"] != self._client:
                obj["model"] = self._client
                changed = True
        return orjson.dumps(data) if changed else body

    def _plain_values(self, body: bytes) -> bytes | None:
        """`body` with every `model` key's value set to the client's name, in one pass;
        None when a value is not a plain string (escapes, null, an object)."""
        parts = body.split(b'"model"')
        out = [parts[0]]
        client = self._client_json
        for i in range(1, len(parts)):
            part, before = parts[i], parts[i - 1]
            if not before or before[-1] not in _BEFORE_KEY:  # text inside a string
                out.append(b'"model"' + part)
                continue
            value = _PLAIN_VALUE.match(part)
            if value is None:
                return None
            out.append(b'"model"' + value[1] + client + part[value.end() :])
        return b"".join(out)


@lru_cache(maxsize=4096)
def rewriter_for(upstream: str, client: str) -> ModelRewriter:
    """One rewriter per name pair: it is immutable, so requests can share it."""
    return ModelRewriter(upstream, client)
