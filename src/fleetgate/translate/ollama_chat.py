"""Ollama's native API → OpenAI-compatible: `/api/chat`, `/api/generate`, `/api/embed` and
the older `/api/embeddings`.

Requests: `options` become sampling fields (`num_predict` → `max_tokens`), `format` a
`response_format`, `images` image parts, `tools`/`tool_calls` their chat forms;
`/api/generate` goes to chat with `system` and `prompt` as turns, or (with `raw` or a
`suffix`) to completions. Answers and NDJSON streams are Ollama's, the final `done` line
carrying `prompt_eval_count` / `eval_count` from the usage chunk and durations measured
here (or the engine's own `timings`, when it reports them).
"""

from __future__ import annotations

import re
import time
from typing import Any

import orjson

from fleetgate.translate.chat import first_choice, json_args, reasoning_of
from fleetgate.translate.events import Event
from fleetgate.translate.text_chunks import plain_text_delta

# options -> chat fields of the same meaning
_OPTIONS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "seed": "seed",
    "stop": "stop",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "repeat_penalty": "repetition_penalty",
}
_DONE_REASON = {"stop": "stop", "length": "length", "tool_calls": "stop"}


class _Clock:
    """Ollama's `created_at`, to the millisecond, formatted once per ms (streams are hot)."""

    __slots__ = ("ms", "text")

    def __init__(self) -> None:
        self.ms = -1
        self.text = ""

    def stamp(self) -> str:
        ms = time.time_ns() // 1_000_000
        if ms != self.ms:
            seconds, frac = divmod(ms, 1000)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
            self.ms, self.text = ms, f"{stamp}.{frac:03d}000000Z"
        return self.text


_stamp = _Clock().stamp


def _media_type(data: str) -> str:
    for prefix, media in (("iVBOR", "image/png"), ("R0lG", "image/gif"), ("UklG", "image/webp")):
        if data.startswith(prefix):
            return media
    return "image/jpeg"


def _image(data: Any) -> dict[str, Any]:
    url = str(data)
    if not url.startswith(("data:", "http://", "https://")):
        url = f"data:{_media_type(url)};base64,{url}"
    return {"type": "image_url", "image_url": {"url": url}}


def think_effort(think: Any) -> str | None:
    """Ollama's `think` as chat's `reasoning_effort`: a level as it is, `true` the default
    level (`medium`, as OpenAI's), so that a deployment that thinks only when asked
    (Anthropic) thinks; `false` and none ask for nothing."""
    if think is True:
        return "medium"
    if isinstance(think, str) and think in ("low", "medium", "high"):
        return think
    return None


def _sampling(body: dict[str, Any], out: dict[str, Any]) -> None:
    options = body.get("options")
    if isinstance(options, dict):
        for name, field in _OPTIONS.items():
            if options.get(name) is not None:
                out[field] = options[name]
        predict = options.get("num_predict")
        if type(predict) is int and predict > 0:
            out["max_tokens"] = predict
    fmt = body.get("format")
    if fmt == "json":
        out["response_format"] = {"type": "json_object"}
    elif isinstance(fmt, dict):
        out["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "response", "schema": fmt},
        }
    effort = think_effort(body.get("think"))
    if effort is not None:
        out["reasoning_effort"] = effort
    if body.get("stream", True) is not False:
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}


def _chat_message(message: dict[str, Any], ids: list[str], n: int) -> dict[str, Any]:
    role = message.get("role")
    content = message.get("content")
    text = content if isinstance(content, str) else ""
    out: dict[str, Any] = {"role": role, "content": text}
    images = message.get("images")
    if images:
        out["content"] = [{"type": "text", "text": text}, *(_image(i) for i in images)]
    calls = message.get("tool_calls")
    if role == "assistant" and calls:
        chat_calls = []
        for i, call in enumerate(calls):
            function = call.get("function") or {} if isinstance(call, dict) else {}
            call_id = f"call_{n}_{i}"
            ids.append(call_id)
            arguments = function.get("arguments")
            chat_calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": function.get("name", ""),
                        "arguments": arguments
                        if isinstance(arguments, str)
                        else orjson.dumps(arguments or {}).decode(),
                    },
                }
            )
        out["tool_calls"] = chat_calls
        out["content"] = text or None
    if role == "tool":
        # Ollama's tool results name no call: they answer the calls in order
        out["tool_call_id"] = ids.pop(0) if ids else str(message.get("tool_name", ""))
    thinking = message.get("thinking")
    if role == "assistant" and isinstance(thinking, str) and thinking:
        out["reasoning_content"] = thinking
    return out


def ollama_chat_to_chat(body: dict[str, Any]) -> dict[str, Any]:
    ids: list[str] = []
    messages = [
        _chat_message(m, ids, n)
        for n, m in enumerate(body.get("messages") or ())
        if isinstance(m, dict)
    ]
    out: dict[str, Any] = {"messages": messages}
    if body.get("tools"):
        out["tools"] = body["tools"]
    _sampling(body, out)
    return out


def generate_to_chat(body: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    if isinstance(body.get("system"), str) and body["system"]:
        messages.append({"role": "system", "content": body["system"]})
    user: dict[str, Any] = {"role": "user", "content": str(body.get("prompt") or "")}
    if body.get("images"):
        user["content"] = [
            {"type": "text", "text": user["content"]},
            *(_image(i) for i in body["images"]),
        ]
    messages.append(user)
    out: dict[str, Any] = {"messages": messages}
    _sampling(body, out)
    return out


def generate_to_completions(body: dict[str, Any]) -> dict[str, Any]:
    """`raw` (no template) or fill-in-the-middle (`suffix`) prompts: plain completions."""
    prompt = str(body.get("prompt") or "")
    system = body.get("system")
    if not body.get("raw") and isinstance(system, str) and system:
        prompt = system + "\n\n" + prompt
    out: dict[str, Any] = {"prompt": prompt}
    if isinstance(body.get("suffix"), str) and body["suffix"]:
        out["suffix"] = body["suffix"]
    _sampling(body, out)
    out.pop("response_format", None)  # completions take no response format
    out.pop("reasoning_effort", None)  # nor a reasoning effort: the prompt is as it is
    return out


def embed_to_embeddings(body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"input": body.get("input")}
    if type(body.get("dimensions")) is int:
        out["dimensions"] = body["dimensions"]
    return out


def prompt_to_embeddings(body: dict[str, Any]) -> dict[str, Any]:
    """The older `/api/embeddings`: one `prompt`, one vector."""
    return {"input": str(body.get("prompt") or "")}


# ---- answers --------------------------------------------------------------------------------


def _counts(usage: Any, timings: Any, started: int, first: int = 0) -> dict[str, Any]:
    """The counts and durations of a final answer, in ns from `started`, when the gateway
    began the attempt (`time.perf_counter_ns()`), to now.

    A stream's prompt took until its first event (`first`, a `perf_counter_ns` stamp), its
    evaluation the rest. A whole answer shows the gateway only its total, which is split by
    the token counts (both rates are then the request's tokens per second). llama.cpp
    reports its own `prompt_ms` / `predicted_ms`, which are taken instead. Every duration
    is at least 1 ns (clients divide counts by them), and the total holds its parts.
    """
    usage = usage if isinstance(usage, dict) else {}
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    total = time.perf_counter_ns() - started
    # a stream's first event ends its prompt; a whole answer's total is split by count
    prompt_ns = first - started if first else total * prompt // max(prompt + completion, 1)
    eval_ns = total - prompt_ns
    if isinstance(timings, dict):  # llama.cpp reports its own milliseconds
        if isinstance(timings.get("prompt_ms"), (int, float)):
            prompt_ns = int(timings["prompt_ms"] * 1e6)
        if isinstance(timings.get("predicted_ms"), (int, float)):
            eval_ns = int(timings["predicted_ms"] * 1e6)
    prompt_ns, eval_ns = max(prompt_ns, 1), max(eval_ns, 1)
    return {
        "total_duration": max(total, prompt_ns + eval_ns),
        "load_duration": 0,
        "prompt_eval_count": prompt,
        "prompt_eval_duration": prompt_ns,
        "eval_count": completion,
        "eval_duration": eval_ns,
    }


def _ollama_calls(calls: Any) -> list[dict[str, Any]]:
    out = []
    for i, call in enumerate(calls or ()):
        function = call.get("function") or {} if isinstance(call, dict) else {}
        out.append(
            {
                "function": {
                    "index": i,
                    "name": function.get("name", ""),
                    "arguments": json_args(function.get("arguments")),
                }
            }
        )
    return out


def _done(model: str, key: str, value: Any, reason: str, counts: dict[str, Any]) -> dict[str, Any]:
    """Ollama's last object of an answer: `value` under `key` (`message` or `response`)."""
    return {
        "model": model,
        "created_at": _stamp(),
        key: value,
        "done": True,
        "done_reason": reason,
        **counts,
    }


def _final(model: str, key: str, value: Any, finish: Any, counts: dict[str, Any]) -> dict[str, Any]:
    return _done(model, key, value, _DONE_REASON.get(str(finish), "stop"), counts)


def chat_to_ollama_chat_answer(
    answer: dict[str, Any], model: str, started: int, *, thinking: bool = True
) -> dict[str, Any]:
    """`thinking` False (the request said `think: false`): the reasoning a model gives all
    the same is not shown, as Ollama shows none then."""
    choice = first_choice(answer)
    message = choice.get("message") or {}
    out: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    reasoning = reasoning_of(message) if thinking else None
    if reasoning:
        out["thinking"] = reasoning
    if message.get("tool_calls"):
        out["tool_calls"] = _ollama_calls(message["tool_calls"])
    counts = _counts(answer.get("usage"), answer.get("timings"), started)
    return _final(model, "message", out, choice.get("finish_reason"), counts)


def chat_to_generate_answer(
    answer: dict[str, Any], model: str, started: int, *, thinking: bool = True
) -> dict[str, Any]:
    """`thinking` as in `chat_to_ollama_chat_answer`."""
    choice = first_choice(answer)
    message = choice.get("message") or {}
    counts = _counts(answer.get("usage"), answer.get("timings"), started)
    out = _final(
        model, "response", message.get("content") or "", choice.get("finish_reason"), counts
    )
    reasoning = reasoning_of(message) if thinking else None
    if reasoning:
        out["thinking"] = reasoning
    return out


def completions_to_generate_answer(
    answer: dict[str, Any], model: str, started: int
) -> dict[str, Any]:
    choice = first_choice(answer)
    counts = _counts(answer.get("usage"), answer.get("timings"), started)
    return _final(model, "response", choice.get("text") or "", choice.get("finish_reason"), counts)


def embeddings_to_embed_answer(answer: dict[str, Any], model: str, started: int) -> dict[str, Any]:
    data = sorted(
        (d for d in answer.get("data") or () if isinstance(d, dict)),
        key=lambda d: d.get("index", 0),
    )
    usage = answer.get("usage") if isinstance(answer.get("usage"), dict) else {}
    return {
        "model": model,
        "embeddings": [d.get("embedding") for d in data],
        "total_duration": max(time.perf_counter_ns() - started, 1),
        "load_duration": 0,
        "prompt_eval_count": int(usage.get("prompt_tokens") or 0),
    }


def embeddings_to_embedding_answer(answer: dict[str, Any], model: str) -> dict[str, Any]:
    """`/api/embeddings` answers the one vector alone (no model, no counts)."""
    data = [d for d in answer.get("data") or () if isinstance(d, dict)]
    return {"embedding": data[0].get("embedding") if data else []}


# ---- load and unload requests ---------------------------------------------------------------

# a Go duration of zero, as `keep_alive` may say it ("0", "0s", "0m", "0.0h")
_ZERO_DURATION = re.compile(r"0+(\.0*)?(ns|us|µs|ms|s|m|h)?")


def _unloads(keep_alive: Any) -> bool:
    """Whether `keep_alive` is zero: Ollama unloads the model at once."""
    if isinstance(keep_alive, bool):
        return False
    if isinstance(keep_alive, (int, float)):
        return keep_alive == 0
    return isinstance(keep_alive, str) and _ZERO_DURATION.fullmatch(keep_alive.strip()) is not None


def _load_reason(body: dict[str, Any]) -> str:
    return "unload" if _unloads(body.get("keep_alive")) else "load"


def chat_load_answer(body: dict[str, Any], model: str) -> dict[str, Any] | None:
    """Ollama's answer to a chat without messages, which only loads (or, with `keep_alive`
    0, unloads) the model: one object, `done_reason` `load` / `unload`. None for a chat to
    send on. An engine that is not Ollama keeps its model loaded (`/api/ps`), so the
    gateway answers it itself instead of having the engine generate from an empty prompt."""
    if body.get("messages"):
        return None
    message = {"role": "assistant", "content": ""}
    return _done(model, "message", message, _load_reason(body), {})


def generate_load_answer(body: dict[str, Any], model: str) -> dict[str, Any] | None:
    """`chat_load_answer` for `/api/generate`: Ollama loads the model for an empty prompt."""
    if body.get("prompt"):
        return None
    return _done(model, "response", "", _load_reason(body), {})


def embedding_load_answer(body: dict[str, Any], model: str) -> dict[str, Any] | None:
    """Ollama answers an `/api/embeddings` without a prompt, which only loads the model,
    with an empty vector (an embeddings API would refuse the empty input)."""
    return None if body.get("prompt") else {"embedding": []}


# ---- streams --------------------------------------------------------------------------------


class _ToNdjson:
    """Chat (or completions) chunks in, Ollama NDJSON lines out; the last one `done`.
    `thinking` False (`think: false`): reasoning chunks are not shown."""

    __slots__ = (
        "_calls",
        "_done",
        "_finish",
        "_first",
        "_line_head",
        "_line_stamp",
        "_started",
        "_thinking",
        "_timings",
        "_usage",
        "model",
    )
    key = "message"
    # a text line's bytes, as `encode_ndjson` writes them, around the text
    _text_open = b'"message":{"role":"assistant","content":'
    _text_close = b'},"done":false}\n'

    def __init__(self, model: str, started: int, *, thinking: bool = True) -> None:
        self.model = model
        self._thinking = thinking
        self._line_head = b""  # a text line's bytes up to its text, for `_line_stamp`
        self._line_stamp = ""
        self._started = started  # the attempt's start (`perf_counter_ns`)
        self._first = 0  # when the first event came (`perf_counter_ns`), 0 before
        self._finish: Any = None
        self._usage: Any = None
        self._timings: Any = None
        self._calls: dict[int, dict[str, Any]] = {}  # tool calls, streamed whole at the end
        self._done = False

    def _line(self, value: Any) -> Event:
        return (None, {"model": self.model, "created_at": _stamp(), self.key: value, "done": False})

    def _value(self, text: str, reasoning: str | None) -> Any:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if reasoning:
            message["thinking"] = reasoning
        return message

    def _text_line(self, text: str, reasoning: str | None) -> Event:
        return self._line(self._value(text, reasoning))

    def text_delta(self, text: str, quoted: bytes) -> bytes | None:
        """One more line of text, framed from prebuilt bytes (`TextStage`)."""
        if not self._first or self._done:
            return None
        stamp = _stamp()
        if stamp is not self._line_stamp:  # a new millisecond
            self._line_stamp = stamp
            self._line_head = b"".join(
                (
                    b'{"model":',
                    orjson.dumps(self.model),
                    b',"created_at":',
                    orjson.dumps(stamp),
                    b",",
                    self._text_open,
                )
            )
        return self._line_head + quoted + self._text_close

    def feed(self, event: Event) -> list[Event]:
        if self._done:
            return []  # the `done` line, or an error, was the last
        chunk = event[1]
        if self._first:
            text = plain_text_delta(chunk)
            if text is not None:  # the usual chunk: one more line of text
                return [self._text_line(text, None)]
        err = chunk.get("error")
        if err:
            # Ollama ends a failed stream with its `{"error": ...}` line: no `done` line
            # after it says the answer ended as it should
            self._done = True
            message = err.get("message", "") if isinstance(err, dict) else str(err)
            return [(None, {"error": message})]
        out: list[Event] = []
        if not self._first:
            self._first = time.perf_counter_ns()
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta")
            if delta is None:  # completions
                text = choice.get("text")
                if isinstance(text, str) and text:
                    out.append(self._text_line(text, None))
            else:
                text = delta.get("content")
                reasoning = (
                    reasoning_of(delta)
                    if self._thinking and (len(delta) > 1 or "content" not in delta)
                    else None
                )
                if (isinstance(text, str) and text) or reasoning:
                    out.append(self._text_line(text or "", reasoning))
                for call in delta.get("tool_calls") or ():
                    index = call.get("index", 0)
                    function = call.get("function") or {}
                    held = self._calls.setdefault(index, {"name": "", "arguments": ""})
                    if function.get("name"):
                        held["name"] = function["name"]
                    if isinstance(function.get("arguments"), str):
                        held["arguments"] += function["arguments"]
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        if chunk.get("timings") is not None:
            self._timings = chunk["timings"]
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
            if self._finish is not None:
                out.extend(self.finish())
        return out

    def finish(self) -> list[Event]:
        if self._done or not self._first:
            return []
        self._done = True
        out: list[Event] = []
        if self._calls:
            calls = [
                {
                    "function": {
                        "index": i,
                        "name": c["name"],
                        "arguments": json_args(c["arguments"]),
                    }
                }
                for i, c in sorted(self._calls.items())
            ]
            message = {"role": "assistant", "content": "", "tool_calls": calls}
            out.append(self._line(message))
        counts = _counts(self._usage, self._timings, self._started, self._first)
        out.append(
            (None, _final(self.model, self.key, self._value("", None), self._finish, counts))
        )
        return out


class ChatToOllamaChatStream(_ToNdjson):
    __slots__ = ()


class ChatToGenerateStream(_ToNdjson):
    __slots__ = ()
    key = "response"
    _text_open = b'"response":'
    _text_close = b',"done":false}\n'

    def _value(self, text: str, reasoning: str | None) -> Any:
        return text

    def _text_line(self, text: str, reasoning: str | None) -> Event:
        """Generate's reasoning is a `thinking` field beside `response`, as in its answer."""
        line = self._line(text)
        if reasoning:
            line[1]["thinking"] = reasoning
        return line


class CompletionsToGenerateStream(ChatToGenerateStream):
    __slots__ = ()


def no_stream(model: str, started: int) -> _ToNdjson:
    """Embeddings never stream; present for the table's shape."""
    return _ToNdjson(model, started)
