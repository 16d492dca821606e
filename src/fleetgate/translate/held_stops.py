"""Stop strings the upstream is not sent, which the gateway holds its answer to itself.

Anthropic refuses a stop sequence that is only whitespace (a 400, "each stop sequence must
contain non-whitespace"), where chat and Ollama take any (`"\\n\\n"`, `" "`). A request
translated to Anthropic sends the others, and the gateway ends the upstream's answer at
the first of the held ones as Anthropic would have: the text stops before it,
`stop_reason` is `"stop_sequence"` and `stop_sequence` names it (every client protocol's
translation reads that as its own stop). A stream keeps back the end of a text delta
that could begin a held stop until the next delta tells; after a match, the rest of the
upstream's output is dropped and its stop reason replaced, its usage kept.
"""

from __future__ import annotations

from typing import Any

from fleetgate.translate.events import Event


def requested(endpoint: str, body: dict[str, Any]) -> list[str]:
    """The stop strings a client request of `endpoint` asks for (non-strings left out)."""
    if endpoint == "chat.completions":
        value = body.get("stop")
    elif endpoint == "messages":
        value = body.get("stop_sequences")
    elif endpoint in ("ollama.chat", "ollama.generate"):
        options = body.get("options")
        value = options.get("stop") if isinstance(options, dict) else None
    else:
        return []
    if isinstance(value, str):
        return [value]
    return [s for s in value if isinstance(s, str)] if isinstance(value, list) else []


def sendable_to_anthropic(stop: str) -> bool:
    """Whether Anthropic takes the stop sequence: one with a character not whitespace."""
    return not stop.isspace() and stop != ""


def anthropic_held(stops: list[str]) -> tuple[str, ...]:
    """The stops Anthropic would refuse and the gateway holds the answer to (the empty
    string asks for nothing: it is neither sent nor held)."""
    return tuple(s for s in stops if s and s.isspace())


def earliest(text: str, stops: tuple[str, ...]) -> tuple[int, str] | None:
    """(where, which) of the first stop in `text`, None when it holds none."""
    best: tuple[int, str] | None = None
    for stop in stops:
        at = text.find(stop)
        if at >= 0 and (best is None or at < best[0]):
            best = (at, stop)
    return best


def partial_tail(text: str, stops: tuple[str, ...]) -> int:
    """The length of the longest end of `text` that begins some stop (and is not one)."""
    longest = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:size]):
                longest = size
                break
    return longest


def cut_message(answer: dict[str, Any], stops: tuple[str, ...]) -> dict[str, Any]:
    """An Anthropic `message` ended at the first held stop in its text blocks (the blocks
    after that one dropped: the model would not have gone on to them)."""
    content = answer.get("content")
    if not stops or not isinstance(content, list):
        return answer
    for i, block in enumerate(content):
        if not isinstance(block, dict) or block.get("type") != "text":
            continue
        text = block.get("text")
        found = earliest(text, stops) if isinstance(text, str) else None
        if found is None:
            continue
        at, stop = found
        kept = [*content[:i], {**block, "text": text[:at]}]
        return {**answer, "content": kept, "stop_reason": "stop_sequence", "stop_sequence": stop}
    return answer


class MessageStopsStream:
    """Anthropic stream events in, the same stream held to `stops` out."""

    __slots__ = ("_block", "_matched", "_pending", "stops")

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self._block = -1  # the index of the open text block (-1: none)
        self._pending = ""  # its text kept back: it may begin a stop
        self._matched: str | None = None

    def _flush(self) -> list[Event]:
        if not self._pending:
            return []
        text, self._pending = self._pending, ""
        return [_text_delta(self._block, text)]

    def feed(self, event: Event) -> list[Event]:
        data = event[1]
        kind = data.get("type")
        if kind == "message_delta":
            out = self._flush()
            if self._matched is not None:
                delta = {
                    **(data.get("delta") or {}),
                    "stop_reason": "stop_sequence",
                    "stop_sequence": self._matched,
                }
                event = (event[0], {**data, "delta": delta})
            return [*out, event]
        if kind in ("message_start", "message_stop", "ping", "error"):
            return [event]
        if self._matched is not None:
            return []  # output past the stop: the model would not have written it
        if kind == "content_block_start":
            block = data.get("content_block")
            is_text = isinstance(block, dict) and block.get("type") == "text"
            self._block = data.get("index", 0) if is_text else -1
            return [event]
        if kind == "content_block_stop":
            out = self._flush() if data.get("index", 0) == self._block else []
            return [*out, event]
        delta = data.get("delta")
        if (
            kind != "content_block_delta"
            or data.get("index", 0) != self._block
            or not isinstance(delta, dict)
            or delta.get("type") != "text_delta"
            or not isinstance(delta.get("text"), str)
        ):
            return [event]
        return self._text(self._pending + delta["text"])

    def _text(self, text: str) -> list[Event]:
        found = earliest(text, self.stops)
        if found is not None:
            at, self._matched = found
            self._pending = ""
            out = [_text_delta(self._block, text[:at])] if at else []
            out.append(("content_block_stop", {"type": "content_block_stop", "index": self._block}))
            return out
        keep = partial_tail(text, self.stops)
        self._pending = text[len(text) - keep :]
        sent = text[: len(text) - keep]
        return [_text_delta(self._block, sent)] if sent else []

    def finish(self) -> list[Event]:
        return self._flush()


def _text_delta(index: int, text: str) -> Event:
    delta = {"type": "text_delta", "text": text}
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


# ---- OpenAI's four ---------------------------------------------------------------------------

# OpenAI's chat completions take up to four stop sequences (a 400 for a fifth); Anthropic
# and Ollama clients may send more: an `openai`-kind provider is sent the first four and
# the gateway holds the rest
OPENAI_STOPS = 4


def openai_held(stops: list[str]) -> tuple[str, ...]:
    """The stops past the four OpenAI takes, which the gateway holds the answer to."""
    return tuple(s for s in stops[OPENAI_STOPS:] if s)


def openai_sendable(body: dict[str, Any]) -> dict[str, Any]:
    """A chat request with no more stop sequences than OpenAI takes."""
    stop = body.get("stop")
    if not isinstance(stop, list) or len(stop) <= OPENAI_STOPS:
        return body
    return {**body, "stop": stop[:OPENAI_STOPS]}


def cut_completion(answer: dict[str, Any], stops: tuple[str, ...]) -> dict[str, Any]:
    """A chat completion ended at the first held stop in its content, as an engine ends
    one: `finish_reason` stop, the stop named in `stop_reason` (vLLM's field, which the
    translations read), the tool calls after it dropped."""
    choices = answer.get("choices")
    if not stops or not isinstance(choices, list) or not choices:
        return answer
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    text = message.get("content") if isinstance(message, dict) else None
    found = earliest(text, stops) if isinstance(text, str) else None
    if message is None or found is None:
        return answer
    at, stop = found
    kept = {k: v for k, v in message.items() if k != "tool_calls"}
    kept["content"] = text[:at]
    choice = {**choice, "message": kept, "finish_reason": "stop", "stop_reason": stop}
    return {**answer, "choices": [choice, *choices[1:]]}


class ChatStopsStream:
    """Chat completion chunks in, the same stream held to `stops` out (`cut_completion`)."""

    __slots__ = ("_frame", "_matched", "_pending", "stops")

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self._pending = ""  # content kept back: it may begin a stop
        self._matched: str | None = None
        self._frame: dict[str, Any] = {}  # the last chunk's envelope, for a chunk of its own

    def _flush(self) -> list[Event]:
        if not self._pending:
            return []
        text, self._pending = self._pending, ""
        choice = {"index": 0, "delta": {"content": text}, "finish_reason": None}
        return [(None, {**self._frame, "choices": [choice]})]

    def feed(self, event: Event) -> list[Event]:
        chunk = event[1]
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return [*self._flush(), event]  # the usage chunk, an error
        self._frame = {k: v for k, v in chunk.items() if k not in ("choices", "usage")}
        choice = choices[0]
        finished = bool(choice.get("finish_reason"))
        if self._matched is not None:  # output past the stop: the model would not have written it
            if not finished:
                return []
            done = {**choice, "delta": {}, "finish_reason": "stop", "stop_reason": self._matched}
            return [(event[0], {**chunk, "choices": [done]})]
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else None
        if not isinstance(delta, dict) or not isinstance(text, str) or not text:
            return [*self._flush(), event] if finished else [event]
        text = self._pending + text
        found = earliest(text, self.stops)
        if found is not None:
            at, self._matched = found
            self._pending = ""
            kept = {k: v for k, v in delta.items() if k != "tool_calls"}
            kept["content"] = text[:at]
            end = {"finish_reason": "stop", "stop_reason": self._matched} if finished else {}
            out = {**choice, "delta": kept, **end}
            return [(event[0], {**chunk, "choices": [out, *choices[1:]]})]
        keep = 0 if finished else partial_tail(text, self.stops)
        self._pending = text[len(text) - keep :]
        sent = {**choice, "delta": {**delta, "content": text[: len(text) - keep]}}
        return [(event[0], {**chunk, "choices": [sent, *choices[1:]]})]

    def finish(self) -> list[Event]:
        return self._flush()
