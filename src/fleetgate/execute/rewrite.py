"""Rewrites the `model` field of upstream JSON and SSE bodies to the client's name."""

from __future__ import annotations

from functools import lru_cache

import orjson


class ModelRewriter:
    """Sets `model` to the client's name in response bodies, cheaply.

    JSON escapes every quote inside a string, so the byte pattern `"model":"NAME"` can only
    be the key itself; replacing it is exact. Bodies whose `model` differs from the name sent
    upstream (providers that answer with a dated name, vLLM answering an alias with its first
    served name) are parsed and rewritten, including the message / response object that
    Anthropic `message_start` and Responses stream events nest it in.
    """

    __slots__ = ("_client", "_patterns", "_replacements", "identity")

    def __init__(self, upstream: str, client: str) -> None:
        self.identity = upstream == client
        self._client = client
        up = orjson.dumps(upstream)
        cl = orjson.dumps(client)
        self._patterns = (b'"model":' + up, b'"model": ' + up)
        self._replacements = (b'"model":' + cl, b'"model": ' + cl)

    def json(self, body: bytes, parsed: object = None) -> bytes:
        """Rewrite one JSON document (a whole body or one SSE `data:` payload); `parsed`
        is the document already decoded, when the caller has it (it may be changed)."""
        if self.identity and b'"model"' not in body:
            return body
        for pattern, replacement in zip(self._patterns, self._replacements, strict=True):
            if pattern in body:
                return body.replace(pattern, replacement)
        if b'"model"' not in body:
            return body
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


@lru_cache(maxsize=4096)
def rewriter_for(upstream: str, client: str) -> ModelRewriter:
    """One rewriter per name pair: it is immutable, so requests can share it."""
    return ModelRewriter(upstream, client)
