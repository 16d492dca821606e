"""OpenAI Responses → Chat Completions, for deployments without `/v1/responses`.

The request's `instructions` and `input` items (messages, function calls and their
outputs) become chat messages; the answer becomes a `response` object, and a chat stream
becomes the named Responses events (`response.created` … `response.completed`). State
(`store: true`, `previous_response_id`) cannot be kept here: the registry refuses such
requests unless the deployment serves Responses natively.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from fleetgate.translate.chat import first_choice, new_id, reasoning_of, swap_prefix
from fleetgate.translate.events import Event
from fleetgate.translate.responses_fields import settings, text_logprobs
from fleetgate.translate.text_chunks import plain_text_delta
from fleetgate.translate.thinking import anthropic_blocks, sealed, unsealed

_ROLES = frozenset({"user", "assistant", "system", "developer"})
# the `include` entry that asks for the output text's logprobs
LOGPROBS_INCLUDE = "message.output_text.logprobs"


# ---- request --------------------------------------------------------------------------------


def _part(part: Any) -> dict[str, Any] | None:
    if isinstance(part, str):
        return {"type": "text", "text": part}
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        return {"type": "text", "text": str(part.get("text", ""))}
    if kind == "input_image":
        url = part.get("image_url")
        if isinstance(url, dict):
            url = url.get("url")
        if not isinstance(url, str):
            return None
        image: dict[str, Any] = {"url": url}
        if part.get("detail") in ("low", "high"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "refusal":
        return {"type": "text", "text": str(part.get("refusal", ""))}
    return None


def _content(content: Any) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts = [p for p in (_part(x) for x in content or ()) if p is not None]
    if all(p["type"] == "text" for p in parts):
        return "".join(str(p["text"]) for p in parts)
    return parts


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    parts = [p for p in (_part(x) for x in output or ()) if p is not None]
    return "".join(str(p.get("text", "")) for p in parts if p["type"] == "text")


def _reasoning_text(item: dict[str, Any]) -> str:
    """A `reasoning` input item's text: its `reasoning_text` content (an open model's own
    reasoning), else its summary."""
    for key, kind in (("content", "reasoning_text"), ("summary", "summary_text")):
        parts = item.get(key)
        texts = [
            str(p.get("text", ""))
            for p in (parts if isinstance(parts, list) else ())
            if isinstance(p, dict) and p.get("type") == kind
        ]
        if any(texts):
            return "".join(texts)
    return ""


class _Reasoning:
    """Reasoning items not yet given to an assistant message: their texts, and the signed
    thinking their `encrypted_content` carries (translate/thinking.py)."""

    __slots__ = ("blocks", "texts")

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.blocks: list[dict[str, Any]] = []

    def add(self, item: dict[str, Any]) -> None:
        text = _reasoning_text(item)
        if text:
            self.texts.append(text)
        self.blocks += unsealed(item.get("encrypted_content"))

    def give(self, message: dict[str, Any]) -> None:
        """`message` (an assistant's) takes the reasoning as its own."""
        if self.texts:
            message["reasoning_content"] = message.get("reasoning_content", "") + "".join(
                self.texts
            )
            self.texts = []
        if self.blocks:
            message["thinking_blocks"] = [*message.get("thinking_blocks", ()), *self.blocks]
            self.blocks = []


def _assistant(messages: list[dict[str, Any]], reasoning: _Reasoning) -> dict[str, Any]:
    """The assistant message a function call joins: the last one, or a new one; the reasoning
    items before it become its own."""
    last = messages[-1] if messages else None
    if last is None or last["role"] != "assistant":
        last = {"role": "assistant", "content": None}
        messages.append(last)
    reasoning.give(last)
    return last


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    reasoning = _Reasoning()
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    items = body.get("input")
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
        return messages
    for item in items or ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") in _ROLES:
            role = "system" if item["role"] == "developer" else item["role"]
            content = _content(item.get("content"))
            if role == "assistant" and isinstance(content, list):
                content = "".join(str(p.get("text", "")) for p in content)
            message = {"role": role, "content": content}
            if role == "assistant":
                reasoning.give(message)
            messages.append(message)
        elif kind == "function_call":
            call = {
                "id": str(item.get("call_id") or item.get("id") or ""),
                "type": "function",
                "function": {
                    "name": str(item.get("name", "")),
                    "arguments": str(item.get("arguments") or "{}"),
                },
            }
            last = _assistant(messages, reasoning)
            last.setdefault("tool_calls", []).append(call)
            if last.get("content") == "":
                last["content"] = None
        elif kind == "reasoning":  # the reasoning of the assistant turn that follows it
            reasoning.add(item)
        elif kind == "function_call_output":
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": str(item.get("call_id", "")),
                    "content": _output_text(item.get("output")),
                }
            )
        # the hosted tools' calls have no chat equivalent: dropped
    return messages


def _tools(tools: Any) -> list[dict[str, Any]]:
    out = []
    for tool in tools or ():
        if not isinstance(tool, dict) or tool.get("type") != "function":
            continue  # hosted tools (web search, file search, …) have no chat equivalent
        function: dict[str, Any] = {
            "name": tool.get("name", ""),
            "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
        }
        for key in ("description", "strict"):
            if tool.get(key) is not None:
                function[key] = tool[key]
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice if choice in ("auto", "none", "required") else None


def _response_format(text: Any) -> dict[str, Any] | None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "json_schema":
        schema: dict[str, Any] = {"name": fmt.get("name", "response"), "schema": fmt.get("schema")}
        if fmt.get("strict") is not None:
            schema["strict"] = fmt["strict"]
        if fmt.get("description") is not None:
            schema["description"] = fmt["description"]
        return {"type": "json_schema", "json_schema": schema}
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    return None


def wants_logprobs(body: dict[str, Any]) -> bool:
    """Whether a Responses request asks for its output text's logprobs: only `include`
    does (`top_logprobs` alone says how many alternatives, and returns none)."""
    include = body.get("include")
    return isinstance(include, list) and LOGPROBS_INCLUDE in include


def responses_to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses request as a Chat Completions request (without `model`)."""
    out: dict[str, Any] = {"messages": _messages(body)}
    if body.get("max_output_tokens") is not None:
        out["max_tokens"] = body["max_output_tokens"]
    for name in ("temperature", "top_p", "parallel_tool_calls", "user"):
        if body.get(name) is not None:
            out[name] = body[name]
    if wants_logprobs(body):
        # chat takes `top_logprobs` only beside `logprobs: true` (engines refuse it alone)
        out["logprobs"] = True
        if body.get("top_logprobs") is not None:
            out["top_logprobs"] = body["top_logprobs"]
    if body.get("stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    tools = _tools(body.get("tools"))
    if tools:
        out["tools"] = tools
        choice = _tool_choice(body.get("tool_choice"))
        if choice is not None and choice != "auto":
            out["tool_choice"] = choice
    fmt = _response_format(body.get("text"))
    if fmt is not None:
        out["response_format"] = fmt
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and isinstance(reasoning.get("effort"), str):
        out["reasoning_effort"] = reasoning["effort"]
    return out


# ---- answer ---------------------------------------------------------------------------------

# chat `finish_reason`s that leave a response incomplete -> `incomplete_details.reason`
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def _reason(finish: Any) -> str | None:
    """Why a response with this `finish_reason` is incomplete (None: it is complete)."""
    return _INCOMPLETE.get(finish) if isinstance(finish, str) else None


def _status(finish: Any) -> str:
    return "completed" if _reason(finish) is None else "incomplete"


def _usage(usage: Any) -> dict[str, Any]:
    usage = usage if isinstance(usage, dict) else {}
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    prompt_details = usage.get("prompt_tokens_details")
    completion_details = usage.get("completion_tokens_details")
    cached = prompt_details.get("cached_tokens") if isinstance(prompt_details, dict) else 0
    reasoning = (
        completion_details.get("reasoning_tokens") if isinstance(completion_details, dict) else 0
    )
    return {
        "input_tokens": prompt,
        "output_tokens": completion,
        "total_tokens": prompt + completion,
        "input_tokens_details": {"cached_tokens": int(cached or 0)},
        "output_tokens_details": {"reasoning_tokens": int(reasoning or 0)},
    }


def _response(
    rid: str,
    created: int,
    model: str,
    status: str,
    output: list[Any],
    usage: Any,
    settings: dict[str, Any],
    finish: Any = None,
) -> dict[str, Any]:
    """A `response` object; `finish` is chat's `finish_reason`, which says why an
    incomplete one stopped."""
    reason = _reason(finish) if status == "incomplete" else None
    return {
        "id": rid,
        "object": "response",
        "created_at": created,
        "status": status,
        "model": model,
        "output": output,
        "usage": usage,
        "error": None,
        "incomplete_details": {"reason": reason} if reason is not None else None,
        **settings,
    }


def _message_item(
    mid: str, text: str, status: str, logprobs: list[dict[str, Any]]
) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}
    return {"id": mid, "type": "message", "status": status, "role": "assistant", "content": [part]}


def _call_item(fid: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {
        "id": fid,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def _reasoning_item(rid: str, text: str, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """A reasoning output item; Anthropic's signed thinking `blocks` ride in its
    `encrypted_content`, for the client to send back (translate/thinking.py)."""
    item: dict[str, Any] = {"id": rid, "type": "reasoning", "summary": []}
    item["content"] = [{"type": "reasoning_text", "text": text}] if text else []
    if blocks:
        item["encrypted_content"] = sealed(blocks)
    return item


def _rid(upstream: Any) -> str:
    return swap_prefix(upstream, "chatcmpl-", "resp_")


def chat_to_responses_answer(
    answer: dict[str, Any], model: str, request: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A chat completion as a `response` object; `request` is the client's Responses
    request, whose settings the object repeats (None: one that set none)."""
    choice = first_choice(answer)
    message = choice.get("message") or {}
    output: list[dict[str, Any]] = []
    reasoning = reasoning_of(message)
    blocks = anthropic_blocks(message)
    if reasoning or blocks:
        output.append(_reasoning_item(new_id("rs_"), reasoning or "", blocks))
    text = message.get("content")
    finish = choice.get("finish_reason")
    status = _status(finish)
    if isinstance(text, str) and text:
        logprobs = text_logprobs(choice.get("logprobs"), with_bytes=True)
        output.append(_message_item(new_id("msg_"), text, status, logprobs))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        output.append(
            _call_item(
                new_id("fc_"),
                str(call.get("id") or new_id("call_")),
                str(function.get("name", "")),
                str(function.get("arguments") or "{}"),
                "completed",
            )
        )
    created = answer.get("created")
    return _response(
        _rid(answer.get("id")),
        created if type(created) is int else int(time.time()),
        model,
        status,
        output,
        _usage(answer.get("usage")),
        settings(request or {}, answer.get("service_tier")),
        finish,
    )


# a `response.output_text.delta` event, as `encode_sse` writes it: its sequence number, item
# id and output index, then its text (formatted in two steps: per message, per event)
_TEXT_DELTA = (
    b"event: response.output_text.delta\ndata: "
    b'{"type":"response.output_text.delta","sequence_number":%%d,"item_id":%b,'
    b'"output_index":%d,"content_index":0,"delta":%%b,"logprobs":[]}\n\n'
)


class ChatToResponsesStream:
    """Chat completion chunks in, Responses stream events out (each numbered)."""

    __slots__ = (
        "_args",
        "_calls",
        "_created",
        "_done",
        "_finish",
        "_items",
        "_logprobs",
        "_open",
        "_request",
        "_rid",
        "_sealed",
        "_seq",
        "_settings",
        "_started",
        "_text",
        "_text_format",
        "_usage",
        "model",
    )

    def __init__(self, model: str, request: dict[str, Any] | None = None) -> None:
        """`request`: the client's Responses request, whose settings each `response`
        object of the stream repeats (None: one that set none)."""
        self.model = model
        self._request = request or {}
        self._settings = settings(self._request)
        self._rid = new_id("resp_")
        self._created = int(time.time())
        self._seq = 0
        self._started = False
        self._done = False
        self._items: list[dict[str, Any]] = []  # finished output items
        # the open item: (kind, item id, output index, extra) or None
        self._open: tuple[str, str, int, dict[str, Any]] | None = None
        self._text: list[str] = []
        self._logprobs: list[Any] = []  # the open message's tokens, as chat's logprobs
        self._sealed: list[dict[str, Any]] = []  # the open reasoning's signed thinking
        self._text_format = b""  # the open message's `_TEXT_DELTA`
        self._args: list[str] = []
        self._calls: dict[int, tuple[str, str]] = {}  # chat index -> (call id, name)
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None

    def _event(self, kind: str, **fields: Any) -> Event:
        payload = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return (kind, payload)

    def _lifecycle(self, kind: str, status: str, output: list[Any], usage: Any) -> Event:
        response = _response(
            self._rid,
            self._created,
            self.model,
            status,
            output,
            usage,
            self._settings,
            self._finish,
        )
        return self._event(kind, response=response)

    def _index(self) -> int:
        return len(self._items)

    def _close(self, out: list[Event]) -> None:
        if self._open is None:
            return
        kind, item_id, index, extra = self._open
        self._open = None
        if kind == "message":
            text = "".join(self._text)
            where = {"item_id": item_id, "output_index": index, "content_index": 0}
            tokens = {"content": self._logprobs}
            logprobs = text_logprobs(tokens, with_bytes=True)
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}
            item = _message_item(item_id, text, _status(self._finish), logprobs)
            done = text_logprobs(tokens, with_bytes=False)
            out.append(self._event("response.output_text.done", **where, text=text, logprobs=done))
            out.append(self._event("response.content_part.done", **where, part=part))
        elif kind == "reasoning":
            text = "".join(self._text)
            where = {"item_id": item_id, "output_index": index, "content_index": 0}
            item = _reasoning_item(item_id, text, self._sealed)
            self._sealed = []
            out.append(self._event("response.reasoning_text.done", **where, text=text))
        else:
            arguments = "".join(self._args) or "{}"
            item = _call_item(item_id, extra["call_id"], extra["name"], arguments, "completed")
            out.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item_id,
                    output_index=index,
                    arguments=arguments,
                    name=extra["name"],
                )
            )
        out.append(self._event("response.output_item.done", output_index=index, item=item))
        self._items.append(item)
        self._text = []
        self._logprobs = []
        self._args = []

    def _begin(self, kind: str, out: list[Event], extra: dict[str, Any] | None = None) -> str:
        self._close(out)
        index = self._index()
        if kind == "message":
            item_id = new_id("msg_")
            item: dict[str, Any] = {
                "id": item_id,
                "type": "message",
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
        elif kind == "reasoning":
            item_id = new_id("rs_")
            item = {"id": item_id, "type": "reasoning", "summary": [], "content": []}
        else:
            assert extra is not None
            item_id = new_id("fc_")
            item = _call_item(item_id, extra["call_id"], extra["name"], "", "in_progress")
        self._open = (kind, item_id, index, extra or {})
        self._text_format = b""
        out.append(self._event("response.output_item.added", output_index=index, item=item))
        if kind == "message":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            out.append(
                self._event(
                    "response.content_part.added",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    part=part,
                )
            )
        return item_id

    def text_delta(self, text: str, quoted: bytes) -> bytes | None:
        """More text for the open message, framed from prebuilt bytes (`TextStage`)."""
        opened = self._open
        if opened is None or opened[0] != "message":
            return None
        form = self._text_format
        if not form:
            item_id = orjson.dumps(opened[1]).replace(b"%", b"%%")
            form = self._text_format = _TEXT_DELTA % (item_id, opened[2])
        self._text.append(text)
        seq = self._seq
        self._seq = seq + 1
        return form % (seq, quoted)

    def feed(self, event: Event) -> list[Event]:
        chunk = event[1]
        opened = self._open
        if opened is not None and opened[0] == "message":
            text = plain_text_delta(chunk)
            if text is not None:  # the usual chunk: more text for the open message
                self._text.append(text)
                seq = self._seq
                self._seq = seq + 1
                payload = {
                    "type": "response.output_text.delta",
                    "sequence_number": seq,
                    "item_id": opened[1],
                    "output_index": opened[2],
                    "content_index": 0,
                    "delta": text,
                    "logprobs": [],
                }
                return [("response.output_text.delta", payload)]
        if self._done:
            return []  # the response was completed or failed: nothing follows
        out: list[Event] = []
        err = chunk.get("error")
        if err:
            return self._fail(err)
        if not self._started:
            self._started = True
            if isinstance(chunk.get("id"), str):
                self._rid = _rid(chunk["id"])
            if isinstance(chunk.get("service_tier"), str):
                self._settings = settings(self._request, chunk["service_tier"])
            out.append(self._lifecycle("response.created", "in_progress", [], None))
            out.append(self._lifecycle("response.in_progress", "in_progress", [], None))
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            reasoning = reasoning_of(delta) if len(delta) > 1 or "content" not in delta else None
            if reasoning:
                item_id = self._ensure("reasoning", out)
                self._text.append(reasoning)
                out.append(
                    self._event(
                        "response.reasoning_text.delta",
                        item_id=item_id,
                        output_index=self._index(),
                        content_index=0,
                        delta=reasoning,
                    )
                )
            blocks = anthropic_blocks(delta) if "thinking_blocks" in delta else None
            if blocks:  # Anthropic's signed thinking, each block whole
                self._ensure("reasoning", out)
                self._sealed += blocks
            text = delta.get("content")
            if isinstance(text, str) and text:
                item_id = self._ensure("message", out)
                self._text.append(text)
                logprobs = choice.get("logprobs")
                tokens = logprobs.get("content") if isinstance(logprobs, dict) else None
                if isinstance(tokens, list):
                    self._logprobs.extend(tokens)
                out.append(
                    self._event(
                        "response.output_text.delta",
                        item_id=item_id,
                        output_index=self._index(),
                        content_index=0,
                        delta=text,
                        logprobs=text_logprobs(logprobs, with_bytes=False),
                    )
                )
            for call in delta.get("tool_calls") or ():
                self._tool_call(call, out)
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = _usage(usage)
            if self._finish is not None:
                out.extend(self._complete())
        return out

    def _so_far(self) -> dict[str, Any] | None:
        """The open item as far as it got (a failed stream's last item), else None."""
        if self._open is None:
            return None
        kind, item_id, _, extra = self._open
        text = "".join(self._text)
        if kind == "message":
            logprobs = text_logprobs({"content": self._logprobs}, with_bytes=True)
            return _message_item(item_id, text, "incomplete", logprobs)
        if kind == "reasoning":
            return _reasoning_item(item_id, text)
        arguments = "".join(self._args)
        return _call_item(item_id, extra["call_id"], extra["name"], arguments, "incomplete")

    def _fail(self, err: Any) -> list[Event]:
        """An upstream error (or the gateway's, for a stream that broke): the `error`
        event, then, once the response has begun, the response as failed with what it had
        produced (never as completed); nothing follows."""
        message = str(err.get("message", "") if isinstance(err, dict) else err)
        code = err.get("code") if isinstance(err, dict) else None
        out = [
            self._event(
                "error", code=None if code is None else str(code), message=message, param=None
            )
        ]
        if not self._started:
            return out
        self._done = True
        output = list(self._items)
        partial = self._so_far()
        if partial is not None:
            output.append(partial)
        self._open = None
        response = _response(
            self._rid, self._created, self.model, "failed", output, self._usage, self._settings
        )
        response["error"] = {"code": "server_error", "message": message}
        out.append(self._event("response.failed", response=response))
        return out

    def _ensure(self, kind: str, out: list[Event]) -> str:
        if self._open is not None and self._open[0] == kind:
            return self._open[1]
        return self._begin(kind, out)

    def _tool_call(self, call: dict[str, Any], out: list[Event]) -> None:
        index = call.get("index", 0)
        function = call.get("function") or {}
        if index not in self._calls:
            call_id = str(call.get("id") or new_id("call_"))
            name = str(function.get("name", ""))
            self._calls[index] = (call_id, name)
            self._begin("function_call", out, {"call_id": call_id, "name": name})
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments and self._open is not None:
            self._args.append(arguments)
            out.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=self._open[1],
                    output_index=self._open[2],
                    delta=arguments,
                )
            )

    def _complete(self) -> list[Event]:
        if self._done:
            return []
        self._done = True
        out: list[Event] = []
        self._close(out)
        status = _status(self._finish)
        kind = f"response.{status}"
        usage = self._usage or _usage(None)
        out.append(self._lifecycle(kind, status, list(self._items), usage))
        return out

    def finish(self) -> list[Event]:
        if not self._started:
            return []
        return self._complete()
