"""Continues an answer cut mid-way on a sibling, so the client gets one answer.

A streamed answer can stop early once its output has reached the client: the connection
resets, the upstream stalls past `first_byte`, it sends an error event, or a window cuts
it (a length stop at the window). Before, the stream ended with `stream_interrupted`, or
was left cut. Where a later candidate of the plan can continue it, the executor now sends
that candidate the original request plus an assistant message holding the text already
relayed (with the engine's switch to continue that message rather than answer it), its
output limit lowered by what was produced, and relays the new deltas into the same client
stream: the same id, block indices and framing, usage added up, one normal end.

The stream of an answer that may be continued goes through two pieces:

* the executor's one relay loop (`execute/relay.py`), given this continuation: the same
  check each block gets anyway (`event_check.py`) finds the events that end the answer (a
  stop reason, Ollama's `done`, an error event); they are held back until the end shows
  whether the answer was cut, and `StreamCut` is raised in place of the stream's end when
  a continuation is wanted;
* `Continuation.stream`, which relays the client's bytes (keeping them, undecoded, to
  read the text from only when a continuation is needed), catches `StreamCut`, asks the
  executor for the continuation, and splices its client stream in.

Streams with no candidate to continue on take the same loop without holding anything.

What is continued (docs/routing.md#answers-that-survive): text only (never a tool call or
reasoning in progress), on the chat-like endpoints (chat completions, completions,
Messages, Ollama chat), on a deployment of the same model by default, on engines whose
chat template can continue a final assistant message.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import orjson

from fleetgate.config.schema import ResumeConfig
from fleetgate.context.truncation import CUT_SHORT_NOTE, Cut
from fleetgate.errors import GatewayError
from fleetgate.execute.framing import NDJSON, Framing, stream_error_event
from fleetgate.execute.outcome import Attempt
from fleetgate.execute.sse import DONE, event_data
from fleetgate.execute.usage import LENGTH
from fleetgate.fleet import Deployment, Fleet
from fleetgate.ingress.profile import RequestProfile
from fleetgate.routing.plan import Candidate, RoutePlan

INTERRUPTED = "interrupted"  # a reset, a stall or an error event after output started
WINDOW = "window"  # a length stop at the window

# client endpoints whose answers can be continued: one text, with an assistant turn (or,
# for completions, the prompt) to carry what was already said
ENDPOINTS = frozenset({"chat.completions", "completions", "messages", "ollama.chat"})
# engines whose chat template continues a final assistant message: vLLM and SGLang when told
# (`continue_final_message`), llama.cpp on its own (its `prefill_assistant`, on by default),
# Ollama on its own where the model's template allows (a final assistant message is
# continued), Anthropic natively (a final assistant turn is a prefill). Hosted OpenAI and
# OpenRouter have no such switch: they answer the assistant message instead.
KINDS = frozenset({"vllm", "sglang", "llamacpp", "ollama", "anthropic"})
# kinds told to continue the final message, and how (set on top of the body sent)
SWITCHES: dict[str, dict[str, Any]] = {
    "vllm": {"continue_final_message": True, "add_generation_prompt": False},
    "sglang": {"continue_final_message": True, "add_generation_prompt": False},
}
# engines that continue on their chat completions (their Messages endpoint, where they have
# one, may not carry the switch): an Anthropic or Ollama client is translated to chat there
CHAT_KINDS = frozenset({"vllm", "sglang", "llamacpp"})


class StreamCut(Exception):
    """Raised by `relay` for a stream a continuation takes over (never reaches a client)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class StreamOutcome(Protocol):
    """The executor's outcome, as far as a continuation reads and updates it."""

    candidate: Candidate
    stream: AsyncIterator[bytes] | None
    end_stream: Callable[[], None]
    attempts: list[Attempt]
    cut: Cut | None
    judged: bool


# the executor's attempt at a continuation: (candidate, the continuation's request, this
# continuation, why, output tokens inherited) -> the stream outcome, or None when it failed
AttemptAt = Callable[
    [Candidate, RequestProfile, "Continuation", str, int], Awaitable[StreamOutcome | None]
]
Judge = Callable[[RequestProfile, Deployment, Attempt, int | None], Cut | None]


@dataclass(slots=True)
class Prefix:
    """What the client has of the answer, read from the bytes relayed to it."""

    text: str = ""
    deltas: int = 0  # text deltas relayed (a token each, for engines that stream so)
    id: str | None = None  # the answer's id (chat, completions, Messages)
    created: int | None = None
    prompt_tokens: int | None = None  # as the client was told (Messages' message_start)
    open_text: int | None = None  # Messages: the index of the text block still open
    next_block: int = 0  # Messages: the index a new block would take


def settings_for(fleet: Fleet, candidate: Candidate) -> ResumeConfig:
    """The resume settings of a request's route: its virtual model's, else its model's."""
    if candidate.virtual_model is not None:
        virtual = fleet.virtual_models.get(candidate.virtual_model.lower())
        if virtual is not None and virtual.resume is not None:
            return virtual.resume
    model = fleet.models.get(candidate.deployment.model)
    return model.resume if model is not None else ResumeConfig()


def _priced(dep: Deployment) -> bool:
    return dep.price_input > 0 or dep.price_output > 0


def can_take_over(first: Deployment, candidate: Candidate, settings: ResumeConfig) -> bool:
    """Whether `candidate` may continue an answer `first` began (window aside)."""
    dep = candidate.deployment
    if dep.provider.kind not in KINDS:
        return False
    if dep.model != first.model and not settings.across_models:
        return False
    return settings.onto_priced or _priced(first) or not _priced(dep)


def _positive(value: object) -> int | None:
    return value if type(value) is int and value > 0 else None


def continuation_body(
    endpoint: str, body: dict[str, Any], text: str, produced: int
) -> dict[str, Any] | None:
    """The request that continues `text`: the client's, plus the text as a final assistant
    message (completions: at the prompt's end), every output limit lowered by `produced`.
    None when it cannot be built, or when nothing is left to produce."""
    out = dict(body)
    if endpoint == "completions":
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            return None  # token ids or a batch of prompts
        out["prompt"] = prompt + text
    else:
        messages = body.get("messages")
        if not isinstance(messages, list):
            return None
        last = messages[-1] if messages else None
        if isinstance(last, dict) and last.get("role") == "assistant":
            # the client's own prefill: the text goes on from it
            if not isinstance(last.get("content"), str):
                return None
            out["messages"] = [*messages[:-1], {**last, "content": last["content"] + text}]
        else:
            out["messages"] = [*messages, {"role": "assistant", "content": text}]
    for name in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        limit = _positive(body.get(name))
        if limit is not None:
            if limit <= produced:
                return None
            out[name] = limit - produced
    options = body.get("options")
    if isinstance(options, dict) and (limit := _positive(options.get("num_predict"))):
        if limit <= produced:
            return None
        out["options"] = {**options, "num_predict": limit - produced}
    return out


def switched(candidate: Candidate, upstream_endpoint: str) -> Candidate:
    """`candidate`, told to continue the final assistant message where its kind needs it."""
    switch = SWITCHES.get(candidate.deployment.provider.kind)
    if switch is None or upstream_endpoint != "chat.completions":
        return candidate
    params = dict(candidate.params or {})
    params["extra_body"] = {**(params.get("extra_body") or {}), **switch}
    return replace(candidate, params=params)


# ---- whole answers ----------------------------------------------------------------------


def _answer_text(endpoint: str, data: dict[str, Any]) -> str | None:
    """The text of a whole answer in the client's protocol; None when it is not one text."""
    if endpoint == "messages":
        blocks = data.get("content")
        if not isinstance(blocks, list) or any(
            not isinstance(b, dict) or b.get("type") != "text" for b in blocks
        ):
            return None
        return "".join(str(b.get("text") or "") for b in blocks)
    if endpoint == "ollama.chat":
        message = data.get("message")
        if not isinstance(message, dict) or message.get("tool_calls"):
            return None
        text = message.get("content")
        return text if isinstance(text, str) else None
    choices = data.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    if endpoint == "completions":
        text = choice.get("text")
    else:
        message = choice.get("message")
        if not isinstance(message, dict) or message.get("tool_calls"):
            return None
        text = message.get("content")
    return text if isinstance(text, str) else None


def _set_text(endpoint: str, data: dict[str, Any], text: str) -> None:
    if endpoint == "messages":
        data["content"] = [{"type": "text", "text": text}]
    elif endpoint == "ollama.chat":
        data["message"]["content"] = text
    elif endpoint == "completions":
        data["choices"][0]["text"] = text
    else:
        data["choices"][0]["message"]["content"] = text


_USAGE_KEYS = {  # client endpoint -> (where the counts are, prompt key, output key)
    "chat.completions": ("usage", "prompt_tokens", "completion_tokens"),
    "completions": ("usage", "prompt_tokens", "completion_tokens"),
    "messages": ("usage", "input_tokens", "output_tokens"),
    "ollama.chat": ("", "prompt_eval_count", "eval_count"),
}


@dataclass(slots=True)
class WholeContinuation:
    """How a whole answer a window cut goes on at a larger window: the request that
    continues it, and how the two answers become one."""

    first: Deployment  # the deployment that gave the cut answer
    settings: ResumeConfig
    profile: RequestProfile  # the continuing request
    text: str  # the cut answer's text
    produced: int  # its output tokens (all of them, across earlier continuations)
    prompt: int | None  # the prompt's tokens, as the cut answer reported them

    @classmethod
    def of(
        cls,
        profile: RequestProfile,
        sent: RequestProfile,
        fleet: Fleet,
        candidate: Candidate,
        attempt: Attempt,
        answer: bytes | None,
    ) -> WholeContinuation | None:
        """For a cut whole answer (`answer`, to `sent`, the client's `profile` or an earlier
        continuation); None when it cannot go on."""
        settings = settings_for(fleet, candidate)
        if (
            profile.endpoint not in ENDPOINTS
            or not settings.after_window
            or attempt.completion_tokens is None
            or answer is None
            or (attempt.inherited_tokens is not None and settings.max_continuations < 2)
            or settings.max_continuations == 0
        ):
            return None
        try:
            data = orjson.loads(answer)
        except orjson.JSONDecodeError:
            return None
        text = _answer_text(profile.endpoint, data) if isinstance(data, dict) else None
        if not text:
            return None
        produced = attempt.completion_tokens + (attempt.inherited_tokens or 0)
        body = continuation_body(profile.endpoint, profile.body, text, produced)
        if body is None:
            return None
        continuing = copy.copy(profile)
        continuing.body = body
        where, prompt_key, _ = _USAGE_KEYS[profile.endpoint]
        counts = data.get(where) if where else data
        prompt = counts.get(prompt_key) if isinstance(counts, dict) else None
        return cls(
            candidate.deployment,
            settings,
            continuing,
            text,
            produced,
            prompt if type(prompt) is int and sent is profile else None,
        )

    def merge(self, cut: bytes | None, answer: bytes | None) -> bytes | None:
        """The continuation's `answer` as one with the `cut` one: the cut answer's id, both
        texts, the continuation's stop reason, usage added up. None when it is no text."""
        endpoint = self.profile.endpoint
        try:
            first = orjson.loads(cut or b"")
            data = orjson.loads(answer or b"")
        except orjson.JSONDecodeError:
            return None
        if not isinstance(first, dict) or not isinstance(data, dict):
            return None
        text = _answer_text(endpoint, data)
        if text is None:
            return None
        _set_text(endpoint, data, self.text + text)
        for key in ("id", "created", "created_at"):
            if key in first and key in data:
                data[key] = first[key]
        where, prompt_key, output_key = _USAGE_KEYS[endpoint]
        counts = data.get(where) if where else data
        if isinstance(counts, dict):
            output = counts.get(output_key)
            if type(output) is int:
                counts[output_key] = output + self.produced
            prompt = counts.get(prompt_key)
            if type(prompt) is int:
                counts[prompt_key] = (
                    self.prompt if self.prompt is not None else max(prompt - self.produced, 0)
                )
            if type(counts.get("total_tokens")) is int:
                counts["total_tokens"] = counts[prompt_key] + counts[output_key]
        return orjson.dumps(data)


# ---- what the client has ----------------------------------------------------------------


def _payloads(block: bytes, ndjson: bool) -> list[Any]:
    """The JSON payloads of a block of whole client events (`[DONE]` and comments left out)."""
    out = []
    for raw in block.split(b"\n" if ndjson else b"\n\n"):
        data = raw.strip() if ndjson else event_data(raw)
        if not data or data == DONE:
            continue
        try:
            out.append(orjson.loads(data))
        except orjson.JSONDecodeError:
            continue
    return out


def read_relayed(endpoint: str, block: bytes) -> Prefix | None:
    """The answer's text and ids from the client's bytes so far; None when what is in
    progress is not text (a tool call, reasoning with no text yet, several choices)."""
    prefix = Prefix()
    parts: list[str] = []
    reasoning = False
    for obj in _payloads(block, endpoint == "ollama.chat"):
        if not isinstance(obj, dict):
            continue
        if endpoint == "messages":
            if _read_message_event(obj, prefix, parts) is False:
                return None
            continue
        if endpoint == "ollama.chat":
            message = obj.get("message")
            if isinstance(message, dict):
                if message.get("tool_calls"):
                    return None
                reasoning = reasoning or bool(message.get("thinking"))
                if isinstance(text := message.get("content"), str) and text:
                    parts.append(text)
                    prefix.deltas += 1
            continue
        if prefix.id is None and isinstance(obj.get("id"), str):
            prefix.id = obj["id"]
            prefix.created = obj.get("created") if type(obj.get("created")) is int else None
        for choice in obj.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                return None  # `n` > 1: several answers in one stream
            delta = choice.get("delta")
            if isinstance(delta, dict):
                if delta.get("tool_calls") or delta.get("function_call"):
                    return None
                reasoning = reasoning or bool(
                    delta.get("reasoning_content") or delta.get("reasoning")
                )
                text = delta.get("content")
            else:
                text = choice.get("text")
            if isinstance(text, str) and text:
                parts.append(text)
                prefix.deltas += 1
    prefix.text = "".join(parts)
    if reasoning and not prefix.text:
        return None  # the model was still thinking: nothing to continue from
    return prefix


def _read_message_event(obj: dict[str, Any], prefix: Prefix, parts: list[str]) -> bool:
    kind = obj.get("type")
    if kind == "message_start":
        message = obj.get("message") or {}
        prefix.id = message.get("id") if isinstance(message.get("id"), str) else None
        usage = message.get("usage") or {}
        counts = [usage.get(k) for k in ("input_tokens", "cache_read_input_tokens")]
        if type(counts[0]) is int:
            prefix.prompt_tokens = sum(c for c in counts if type(c) is int)
    elif kind == "content_block_start":
        index = obj.get("index", 0)
        block = obj.get("content_block") or {}
        if block.get("type") != "text" or type(index) is not int:
            return False  # a tool call or thinking: not text
        prefix.open_text = index
        prefix.next_block = max(prefix.next_block, index + 1)
    elif kind == "content_block_stop":
        if obj.get("index") == prefix.open_text:
            prefix.open_text = None
    elif kind == "content_block_delta":
        delta = obj.get("delta") or {}
        if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
            parts.append(delta["text"])
            prefix.deltas += 1
    return True


# ---- the continuation's events, as the client's stream goes on ---------------------------


class Splice:
    """Rewrites a continuation's client stream to go on from `prefix`: its start events
    dropped, the first answer's id and block indices, usage added up."""

    def __init__(self, endpoint: str, prefix: Prefix, inherited: int, prompt: int | None) -> None:
        self.endpoint = endpoint
        self.prefix = prefix
        self.inherited = inherited  # output tokens produced before the continuation
        self.prompt = prompt  # the original prompt's tokens, when known
        self.ndjson = endpoint == "ollama.chat"
        self.sep = b"\n" if self.ndjson else b"\n\n"
        self.carry = b""
        self.blocks: dict[int, int] = {}  # Messages: continuation index -> client index
        self.next_block = prefix.next_block

    def feed(self, chunk: bytes) -> bytes:
        block = self.carry + chunk
        cut = block.rfind(self.sep)
        if cut < 0:
            self.carry = block
            return b""
        end = cut + len(self.sep)
        self.carry = block[end:]
        return self._events(block[:end])

    def end(self) -> bytes:
        rest, self.carry = self.carry, b""
        return self._events(rest + self.sep) if rest.strip() else b""

    def _events(self, block: bytes) -> bytes:
        out = []
        for raw in block.split(self.sep):
            if not raw.strip():
                continue
            event = self._event(raw)
            if event is not None:
                out.append(event + self.sep)
        return b"".join(out)

    def _event(self, raw: bytes) -> bytes | None:
        if self.ndjson:
            data: bytes | None = raw.strip()
            name = None
        else:
            name = next(
                (line[6:].strip() for line in raw.split(b"\n") if line.startswith(b"event:")),
                None,
            )
            data = event_data(raw)
        if data is None or data == DONE:
            return raw  # a comment, or `[DONE]`
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return raw
        if not isinstance(obj, dict) or obj.get("error") or obj.get("type") == "error":
            return raw
        if self.ndjson:
            changed = self._ollama(obj)
        elif self.endpoint == "messages":
            changed = self._message(obj)
        else:
            changed = self._chunk(obj)
        if changed is None:
            return None
        payload = orjson.dumps(changed)
        if self.ndjson:
            return payload
        head = b"event: " + name + b"\n" if name else b""
        return head + b"data: " + payload

    def _usage(self, usage: dict[str, Any], prompt_key: str, output_key: str) -> None:
        output = usage.get(output_key)
        if type(output) is int:
            usage[output_key] = output + self.inherited
        prompt = usage.get(prompt_key)
        if type(prompt) is int:
            usage[prompt_key] = (
                self.prompt if self.prompt is not None else max(prompt - self.inherited, 0)
            )
        if type(usage.get("total_tokens")) is int:
            usage["total_tokens"] = sum(
                v for v in (usage.get(prompt_key), usage.get(output_key)) if type(v) is int
            )

    def _chunk(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        if self.prefix.id is not None and "id" in obj:
            obj["id"] = self.prefix.id
        if self.prefix.created is not None and "created" in obj:
            obj["created"] = self.prefix.created
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self._usage(usage, "prompt_tokens", "completion_tokens")
        choices = obj.get("choices")
        says = isinstance(usage, dict) or not isinstance(choices, list) or not choices
        for choice in choices or ():
            if not isinstance(choice, dict):
                return obj
            if choice.get("finish_reason") or choice.get("text") or choice.get("logprobs"):
                says = True
            delta = choice.get("delta")
            if isinstance(delta, dict):
                delta.pop("role", None)  # the role came with the answer's first chunk
                if any(delta.values()):
                    says = True
        return obj if says else None  # a chunk that said only the role: dropped

    def _message(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        kind = obj.get("type")
        if kind in ("message_start", "ping"):
            return None
        if kind == "content_block_start":
            index = obj.get("index", 0)
            block = obj.get("content_block") or {}
            if block.get("type") == "text" and self.prefix.open_text is not None:
                self.blocks[index] = self.prefix.open_text  # the open text block goes on
                self.prefix.open_text = None
                return None
            self.blocks[index] = self.next_block
            self.next_block += 1
            obj["index"] = self.blocks[index]
            return obj
        if kind in ("content_block_delta", "content_block_stop"):
            index = obj.get("index", 0)
            obj["index"] = self.blocks.get(index, index)
            return obj
        if kind == "message_delta":
            usage = obj.get("usage")
            if isinstance(usage, dict):
                self._usage(usage, "input_tokens", "output_tokens")
        return obj

    def _ollama(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        if obj.get("done"):
            self._usage(obj, "prompt_eval_count", "eval_count")
        return obj


# ---- the continuation ------------------------------------------------------------------


@dataclass(slots=True)
class Continuation:
    """One streamed request's continuations: whether one is wanted, and the stream that
    relays the first answer and the continuations as one."""

    plan: RoutePlan
    profile: RequestProfile  # the client's request
    fleet: Fleet
    position: int  # the plan position of the candidate whose answer is relayed now
    settings: ResumeConfig
    framing: Framing  # of the client's stream
    judge: Judge
    window_of: Callable[[Deployment], int | None]
    attempt_at: AttemptAt
    outcome: StreamOutcome | None = None
    relayed: list[bytes] = field(default_factory=list)  # the client's bytes, as sent
    count: int = 0  # continuations taken
    prefix: Prefix | None = None
    produced: int = 0  # output tokens the client has (known or counted)
    pending: list[tuple[int, Candidate]] = field(default_factory=list)
    prompt: int | None = None  # the first answer's prompt tokens, when reported
    # the first answer's relay is the client's stream (a native wire): it keeps the bytes
    # in `relayed` and goes on itself (`execute/relay.py`)
    inline: bool = False

    # -- asked by `relay`, as the relayed answer ends early --------------------------------

    def later(self, window: int | None) -> list[tuple[int, Candidate]]:
        """The plan's later candidates that may take the answer over (window: strictly
        larger than it)."""
        first = self.plan.candidates[self.position].deployment
        out = []
        for i, candidate in enumerate(self.plan.candidates[self.position + 1 :]):
            if not can_take_over(first, candidate, self.settings):
                continue
            if window is not None:
                own = self.window_of(candidate.deployment)
                if own is None or own <= window:
                    continue
            out.append((self.position + 1 + i, candidate))
        return out

    def _ready(self, attempt: Attempt, window: int | None) -> bool:
        """Whether the client's answer so far can be continued, and where."""
        if self.count >= self.settings.max_continuations:
            return False
        self.pending = self.later(window)
        if not self.pending:
            return False
        prefix = read_relayed(self.profile.endpoint, b"".join(self.relayed))
        if prefix is None:
            return False
        if attempt.continuation is None:
            self.prompt = attempt.prompt_tokens
        # a whole answer's count is its usage's; a broken one reported none yet (or only
        # Messages' opening zero): each text delta is a token
        known = attempt.completion_tokens if window is not None else None
        if known is not None:
            known += attempt.inherited_tokens or 0
        self.produced = known if known is not None else prefix.deltas
        self.prefix = prefix
        return True

    def wanted(self, reason: str, attempt: Attempt) -> bool:
        """After a reset, a stall or an error event: whether a continuation takes over."""
        return self.settings.after_interruption and self._ready(attempt, None)

    def after_end(self, profile: RequestProfile, dep: Deployment, attempt: Attempt) -> bool:
        """At a stream's normal end: whether a window cut it and a continuation takes over.
        A continuation's own end is judged here (on its own request); a first answer only
        when a larger candidate could continue it (else the gateway judges it as before)."""
        window = self.window_of(dep)
        continued = attempt.continuation is not None
        if not continued and not (
            self.settings.after_window
            and attempt.finish in (LENGTH, None)
            and self.count < self.settings.max_continuations
            and self.later(window or 0)
        ):
            return False
        cut = self.judge(profile, dep, attempt, window)
        if self.outcome is not None:
            self.outcome.cut, self.outcome.judged = cut, True
        if cut is None or cut.note != CUT_SHORT_NOTE or cut.window is None:
            return False
        if not self.settings.after_window or not self._ready(attempt, cut.window):
            return False
        if self.outcome is not None:
            self.outcome.cut = None  # the client gets the answer whole after all
        return True

    # -- the client's stream ---------------------------------------------------------------

    def stream(self, outcome: StreamOutcome, current: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """The client's stream: the first answer (`current`), then each continuation
        spliced in. A first answer relayed `inline` is the client's stream itself: its
        relay keeps its bytes and goes on (`go_on`) once cut."""
        self.outcome = outcome
        return current if self.inline else self._first(current)

    async def _first(self, current: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        relayed = self.relayed
        try:
            async for chunk in current:
                relayed.append(chunk)
                yield chunk
            return
        except StreamCut as cut:
            reason = cut.reason
        finally:
            await _close(current)
        rest = self.go_on(reason)
        try:
            async for chunk in rest:
                yield chunk
        finally:
            await rest.aclose()

    async def go_on(self, reason: str) -> AsyncGenerator[bytes, None]:
        """The client's stream after a cut (`reason`): each continuation spliced in, until
        one ends the answer, or an error event when none can."""
        outcome = self.outcome
        assert outcome is not None
        relayed = self.relayed
        current: AsyncIterator[bytes] | None = None
        ends: list[Callable[[], None]] = []
        try:
            while True:
                got = await self._take_over(reason)
                if got is None:
                    yield stream_error_event(
                        self.profile.endpoint,
                        self.framing,
                        "stream_interrupted",
                        "The upstream stream broke after output had started, and no "
                        "deployment could continue it; retry the request.",
                    )
                    return
                took, splice = got
                ends.append(took.end_stream)
                assert took.stream is not None
                current = took.stream
                outcome.candidate = took.candidate
                if self.framing is not NDJSON:  # a comment: every SSE reader skips it
                    dep = took.candidate.deployment.id
                    yield b": fleetgate continued on " + dep.encode() + b"\n\n"
                try:
                    async for chunk in current:
                        if out := splice.feed(chunk):
                            relayed.append(out)
                            yield out
                    if out := splice.end():
                        yield out
                    return
                except StreamCut as cut:
                    reason = cut.reason
                await _close(current)
        finally:
            if current is not None:
                await _close(current)
            for end in ends:
                end()

    async def _take_over(self, reason: str) -> tuple[StreamOutcome, Splice] | None:
        prefix = self.prefix
        assert prefix is not None
        body = continuation_body(
            self.profile.endpoint, self.profile.body, prefix.text, self.produced
        )
        if body is None:
            return None
        self.count += 1
        profile = copy.copy(self.profile)
        profile.body = body
        prompt = prefix.prompt_tokens if prefix.prompt_tokens is not None else self.prompt
        for position, candidate in self.pending:
            if candidate.deployment.provider.kind == "anthropic" and prefix.text[-1:].isspace():
                continue  # Anthropic refuses a final assistant turn that ends in whitespace
            try:
                took = await self.attempt_at(candidate, profile, self, reason, self.produced)
            except GatewayError:
                took = None
            if took is not None:
                self.position = position
                return took, Splice(self.profile.endpoint, prefix, self.produced, prompt)
        return None


async def _close(stream: AsyncIterator[bytes]) -> None:
    closer = getattr(stream, "aclose", None)
    if closer is not None:
        await closer()
