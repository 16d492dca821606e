"""Which capabilities an OpenAI-style request body uses (the `needs` of its profile)."""

from __future__ import annotations

from typing import Any

from fleetgate.config import capabilities as cap
from fleetgate.translate.anthropic_chat import output_effort, output_format
from fleetgate.translate.ollama_chat import think_effort
from fleetgate.translate.responses_chat import wants_logprobs

# body field -> need, for fields whose mere presence (non-null) is the need. `max_tokens`
# is not a need: every OpenAI-compatible server takes it, and dropping it would lift the
# output budget the context-fit logic relies on.
_PRESENCE: dict[str, str] = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "top_a": "top_a",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "repetition_penalty": "repetition_penalty",
    "seed": "seed",
    "logit_bias": "logit_bias",
    "reasoning": "reasoning",
    "reasoning_effort": "reasoning",
    "include_reasoning": "include_reasoning",
    "parallel_tool_calls": "parallel_tool_calls",
    "verbosity": "verbosity",
    "top_logprobs": cap.TOP_LOGPROBS,
}

_IMAGE_PARTS = frozenset({"image_url", "input_image", "image"})
_AUDIO_PARTS = frozenset({"input_audio", "audio"})


def derive_needs(body: dict[str, Any]) -> frozenset[str]:
    """The capabilities the body uses; malformed shapes add nothing (upstream judges them)."""
    # the body's fields looked up in the table: a body has a few, the table sixteen
    presence = _PRESENCE
    needs = {presence[k] for k, v in body.items() if v is not None and k in presence}
    if body.get("tools"):
        needs.add(cap.TOOLS)
    tool_choice = body.get("tool_choice")
    if tool_choice is not None and tool_choice != "auto":  # "auto" is every server's default
        needs.add(cap.TOOL_CHOICE)
    stop = body.get("stop")
    if stop:  # "" and [] mean no stop sequence
        needs.add("stop")
    logprobs = body.get("logprobs")
    if logprobs is True or (type(logprobs) is int and logprobs > 0):
        needs.add(cap.LOGPROBS)  # chat: true; legacy completions: an integer
    response_format = body.get("response_format")
    if isinstance(response_format, dict):
        kind = response_format.get("type")
        if kind in ("json_object", "json_schema"):
            needs.add(cap.RESPONSE_FORMAT)
        schema = response_format.get("json_schema")
        if kind == "json_schema" and isinstance(schema, dict) and schema.get("strict") is True:
            needs.add(cap.STRUCTURED_OUTPUTS)
    messages = body.get("messages")
    if isinstance(messages, list):
        needs |= _modalities(messages)
    return frozenset(needs)


def _modalities(messages: list[Any]) -> set[str]:
    found: set[str] = set()
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in _IMAGE_PARTS:
                found.add(cap.IMAGE_INPUT)
            elif kind in _AUDIO_PARTS:
                found.add(cap.AUDIO_INPUT)
    return found


# The other protocols' needs, in the same vocabulary: a request has the needs of its chat
# translation (tests/translate/test_properties.py holds each to `derive_needs` of it),
# read straight from the body so that native pass-through pays no translation.


def _present(body: dict[str, Any], names: tuple[str, ...], needs: set[str]) -> None:
    for name in names:
        if body.get(name) is not None:
            needs.add(_PRESENCE[name])


def anthropic_needs(body: dict[str, Any]) -> frozenset[str]:
    """The needs of an Anthropic Messages body."""
    needs: set[str] = set()
    _present(body, ("temperature", "top_p", "top_k"), needs)
    if body.get("stop_sequences"):
        needs.add("stop")
    tools = body.get("tools")
    if isinstance(tools, list) and any(_chat_tool(t) for t in tools):
        needs.add(cap.TOOLS)
        choice = body.get("tool_choice")
        if isinstance(choice, dict):
            if choice.get("type") in ("any", "tool", "none"):
                needs.add(cap.TOOL_CHOICE)
            if choice.get("disable_parallel_tool_use") is True:
                needs.add("parallel_tool_calls")
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        needs.add("reasoning")
    if output_effort(body) is not None:
        needs.add("reasoning")
    if output_format(body) is not None:  # always held to the schema: strict
        needs |= {cap.RESPONSE_FORMAT, cap.STRUCTURED_OUTPUTS}
    for message in body.get("messages") or ():
        user = isinstance(message, dict) and message.get("role") != "assistant"
        if user and _has_anthropic_image(message.get("content")):
            needs.add(cap.IMAGE_INPUT)
            break
    return frozenset(needs)


def _chat_tool(tool: Any) -> bool:
    """An Anthropic tool a chat deployment can call (server tools have no chat form)."""
    return (
        isinstance(tool, dict)
        and "name" in tool
        and ("input_schema" in tool or tool.get("type") in (None, "custom"))
    )


def _has_anthropic_image(content: Any) -> bool:
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        if block.get("type") == "image" and _image_source(block):
            return True
        if block.get("type") == "tool_result" and _has_anthropic_image(block.get("content")):
            return True
    return False


def _image_source(block: dict[str, Any]) -> bool:
    source = block.get("source")
    return isinstance(source, dict) and source.get("type") in ("base64", "url")


def responses_needs(body: dict[str, Any]) -> frozenset[str]:
    """The needs of an OpenAI Responses body."""
    needs: set[str] = set()
    _present(body, ("temperature", "top_p", "parallel_tool_calls"), needs)
    if wants_logprobs(body):  # `top_logprobs` alone asks for none (chat gets neither)
        needs.add(cap.LOGPROBS)
        _present(body, ("top_logprobs",), needs)
    tools = body.get("tools")
    if isinstance(tools, list) and any(
        isinstance(t, dict) and t.get("type") == "function" for t in tools
    ):
        needs.add(cap.TOOLS)
        choice = body.get("tool_choice")
        if choice in ("none", "required") or (
            isinstance(choice, dict) and choice.get("type") == "function"
        ):
            needs.add(cap.TOOL_CHOICE)
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema"):
        needs.add(cap.RESPONSE_FORMAT)
        if fmt.get("type") == "json_schema" and fmt.get("strict") is True:
            needs.add(cap.STRUCTURED_OUTPUTS)
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and isinstance(reasoning.get("effort"), str):
        needs.add("reasoning")
    items = body.get("input")
    for item in items if isinstance(items, list) else ():
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, list) and any(
            isinstance(p, dict) and p.get("type") == "input_image" and _image_url(p)
            for p in content
        ):
            needs.add(cap.IMAGE_INPUT)
            break
    return frozenset(needs)


def _image_url(part: dict[str, Any]) -> bool:
    url = part.get("image_url")
    return isinstance(url.get("url") if isinstance(url, dict) else url, str)


# Ollama `options` -> the chat field (and so the need) of the same meaning
_OLLAMA_OPTIONS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "seed": "seed",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "repeat_penalty": "repetition_penalty",
}


def ollama_needs(endpoint: str, body: dict[str, Any]) -> frozenset[str]:
    """The needs of an Ollama `/api/chat` or `/api/generate` body."""
    if endpoint not in ("ollama.chat", "ollama.generate"):
        return frozenset()
    needs: set[str] = set()
    options = body.get("options")
    if isinstance(options, dict):
        needs |= {need for name, need in _OLLAMA_OPTIONS.items() if options.get(name) is not None}
        if options.get("stop"):
            needs.add("stop")
    completion = endpoint == "ollama.generate" and (body.get("raw") or body.get("suffix"))
    fmt = body.get("format")
    if not completion and (fmt == "json" or isinstance(fmt, dict)):
        needs.add(cap.RESPONSE_FORMAT)
    if not completion and think_effort(body.get("think")) is not None:
        needs.add("reasoning")
    if endpoint == "ollama.chat":
        if body.get("tools"):
            needs.add(cap.TOOLS)
        messages = body.get("messages")
        if isinstance(messages, list) and any(
            isinstance(m, dict) and m.get("images") for m in messages
        ):
            needs.add(cap.IMAGE_INPUT)
    elif body.get("images") and not completion:
        needs.add(cap.IMAGE_INPUT)
    return frozenset(needs)
