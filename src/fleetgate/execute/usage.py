"""Token counts and stop reasons, read from the answers of every protocol, whole or streamed.

The executor parses a whole answer once (for its validity and its `model`); its counts and
stop reason come from that parse. A stream's are read from its end: the last event that
reports usage (an OpenAI usage chunk, Anthropic's `message_delta` after the input count of
`message_start`, a Responses `response.completed`, Ollama's last line, or llama.cpp's
`timings` when the client asked for no usage), and the last stop reason, found by a byte
scan.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from fleetgate.execute.framing import Framing
from fleetgate.execute.outcome import Attempt
from fleetgate.execute.sse import CR

USAGE_TAIL = 4096  # bytes of a stream's end kept to read its usage and stop reason
LENGTH = "length"  # the normalised stop reason of every protocol's length stop
_LENGTH_REASONS = frozenset({"length", "max_tokens", "max_output_tokens"})
# chat `finish_reason`, Anthropic `stop_reason`, Ollama `done_reason`, Responses
# `incomplete_details.reason`
_STOP_IN_STREAM = re.compile(
    rb'"(?:finish_reason|stop_reason|done_reason)"\s*:\s*"(\w+)"'
    rb'|"incomplete_details"\s*:\s*\{\s*"reason"\s*:\s*"(\w+)"'
)
# what comes before `reason"` in each key, and how far back it starts
_STOP_PREFIXES = ((b'"finish_', 8), (b'"stop_', 6), (b'"done_', 6))
# how far before its `"reason"` an `"incomplete_details"` key may start (`: {` and spaces)
_DETAILS_REACH = 48


def _has_usage(data: bytes) -> bool:
    """Whether `data` may report usage: OpenAI's and Anthropic's `usage`, Ollama's counts,
    llama.cpp's `timings` (three `in` tests: no generator per call)."""
    return b'"usage"' in data or b'"prompt_eval_count"' in data or b'"timings"' in data


_USAGE_START = re.compile(rb'"usage"\s*:\s*\{')


def _normal(reason: object) -> str | None:
    if not isinstance(reason, str) or not reason:
        return None
    return LENGTH if reason in _LENGTH_REASONS else reason


def stop_reason(data: Any) -> str | None:
    """The stop reason of a whole answer: `length` for a length stop, the protocol's own
    word for the others, None when the answer gives none."""
    if not isinstance(data, dict):
        return None
    choices = data.get("choices")
    if isinstance(choices, list):
        first = choices[0] if choices else None
        return _normal(first.get("finish_reason")) if isinstance(first, dict) else None
    for name in ("stop_reason", "done_reason"):  # Anthropic, Ollama
        if name in data:
            return _normal(data[name])
    if data.get("status") == "incomplete":  # Responses
        details = data.get("incomplete_details")
        return _normal(details.get("reason") if isinstance(details, dict) else None) or LENGTH
    return None


def stop_in_stream(block: bytes) -> str | None:
    """The last stop reason in a stream's end (a byte scan; no event is parsed).

    Every key ends in `reason"` (`"finish_reason"`, `"stop_reason"`, `"done_reason"`, and
    the `"reason"` inside `"incomplete_details"`): one backward search for that finds the
    candidates, last one first, and the pattern is tried only there, where a search per
    key read the whole ~4 KB tail once for each key it lacks."""
    at = len(block)
    while (at := block.rfind(b'reason"', 0, at)) > 0:
        if block[at - 1] == 0x22:  # `"reason"`: Responses' incomplete_details, if any
            start = block.rfind(b'"incomplete_details"', max(0, at - _DETAILS_REACH), at)
        else:
            start = next(
                (at - n for key, n in _STOP_PREFIXES if at >= n and block.startswith(key, at - n)),
                -1,
            )
        if start >= 0 and (match := _STOP_IN_STREAM.match(block, start)) is not None:
            return _normal((match[1] or match[2]).decode())
    return None


# the largest count taken: the request log's token columns are 32-bit integers, and no
# window comes near it. A count outside [0, MAX_COUNT] is no engine's honest report (a
# negative one would credit a key's budget and tokens per minute back): it is not taken.
MAX_COUNT = 2**31 - 1


def token_count(value: object) -> int | None:
    """`value` when it is a count an engine can have reported, else None."""
    return value if type(value) is int and 0 <= value <= MAX_COUNT else None


def _sum(*parts: object) -> int | None:
    """Counts added up, a missing part (None) as 0; None once any part is no count."""
    total = 0
    for part in parts:
        if part is not None:
            if (n := token_count(part)) is None:
                return None
            total += n
    return total


def _cached(usage: dict[str, Any]) -> object:
    """Prompt tokens read from the provider's cache, unchecked: OpenAI's
    `prompt_tokens_details.cached_tokens`, Responses' `input_tokens_details.cached_tokens`,
    Anthropic's `cache_read_input_tokens`; None when the usage does not say."""
    details = usage.get("prompt_tokens_details")
    if details is None:
        details = usage.get("input_tokens_details")
        if details is None:
            return usage.get("cache_read_input_tokens")
    return details.get("cached_tokens") if type(details) is dict else None


def _counts(data: object) -> tuple[object, object, object] | None:
    """(prompt, completion, read from cache) as a body or stream event reports them,
    unchecked; None when it reports no usage. The prompt count is the whole prompt:
    Anthropic reports the tokens read from its cache apart from `input_tokens` (llama.cpp's
    Messages API too), so they are added; of these, the cache's share is the third count
    (llama.cpp's `timings.cache_n` when no usage was asked for)."""
    if not isinstance(data, dict):
        return None
    usage = data.get("usage")
    for holder in ("response", "message"):  # Responses' completed event, Anthropic's start
        inner = data.get(holder)
        if usage is None and isinstance(inner, dict):
            usage = inner.get("usage")
    if isinstance(usage, dict):
        prompt = usage.get("prompt_tokens")
        if prompt is None:
            prompt = usage.get("input_tokens")
            if prompt is not None:
                prompt = _sum(
                    prompt,
                    usage.get("cache_read_input_tokens"),
                    usage.get("cache_creation_input_tokens"),
                )
        completion = usage.get("completion_tokens", usage.get("output_tokens"))
        return prompt, completion, _cached(usage)
    if "prompt_eval_count" in data:  # Ollama native
        return data.get("prompt_eval_count"), data.get("eval_count"), None
    if isinstance(timings := data.get("timings"), dict):  # llama.cpp, no usage asked for
        cached = timings.get("cache_n")
        return _sum(cached, timings.get("prompt_n")), timings.get("predicted_n"), cached
    return None


def _take(attempt: Attempt, prompt: object, completion: object, cached: object) -> None:
    if (n := token_count(prompt)) is not None:
        attempt.prompt_tokens = n
    if (n := token_count(completion)) is not None:
        attempt.completion_tokens = n
    if cached is not None and (n := token_count(cached)) is not None:
        attempt.cache_read_tokens = n


def take_usage(attempt: Attempt, data: object) -> None:
    """Token counts (and the prompt's share read from a cache) from an OpenAI, Anthropic,
    Responses or Ollama body or stream event."""
    counts = _counts(data)
    if counts is not None:
        _take(attempt, *counts)


def _usage_object(block: bytes) -> bytes | None:
    """The last `"usage": {...}` object in a block that may start mid-event (a Responses
    `response.completed` carries the whole output before its usage)."""
    starts = list(_USAGE_START.finditer(block))
    if not starts:
        return None
    begin = starts[-1].end() - 1
    depth = 0
    for i in range(begin, len(block)):
        ch = block[i]
        if ch == 0x7B:  # {
            depth += 1
        elif ch == 0x7D:  # }
            depth -= 1
            if depth == 0:
                return block[begin : i + 1]
    return None


def _last_usage_marker(block: bytes, end: int) -> int:
    """Where the last usage marker (`_has_usage`'s) before `end` begins; -1 when none. The
    other markers are looked for only after the last `"usage"`: a backward scan of a whole
    block for a marker it lacks costs more than the rest of the work."""
    at = block.rfind(b'"usage"', 0, end)
    after = max(at, 0)
    return max(
        at,
        block.rfind(b'"prompt_eval_count"', after, end),
        block.rfind(b'"timings"', after, end),
    )


def _event_counts(data: bytes) -> tuple[object, object, object] | None:
    """The counts of one event's payload (it may be only the end of one: then its usage
    object, if it is whole)."""
    try:
        return _counts(orjson.loads(data))
    except orjson.JSONDecodeError:
        found = _usage_object(data)
        if found is None:
            return None
        try:
            return _counts({"usage": orjson.loads(found)})
        except orjson.JSONDecodeError:
            return None


def stream_usage(attempt: Attempt, block: bytes, framing: Framing) -> None:
    """Usage from the last event of a stream block that reports it: found from the end by
    its marker, so only the events that carry one are cut out and read (the markers are
    searched from the end, without a forward test of the whole block first; `\r` alone is
    looked for: one byte is found by `memchr`, two by a slower search). When that event
    has no prompt count (Anthropic's `message_delta`, the output count alone), the prompt
    count, and its share read from a cache, are the ones of the event before it that has
    one (`message_start`'s input)."""
    if CR in block:
        block = block.replace(b"\r\n", b"\n")
    sep = framing.separator
    end = len(block)
    last: tuple[object, object, object] | None = None  # the last event with usage's counts
    while (at := _last_usage_marker(block, end)) >= 0:
        begin = block.rfind(sep, 0, at)
        begin = 0 if begin < 0 else begin + len(sep)
        stop = block.find(sep, at)
        end = begin  # the next search: the events before this one
        data = framing.payload(block[begin : len(block) if stop < 0 else stop])
        if not data or not _has_usage(data):
            continue  # the marker was outside the payload (another line of the event)
        if b'"usage":null' in data or b'"usage": null' in data:
            continue  # OpenAI chunks carry an empty usage until the last one
        counts = _event_counts(data)
        if counts is None:
            continue
        if last is None:
            last = counts
        elif token_count(counts[0]) is not None:  # the prompt's counts, from an earlier event
            last = (counts[0], last[1], last[2] if last[2] is not None else counts[2])
        if token_count(last[0]) is not None:
            break
    if last is not None:
        _take(attempt, *last)


# an answer's own id and model, at the start of a stream's first event (a sampled trace's)
_ANSWER_ID = re.compile(rb'"id"\s*:\s*"([^"\\]{1,128})"')
_ANSWER_MODEL = re.compile(rb'"model"\s*:\s*"([^"\\]{1,255})"')


def answer_facts(attempt: Attempt, data: dict[str, Any]) -> None:
    """What a whole answer says of itself, for its trace span: its id and the model that
    answered (its counts, cache reads included, are `take_usage`'s)."""
    inner = data.get("message")  # Anthropic's message_start (a stream's) holds them
    holder = inner if isinstance(inner, dict) and "id" in inner else data
    answer_id, model = holder.get("id"), holder.get("model")
    if isinstance(answer_id, str):
        attempt.response_id = answer_id[:128]
    if isinstance(model, str):
        attempt.response_model = model[:255]


def stream_facts(attempt: Attempt, block: bytes) -> None:
    """`answer_facts` of a stream, from its first events (a byte scan, no parse)."""
    if (found := _ANSWER_ID.search(block)) is not None:
        attempt.response_id = found[1].decode("utf-8", "replace")
    if (found := _ANSWER_MODEL.search(block)) is not None:
        attempt.response_model = found[1].decode("utf-8", "replace")
