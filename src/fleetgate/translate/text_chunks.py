"""The usual chat stream chunk, "more text", read without a full parse where that is safe.

Most chunks of a chat stream differ from the one before only in `delta.content`: an engine
writes the same id, model, timestamps and nulls around each token. `TextChunks` learns
that frame from one chunk it has parsed in full and checked (`plain_text_delta`), and then
reads a later chunk of the same frame by comparing its start and end and decoding only the
string between them. That string is a JSON string literal (verified by decoding it), so
the chunk parses exactly as the learned one with a different text: the reading is exact,
never a guess. A stream translator then splices that literal into prebuilt bytes of its
own event (`TextStage.text_delta`) instead of building a dict and encoding it.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

import orjson

from fleetgate.translate.chat import reasoning_of

# `"content": "<a JSON string literal>"`; the group is the literal (candidates only: each
# one is checked by a probe before it is trusted)
_CONTENT = re.compile(rb'"content"\s*:\s*("(?:[^"\\]|\\.)*")')
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_PROBE_TEXT = '\x00fleetgate "probe" \u2603'
_PROBE = orjson.dumps(_PROBE_TEXT)
_SSE_DATA = b"data: "
# the top-level fields of a chat chunk that some translator reads
READ_FIELDS = frozenset({"id", "choices", "usage", "timings", "error"})
# a frame is learned again when it stops matching, while it pays: at most one learning
# per this many chunks read through a frame, after the first two
_HITS_PER_LEARNING = 16


class TextStage(Protocol):
    """A stream translator that can frame a plain text delta from prebuilt bytes."""

    def text_delta(self, text: str, quoted: bytes) -> bytes | None:
        """The client's bytes for more text (`quoted`: its JSON string literal), or None
        when the translator is not in a state where text just continues (then the chunk
        goes through `feed`)."""
        ...


def plain_text_delta(chunk: dict[str, Any]) -> str | None:
    """The text of a chat chunk that only adds text, else None.

    "Only text": one choice, no `finish_reason`, a non-empty `delta.content`, and nothing
    else a translator reads (tool calls, reasoning, the choice's logprobs, usage, timings,
    an error). Other delta fields (`role`, nulls such as SGLang's `"tool_calls": null`)
    are read by no translator.
    """
    choices = chunk.get("choices")
    if choices.__class__ is not list or len(choices) != 1:
        return None
    if chunk.get("usage") is not None or chunk.get("timings") is not None or chunk.get("error"):
        return None
    choice = choices[0]
    if choice.__class__ is not dict or choice.get("finish_reason") is not None:
        return None
    if choice.get("logprobs") is not None:
        return None
    delta = choice.get("delta")
    if delta.__class__ is not dict:
        return None
    text = delta.get("content")
    if text.__class__ is not str or not text:
        return None
    if len(delta) > 1 and (delta.get("tool_calls") or reasoning_of(delta) is not None):
        return None
    return text


def _content_of(payload: Any) -> Any:
    """`choices[0].delta.content` of a parsed chunk (None when the shape differs)."""
    choices = payload.get("choices") if payload.__class__ is dict else None
    if choices.__class__ is not list or len(choices) != 1 or choices[0].__class__ is not dict:
        return None
    delta = choices[0].get("delta")
    return delta.get("content") if delta.__class__ is dict else None


def _text_span(raw: bytes, payload: dict[str, Any], text: str) -> tuple[int, int] | None:
    """Where in `raw` the literal of `payload`'s text is: the one span that, replaced by
    another literal, changes that text and nothing else."""
    for found in _CONTENT.finditer(raw, len(_SSE_DATA)):
        start, end = found.span(1)
        try:
            parsed = orjson.loads(raw[len(_SSE_DATA) : start] + _PROBE + raw[end:])
        except orjson.JSONDecodeError:
            continue
        if _content_of(parsed) != _PROBE_TEXT:
            continue
        parsed["choices"][0]["delta"]["content"] = text
        if parsed == payload:
            return start, end
    return None


def _common(a: bytes, b: bytes) -> tuple[int, int]:
    """The lengths of the common start and the common end of two byte strings."""
    limit = min(len(a), len(b))
    lead = 0
    while lead < limit and a[lead] == b[lead]:
        lead += 1
    trail = 0
    while trail < limit - lead and a[-1 - trail] == b[-1 - trail]:
        trail += 1
    return lead, trail


def _free_span(
    old_tail: bytes, raw: bytes, end: int, payload: dict[str, Any]
) -> tuple[int, int] | None:
    """The span, in `raw` after its text (which ends at `end`), of the one string literal
    by which its tail differs from `old_tail`, when that literal is a top-level field no
    translator reads (OpenAI's `obfuscation` padding), else None."""
    tail = raw[end:]
    lead, trail = _common(old_tail, tail)
    changed = (end + lead, len(raw) - trail)  # the bytes of `raw` that differ
    # the tail starts outside any string: each match is one string token of the chunk
    for found in _STRING.finditer(raw, end):
        start, stop = found.span()
        if start > changed[0]:
            return None
        if stop < changed[1]:
            continue
        try:
            parsed = orjson.loads(raw[len(_SSE_DATA) : start] + _PROBE + raw[stop:])
        except orjson.JSONDecodeError:
            return None
        if parsed.__class__ is not dict:
            return None
        differ = [k for k in parsed.keys() | payload.keys() if parsed.get(k) != payload.get(k)]
        if len(differ) == 1 and differ[0] not in READ_FIELDS and parsed[differ[0]] == _PROBE_TEXT:
            return start, stop
        return None
    return None


class TextChunks:
    """The frame of one stream's plain text chunks: the bytes before and after the text,
    and the free field (one string no translator reads) the tail may hold."""

    __slots__ = (
        "_end",
        "_free",
        "_head",
        "_head_len",
        "_middle",
        "_tail",
        "_tail_len",
        "hits",
        "learnings",
    )

    def __init__(self) -> None:
        self._head: bytes | None = None  # the SSE line up to the text's opening quote
        self._tail = b""  # from just after its closing quote to the end
        self._head_len = 0
        self._tail_len = 0
        self._free = False  # the tail is `_middle`, a free string literal, then `_end`
        self._middle = b""
        self._end = b""
        self.hits = 0
        self.learnings = 0

    def match(self, raw: bytes) -> tuple[str, bytes] | None:
        """(text, its JSON literal) of a one-line SSE event in the learned frame, else None."""
        head = self._head
        if head is None or not raw.startswith(head):
            return None
        if self._free:
            # head, the text literal, middle, the free literal, end: the frame with two
            # literals of its own (each checked to be one string below)
            cut = raw.find(self._middle, self._head_len)
            if cut < 0 or not raw.endswith(self._end):
                return None
            free = raw[cut + len(self._middle) : len(raw) - len(self._end)]
            try:
                if orjson.loads(free).__class__ is not str:
                    return None
            except orjson.JSONDecodeError:
                return None
            quoted = raw[self._head_len : cut]
        elif raw.endswith(self._tail):
            quoted = raw[self._head_len : len(raw) - self._tail_len]
        else:
            return None
        try:
            text = orjson.loads(quoted)
        except orjson.JSONDecodeError:
            return None  # not one string literal: the chunk's shape is not the frame's
        if text.__class__ is not str or not text:
            return None
        self.hits += 1
        return text, quoted

    def learn(self, raw: bytes, payload: dict[str, Any], text: str) -> bytes:
        """The literal of `text` in `raw` (a one-line SSE event whose parsed `payload`
        `plain_text_delta` accepted), learning the frame around it when that pays."""
        if self.learnings >= 2 and self.hits < _HITS_PER_LEARNING * self.learnings:
            return orjson.dumps(text)  # frames that change every chunk: not worth learning
        self.learnings += 1
        span = _text_span(raw, payload, text)
        if span is None:
            return orjson.dumps(text)
        start, end = span
        head, tail = raw[:start], raw[end:]
        free = None
        if head == self._head and not self._free and tail != self._tail:
            free = _free_span(self._tail, raw, end, payload)
        if free is not None:
            self._free, self._middle, self._end = True, raw[end : free[0]], raw[free[1] :]
        else:
            self._free = False
        self._head, self._tail = head, tail
        self._head_len, self._tail_len = start, len(raw) - end
        return raw[start:end]
