"""What a translated `response` object carries beside its output: the request's settings,
repeated as OpenAI's Responses API repeats them, and the output text's logprobs.

A `response` object says how it was made: the sampling settings, output limit, tools,
tool choice, text format, instructions, metadata and identifiers of its request. Where a
chat deployment could not apply a setting, the object says what happened instead: nothing
is stored (`store: false`), no input is ever truncated (`truncation: "disabled"`; the
gateway routes a long request to a larger window instead), and the service tier is the
one the upstream reports, if any.
"""

from __future__ import annotations

from typing import Any

_TRUNCATION = "disabled"
# string settings repeated as the client sent them
_IDENTIFIERS = ("user", "safety_identifier", "prompt_cache_key")


def _or(value: Any, kind: type | tuple[type, ...], default: Any) -> Any:
    return value if isinstance(value, kind) and not isinstance(value, bool) else default


def _text(text: Any) -> dict[str, Any]:
    fmt = text.get("format") if isinstance(text, dict) else None
    return {"format": fmt if isinstance(fmt, dict) else {"type": "text"}}


def _reasoning(reasoning: Any) -> dict[str, Any]:
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    # a chat deployment writes its reasoning out in full: there is no summary
    return {"effort": effort if isinstance(effort, str) else None, "summary": None}


def _function_tools(tools: Any) -> list[Any]:
    """The tools the model could call: hosted tools have no chat form and were dropped."""
    if not isinstance(tools, list):
        return []
    return [t for t in tools if isinstance(t, dict) and t.get("type") == "function"]


def settings(request: dict[str, Any], service_tier: Any = None) -> dict[str, Any]:
    """The fields of a `response` object that repeat `request` (a Responses body);
    `service_tier` is the one the upstream's answer reports."""
    parallel = request.get("parallel_tool_calls")
    out: dict[str, Any] = {
        "instructions": _or(request.get("instructions"), str, None),
        "max_output_tokens": _or(request.get("max_output_tokens"), int, None),
        "max_tool_calls": _or(request.get("max_tool_calls"), int, None),
        "metadata": _or(request.get("metadata"), dict, {}),
        "parallel_tool_calls": parallel if isinstance(parallel, bool) else True,
        "previous_response_id": None,
        "reasoning": _reasoning(request.get("reasoning")),
        "service_tier": _or(service_tier, str, None),
        "store": False,
        "temperature": _or(request.get("temperature"), (int, float), None),
        "text": _text(request.get("text")),
        "tool_choice": _or(request.get("tool_choice"), (str, dict), "auto"),
        "tools": _function_tools(request.get("tools")),
        "top_logprobs": _or(request.get("top_logprobs"), int, 0),
        "top_p": _or(request.get("top_p"), (int, float), None),
        "truncation": _TRUNCATION,
        "background": False,
    }
    for name in _IDENTIFIERS:
        value = request.get(name)
        if isinstance(value, str):
            out[name] = value
    return out


def _alternatives(top: Any, with_bytes: bool) -> list[dict[str, Any]]:
    out = []
    for alt in top if isinstance(top, list) else ():
        if isinstance(alt, dict) and isinstance(alt.get("token"), str):
            out.append(_token(alt, with_bytes))
    return out


def _token(token: dict[str, Any], with_bytes: bool) -> dict[str, Any]:
    logprob = token.get("logprob")
    out: dict[str, Any] = {
        "token": token["token"],
        "logprob": logprob if isinstance(logprob, (int, float)) else 0.0,
    }
    if with_bytes:
        raw = token.get("bytes")
        out["bytes"] = raw if isinstance(raw, list) else list(token["token"].encode())
    return out


def text_logprobs(logprobs: Any, with_bytes: bool) -> list[dict[str, Any]]:
    """A chat choice's `logprobs` (`{"content": [...]}`) as the Responses `logprobs` of
    its output text; `with_bytes` for an `output_text` part (a stream's delta and done
    events carry none)."""
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    out = []
    for token in content if isinstance(content, list) else ():
        if isinstance(token, dict) and isinstance(token.get("token"), str):
            entry = _token(token, with_bytes)
            entry["top_logprobs"] = _alternatives(token.get("top_logprobs"), with_bytes)
            out.append(entry)
    return out
