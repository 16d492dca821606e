"""Anthropic Messages ⇄ OpenAI Chat Completions: requests, answers and streams, both ways.

`messages_to_chat` / `chat_to_messages_answer` / `ChatToMessagesStream` serve Anthropic
clients on OpenAI-compatible deployments; `chat_to_messages` / `messages_to_chat_answer` /
`MessagesToChatStream` serve OpenAI clients on `anthropic`-kind providers. What each maps,
drops and refuses is listed in docs/protocols.md.
"""

from __future__ import annotations

import time
from typing import Any

from fleetgate.translate.chat import (
    dump_args,
    first_choice,
    json_args,
    new_id,
    reasoning_of,
    swap_prefix,
)
from fleetgate.translate.events import DONE_EVENT, Event
from fleetgate.translate.held_stops import sendable_to_anthropic
from fleetgate.translate.text_chunks import plain_text_delta
from fleetgate.translate.thinking import (
    StreamedBlocks,
    anthropic_blocks,
    can_think,
    chat_blocks,
    with_thinking,
)

# finish_reason <-> stop_reason
_STOP_REASON = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
_FINISH_REASON = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "pause_turn": "stop",
    "refusal": "content_filter",
}
# Anthropic `thinking.budget_tokens` <-> OpenAI `reasoning_effort`
_EFFORT_BUDGET = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576}
# what an OpenAI client on an anthropic provider gets when it names no output budget
DEFAULT_MAX_TOKENS = 4096
# Anthropic `output_config.effort` -> OpenAI `reasoning_effort` (chat's highest is "high")
_OUTPUT_EFFORT = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}


def output_format(body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema an Anthropic request wants its answer to follow: `output_config.format`
    (the SDK's `messages.parse(output_format=...)`), or the older top-level `output_format`."""
    config = body.get("output_config")
    fmt = config.get("format") if isinstance(config, dict) else None
    if fmt is None:
        fmt = body.get("output_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = fmt.get("schema")
        return schema if isinstance(schema, dict) else None
    return None


def output_effort(body: dict[str, Any]) -> str | None:
    """`output_config.effort` as a chat `reasoning_effort`."""
    config = body.get("output_config")
    effort = config.get("effort") if isinstance(config, dict) else None
    return _OUTPUT_EFFORT.get(effort) if isinstance(effort, str) else None


def _effort(budget: Any) -> str:
    if type(budget) is not int:
        return "medium"
    for effort, tokens in _EFFORT_BUDGET.items():
        if budget <= tokens:
            return effort
    return "high"


# ---- Anthropic request -> Chat request ------------------------------------------------------


def _text_of(blocks: Any) -> str:
    """The text of a `system` value or a tool_result content (a string or text blocks)."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        return ""
    return "\n\n".join(
        b["text"]
        for b in blocks
        if isinstance(b, dict)
        and b.get("type", "text") == "text"
        and isinstance(b.get("text"), str)
    )


def _image_part(block: dict[str, Any]) -> dict[str, Any] | None:
    source = block.get("source")
    if not isinstance(source, dict):
        return None
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    elif source.get("type") == "url":
        url = str(source.get("url", ""))
    else:
        return None
    return {"type": "image_url", "image_url": {"url": url}}


def _user_parts(blocks: list[Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(chat `tool` messages, the remaining content parts) of one user turn."""
    tools: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, str):
            parts.append({"type": "text", "text": block})
            continue
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif kind == "image":
            image = _image_part(block)
            if image is not None:
                parts.append(image)
        elif kind == "tool_result":
            content = block.get("content")
            text = _text_of(content)
            if block.get("is_error"):
                text = "Error: " + text  # chat has no error flag: say it in the text
            tools.append(
                {"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")), "content": text}
            )
            if isinstance(content, list):  # images in a tool result follow as user content
                parts.extend(
                    p
                    for b in content
                    if isinstance(b, dict) and b.get("type") == "image"
                    if (p := _image_part(b)) is not None
                )
        elif kind == "document":
            source = block.get("source")
            if isinstance(source, dict) and source.get("type") == "text":
                parts.append({"type": "text", "text": str(source.get("data", ""))})
    return tools, parts


def _collapse(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """One text part is a plain string (what every chat template takes)."""
    if len(parts) == 1 and parts[0]["type"] == "text":
        return str(parts[0]["text"])
    return parts


def _assistant_message(content: Any) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            calls.append(
                {
                    "id": str(block.get("id", "")),
                    "type": "function",
                    "function": {
                        "name": str(block.get("name", "")),
                        "arguments": dump_args(block.get("input")),
                    },
                }
            )
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            reasoning.append(block["thinking"])
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    return message


def _chat_tools(tools: list[Any]) -> list[dict[str, Any]]:
    out = []
    for tool in tools:
        if not isinstance(tool, dict) or "name" not in tool:
            continue
        if "input_schema" not in tool and tool.get("type") not in (None, "custom"):
            continue  # Anthropic's server tools (web search, bash, …) have no chat equivalent
        function: dict[str, Any] = {
            "name": tool["name"],
            "parameters": tool.get("input_schema") or {"type": "object", "properties": {}},
        }
        if tool.get("description") is not None:
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out


def _chat_tool_choice(choice: Any) -> Any:
    if not isinstance(choice, dict):
        return None
    kind = choice.get("type")
    if kind == "any":
        return "required"
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}
    if kind == "none":
        return "none"
    return "auto"


def messages_to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic Messages request as a Chat Completions request (without `model`)."""
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": _text_of(system)})
    for message in body.get("messages") or ():
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        content = message.get("content")
        if role == "assistant":
            messages.append(_assistant_message(content))
            continue
        if isinstance(content, str):
            messages.append({"role": "user", "content": content})
            continue
        tools, parts = _user_parts(content if isinstance(content, list) else [])
        messages.extend(tools)
        if parts or not tools:
            messages.append({"role": "user", "content": _collapse(parts) if parts else ""})
    out: dict[str, Any] = {"messages": messages}
    for name in ("max_tokens", "temperature", "top_p", "top_k", "stream"):
        if body.get(name) is not None:
            out[name] = body[name]
    if body.get("stream"):
        out["stream_options"] = {"include_usage": True}
    if body.get("stop_sequences"):
        out["stop"] = body["stop_sequences"]
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        converted = _chat_tools(tools)
        if converted:
            out["tools"] = converted
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and "tools" in out:
        mapped = _chat_tool_choice(choice)
        if mapped != "auto":
            out["tool_choice"] = mapped
        if choice.get("disable_parallel_tool_use") is True:
            out["parallel_tool_calls"] = False
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str):
        out["user"] = metadata["user_id"]
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        out["reasoning_effort"] = _effort(thinking.get("budget_tokens"))
    effort = output_effort(body)
    if effort is not None:  # named outright: it wins over a thinking budget's guess
        out["reasoning_effort"] = effort
    schema = output_format(body)
    if schema is not None:  # Anthropic's JSON outputs are always held to the schema
        out["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "response", "schema": schema, "strict": True},
        }
    return out


# ---- Chat answer -> Anthropic answer --------------------------------------------------------


def _matched_stop(choice: dict[str, Any]) -> str | None:
    """The stop string an engine says ended the choice: vLLM's `stop_reason`, SGLang's
    `matched_stop` (each an int token id instead where a stop token or EOS ended it)."""
    for field in ("stop_reason", "matched_stop"):
        matched = choice.get(field)
        if isinstance(matched, str):
            return matched
    return None


def _stop_reason(choice: dict[str, Any], stops: tuple[str, ...]) -> tuple[str, str | None]:
    """Anthropic's (stop_reason, stop_sequence) of a chat choice: `stop_sequence` only for
    one of the client's own `stops` (an engine also stops at its chat template's strings,
    and a route may add some: to the client, those are the model's natural end)."""
    finish = choice.get("finish_reason")
    if finish == "stop" and stops:
        matched = _matched_stop(choice)
        if matched is not None and matched in stops:
            return "stop_sequence", matched
    return _STOP_REASON.get(str(finish), "end_turn"), None


def _anthropic_usage(usage: Any) -> dict[str, int]:
    if not isinstance(usage, dict):
        return {"input_tokens": 0, "output_tokens": 0}
    prompt = int(usage.get("prompt_tokens") or 0)
    details = usage.get("prompt_tokens_details")
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    # Anthropic's input_tokens leave out what was read from the prompt cache
    out = {
        "input_tokens": prompt - cached,
        "output_tokens": int(usage.get("completion_tokens") or 0),
    }
    if cached:
        out["cache_read_input_tokens"] = cached
    return out


def chat_to_messages_answer(
    answer: dict[str, Any], model: str, *, thinking: bool = True, stops: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A chat completion as an Anthropic `message`; `thinking` False (the request did not
    enable thinking): the reasoning a model gives all the same is left out, as Anthropic
    answers such a request without thinking blocks. `stops`: the client's
    `stop_sequences`, the only strings its answer names as `stop_sequence`."""
    choice = first_choice(answer)
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    reasoning = reasoning_of(message) if thinking else None
    if reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    text = message.get("content")
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id") or new_id("toolu_"),
                "name": function.get("name", ""),
                "input": json_args(function.get("arguments")),
            }
        )
    stop_reason, stop_sequence = _stop_reason(choice, stops)
    if message.get("tool_calls") and stop_reason == "end_turn":
        stop_reason = "tool_use"
    return {
        "id": _message_id(answer.get("id")),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": _anthropic_usage(answer.get("usage")),
    }


def _message_id(upstream: Any) -> str:
    return swap_prefix(upstream, "chatcmpl-", "msg_")


# a `content_block_delta` event with a `text_delta`, as `encode_sse` writes it, up to the text
_TEXT_DELTA_HEAD = (
    b"event: content_block_delta\ndata: "
    b'{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":'
)


class ChatToMessagesStream:
    """Chat completion chunks in, Anthropic Messages stream events out.

    `message_start` (and a `ping`) go out with the first chunk; each text, reasoning or
    tool call opens its own content block; `message_delta` carries the stop reason and
    the usage of the final usage chunk, then `message_stop`. `thinking` False: reasoning
    chunks are left out; `stops`: the client's `stop_sequences` (`chat_to_messages_answer`).
    """

    __slots__ = (
        "_block",
        "_block_kind",
        "_finish",
        "_started",
        "_stopped",
        "_stops",
        "_text_head",
        "_thinking",
        "_tool_blocks",
        "_usage",
        "model",
    )

    def __init__(self, model: str, *, thinking: bool = True, stops: tuple[str, ...] = ()) -> None:
        self.model = model
        self._thinking = thinking
        self._stops = stops
        self._started = False
        self._stopped = False
        self._block = -1  # index of the open content block (-1: none open)
        self._block_kind = ""
        self._text_head = b""  # the bytes of a text delta event up to its text
        self._tool_blocks: dict[int, int] = {}  # chat tool-call index -> block index
        self._finish: tuple[str, str | None] | None = None
        self._usage: dict[str, int] | None = None

    def _start(self, chunk: dict[str, Any], out: list[Event]) -> None:
        self._started = True
        message = {
            "id": _message_id(chunk.get("id")),
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        out.append(("message_start", {"type": "message_start", "message": message}))
        out.append(("ping", {"type": "ping"}))

    def _close(self, out: list[Event]) -> None:
        if self._block_kind:
            out.append(("content_block_stop", {"type": "content_block_stop", "index": self._block}))
            self._block_kind = ""

    def _open(self, kind: str, block: dict[str, Any], out: list[Event]) -> None:
        self._close(out)
        self._block += 1
        self._block_kind = kind
        self._text_head = b""
        out.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": self._block, "content_block": block},
            )
        )

    def _delta(self, index: int, delta: dict[str, Any], out: list[Event]) -> None:
        out.append(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        )

    def text_delta(self, text: str, quoted: bytes) -> bytes | None:
        """More text for the open text block, framed from prebuilt bytes (`TextStage`)."""
        if self._block_kind != "text":
            return None
        head = self._text_head
        if not head:
            head = self._text_head = _TEXT_DELTA_HEAD % self._block
        return head + quoted + b"}}\n\n"

    def feed(self, event: Event) -> list[Event]:
        chunk = event[1]
        text = plain_text_delta(chunk) if self._block_kind == "text" else None
        if text is not None:  # the usual chunk: more text for the open text block
            delta = {"type": "text_delta", "text": text}
            payload = {"type": "content_block_delta", "index": self._block, "delta": delta}
            return [("content_block_delta", payload)]
        if self._stopped:
            return []  # the message ended, or failed: nothing follows
        if chunk.get("error"):
            return self._fail(chunk["error"])
        out: list[Event] = []
        if not self._started:
            self._start(chunk, out)
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            reasoning = (
                reasoning_of(delta)
                if self._thinking and (len(delta) > 1 or "content" not in delta)
                else None
            )
            if reasoning:
                if self._block_kind != "thinking":
                    self._open(
                        "thinking", {"type": "thinking", "thinking": "", "signature": ""}, out
                    )
                self._delta(self._block, {"type": "thinking_delta", "thinking": reasoning}, out)
            text = delta.get("content")
            if isinstance(text, str) and text:
                if self._block_kind != "text":
                    self._open("text", {"type": "text", "text": ""}, out)
                self._delta(self._block, {"type": "text_delta", "text": text}, out)
            if "tool_calls" in delta:
                for call in delta["tool_calls"] or ():
                    self._tool_call(call, out)
            if choice.get("finish_reason"):
                self._finish = _stop_reason(choice, self._stops)
                if self._tool_blocks and self._finish[0] == "end_turn":
                    self._finish = ("tool_use", None)
                self._close(out)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = _anthropic_usage(usage)
            if self._finish is not None:
                out.extend(self._end())
        return out

    def _fail(self, err: Any) -> list[Event]:
        """An upstream error (or the gateway's, for a stream that broke): Anthropic's `error`
        event, and nothing after it; no block stop, `message_delta` or `message_stop`
        would tell the client the message had ended as it should."""
        self._stopped = True
        self._block_kind = ""  # `text_delta` frames no more text
        return [error_event(err)]

    def _tool_call(self, call: dict[str, Any], out: list[Event]) -> None:
        index = call.get("index", 0)
        function = call.get("function") or {}
        block = self._tool_blocks.get(index)
        if block is None:
            self._open(
                "tool_use",
                {
                    "type": "tool_use",
                    "id": call.get("id") or new_id("toolu_"),
                    "name": function.get("name", ""),
                    "input": {},
                },
                out,
            )
            block = self._tool_blocks[index] = self._block
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            self._delta(block, {"type": "input_json_delta", "partial_json": arguments}, out)

    def _end(self) -> list[Event]:
        if self._stopped:
            return []
        self._stopped = True
        out: list[Event] = []
        self._close(out)
        stop_reason, stop_sequence = self._finish or ("end_turn", None)
        usage = self._usage or {"output_tokens": 0}
        delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
        out.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
        out.append(("message_stop", {"type": "message_stop"}))
        return out

    def finish(self) -> list[Event]:
        if not self._started:  # an upstream that ended before any chunk
            return []
        return self._end()


# ---- Chat request -> Anthropic request (OpenAI clients on anthropic providers) -------------


def _anthropic_image(part: dict[str, Any]) -> dict[str, Any] | None:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str):
        return None
    if url.startswith("data:") and ";base64," in url:
        media, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _anthropic_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text":
            blocks.append({"type": "text", "text": str(part.get("text", ""))})
        elif part.get("type") == "image_url":
            image = _anthropic_image(part)
            if image is not None:
                blocks.append(image)
    return blocks


def _plain_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(
        str(p.get("text", ""))
        for p in content or ()
        if isinstance(p, dict) and p.get("type") == "text"
    )


def chat_to_messages(body: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions request as an Anthropic Messages request (without `model`)."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if turns and turns[-1]["role"] == role:  # Anthropic wants alternating turns
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for message in body.get("messages") or ():
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            system.append(_plain_text(content))
        elif role == "assistant":
            # Anthropic's own signed thinking goes back as it came; other reasoning, which
            # Anthropic could not verify, is not sent (translate/thinking.py)
            blocks = anthropic_blocks(message)
            blocks += _anthropic_blocks(content)
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call.get("id") or new_id("toolu_"),
                        "name": function.get("name", ""),
                        "input": json_args(function.get("arguments")),
                    }
                )
            add("assistant", blocks)
        elif role in ("tool", "function"):
            result = {
                "type": "tool_result",
                "tool_use_id": str(message.get("tool_call_id", "")),
                "content": _plain_text(content),
            }
            add("user", [result])
        else:
            add("user", _anthropic_blocks(content))
    out: dict[str, Any] = {"messages": turns}
    if system:
        out["system"] = "\n\n".join(system)
    budget = body.get("max_completion_tokens") or body.get("max_tokens")
    out["max_tokens"] = budget if type(budget) is int and budget > 0 else DEFAULT_MAX_TOKENS
    for name in ("temperature", "top_p", "top_k", "stream"):
        if body.get(name) is not None:
            out[name] = body[name]
    stop = body.get("stop")
    if stop:
        # what Anthropic refuses (only whitespace) the gateway holds the answer to itself
        stops = [stop] if isinstance(stop, str) else stop
        if isinstance(stops, list):  # another type goes as it is, for Anthropic to refuse
            stops = [s for s in stops if not isinstance(s, str) or sendable_to_anthropic(s)]
        if stops:
            out["stop_sequences"] = stops
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        out["tools"] = [
            {
                "name": t["function"].get("name", ""),
                **(
                    {"description": t["function"]["description"]}
                    if t["function"].get("description") is not None
                    else {}
                ),
                "input_schema": t["function"].get("parameters")
                or {"type": "object", "properties": {}},
            }
            for t in tools
            if isinstance(t, dict) and isinstance(t.get("function"), dict)
        ]
        choice = _anthropic_tool_choice(body.get("tool_choice"))
        if body.get("parallel_tool_calls") is False:
            choice = {**(choice or {"type": "auto"}), "disable_parallel_tool_use": True}
        if choice is not None:
            out["tool_choice"] = choice
    user = body.get("user")
    if isinstance(user, str) and user:
        out["metadata"] = {"user_id": user}
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if isinstance(schema, dict):
            out["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
    effort = body.get("reasoning_effort")
    if isinstance(effort, str):
        ask_thinking(out, effort)
    return out


def ask_thinking(out: dict[str, Any], effort: str) -> None:
    """`out`, an Anthropic request, thinks with the budget of chat's `reasoning_effort`
    (none for an effort without one, such as `none`), when Anthropic takes thinking with it
    (`can_think`)."""
    budget = _EFFORT_BUDGET.get(effort)
    if budget is not None and can_think(out):
        with_thinking(out, budget)


def _anthropic_tool_choice(choice: Any) -> dict[str, Any] | None:
    if choice == "required":
        return {"type": "any"}
    if choice == "none":
        return {"type": "none"}
    if choice == "auto":
        return {"type": "auto"}
    if isinstance(choice, dict):
        function = choice.get("function")
        if isinstance(function, dict) and function.get("name"):
            return {"type": "tool", "name": function["name"]}
    return None


# ---- Anthropic answer -> Chat answer --------------------------------------------------------


def _chat_usage(usage: Any) -> dict[str, Any]:
    usage = usage if isinstance(usage, dict) else {}
    cached = int(usage.get("cache_read_input_tokens") or 0)
    prompt = int(usage.get("input_tokens") or 0) + cached
    prompt += int(usage.get("cache_creation_input_tokens") or 0)
    completion = int(usage.get("output_tokens") or 0)
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out


def _chat_id(upstream: Any) -> str:
    return swap_prefix(upstream, "msg_", "chatcmpl-")


def messages_to_chat_answer(answer: dict[str, Any], model: str) -> dict[str, Any]:
    """An Anthropic `message` as a chat completion."""
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in answer.get("content") or ():
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "thinking":
            reasoning.append(str(block.get("thinking", "")))
        elif kind == "tool_use":
            calls.append(
                {
                    "id": block.get("id", ""),
                    "type": "function",
                    "function": {
                        "name": block.get("name", ""),
                        "arguments": dump_args(block.get("input")),
                    },
                }
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    thinking_blocks = chat_blocks(answer.get("content"))
    if thinking_blocks:  # signed, for the client to send back (translate/thinking.py)
        message["thinking_blocks"] = thinking_blocks
    finish = _FINISH_REASON.get(str(answer.get("stop_reason")), "stop")
    return {
        "id": _chat_id(answer.get("id")),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": _chat_usage(answer.get("usage")),
    }


class MessagesToChatStream:
    """Anthropic Messages stream events in, chat completion chunks out (then `[DONE]`);
    the closing usage chunk (no choices) only for a client that asked for it (`usage`:
    `stream_options.include_usage`), as OpenAI sends it. A signed thinking block, once it
    stops, is one `thinking_blocks` entry (translate/thinking.py)."""

    __slots__ = (
        "_calls",
        "_created",
        "_done",
        "_id",
        "_thinking",
        "_usage",
        "_usage_chunk",
        "model",
    )

    def __init__(self, model: str, usage: bool = True) -> None:
        self.model = model
        self._usage_chunk = usage
        self._id = new_id("chatcmpl-")
        self._created = int(time.time())
        self._calls: dict[int, int] = {}  # content block index -> tool-call index
        self._thinking = StreamedBlocks()
        self._usage: dict[str, Any] = {}
        self._done = False

    def _chunk(self, delta: dict[str, Any] | None, finish: str | None = None) -> Event:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
        chunk = {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self.model,
            "choices": choices,
        }
        return (None, chunk)

    def feed(self, event: Event) -> list[Event]:
        if self._done:
            return []  # the stream ended, or failed: nothing follows
        data = event[1]
        kind = data.get("type")
        if kind == "message_start":
            message = data.get("message") or {}
            self._id = _chat_id(message.get("id"))
            self._usage.update(message.get("usage") or {})
            return [self._chunk({"role": "assistant", "content": ""})]
        if kind == "content_block_start":
            block = data.get("content_block") or {}
            self._thinking.start(data.get("index", 0), block)
            if block.get("type") == "tool_use":
                index = self._calls[data.get("index", 0)] = len(self._calls)
                call = {
                    "index": index,
                    "id": block.get("id", ""),
                    "type": "function",
                    "function": {"name": block.get("name", ""), "arguments": ""},
                }
                return [self._chunk({"tool_calls": [call]})]
            return []
        if kind == "content_block_delta":
            delta = data.get("delta") or {}
            self._thinking.delta(data.get("index", 0), delta)
            dtype = delta.get("type")
            if dtype == "text_delta":
                return [self._chunk({"content": delta.get("text", "")})]
            if dtype == "thinking_delta":
                return [self._chunk({"reasoning_content": delta.get("thinking", "")})]
            if dtype == "input_json_delta":
                index = self._calls.get(data.get("index", 0), 0)
                call = {"index": index, "function": {"arguments": delta.get("partial_json", "")}}
                return [self._chunk({"tool_calls": [call]})]
            return []
        if kind == "content_block_stop":
            entry = self._thinking.stop(data.get("index", 0))
            return [] if entry is None else [self._chunk({"thinking_blocks": [entry]})]
        if kind == "message_delta":
            self._usage.update(
                {k: v for k, v in (data.get("usage") or {}).items() if v is not None}
            )
            stop = (data.get("delta") or {}).get("stop_reason")
            return [self._chunk({}, _FINISH_REASON.get(str(stop), "stop"))]
        if kind == "message_stop":
            return self.finish()
        if kind == "error":  # as chat's in-stream error, and the stream ends: no `[DONE]`
            self._done = True
            err = data.get("error") or {}
            return [
                (
                    None,
                    {
                        "error": {
                            "message": err.get("message", ""),
                            "type": err.get("type", "api_error"),
                            "code": None,
                            "param": None,
                        }
                    },
                )
            ]
        return []  # ping

    def finish(self) -> list[Event]:
        if self._done:
            return []
        self._done = True
        if not self._usage_chunk:
            return [DONE_EVENT]
        usage_chunk = self._chunk(None)
        usage_chunk[1]["usage"] = _chat_usage(self._usage)
        return [usage_chunk, DONE_EVENT]


# ---- errors ---------------------------------------------------------------------------------


def error_event(err: Any) -> Event:
    """An OpenAI-style in-stream error as Anthropic's `error` event."""
    from fleetgate.translate.errors import anthropic_error

    if isinstance(err, dict):
        status = err.get("code") if type(err.get("code")) is int else 500
        message = str(err.get("message", ""))
    else:
        status, message = 500, str(err)
    return ("error", anthropic_error(status, message))
