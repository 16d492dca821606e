"""Reasoning upstreams on loopback, for the thinking tests: real aiohttp servers.

`ReasoningChat` answers chat completions as vLLM does with a reasoning parser (Qwen3 thinks
unless told not to): `reasoning_content` beside the content, whole or streamed as the request
asks. `ThinkingMessages` answers Anthropic Messages as Anthropic does: a signed `thinking`
block first only when the request enables thinking (`signature_delta` before the block
stops, in a stream), then the text, or with `tools` (and no tool result to answer) a call
of the first tool. It refuses, as Anthropic, a thinking block of the history whose signature
is not the one it gave, and, with thinking enabled, what Anthropic refuses with it: tool
results answering an assistant turn that does not start with a thinking block, a
`temperature` other than 1, a `top_k`, a `top_p` under 0.95, a forced `tool_choice`, a
`max_tokens` not above the budget; and a field Messages does not have (`reasoning_effort`).
Both keep the request bodies they were sent.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from aiohttp import web

from tests.security.servers import _Upstream

REASONING = ["Paris is", " in France."]
TEXT = ["The answer:", " France"]


def signature(thinking: str) -> str:
    """The signature `ThinkingMessages` gives a thinking block (any opaque string will do)."""
    return "sig-" + hashlib.sha256(thinking.encode()).hexdigest()[:16]


def _sse(payload: dict[str, Any], name: str | None = None) -> bytes:
    head = f"event: {name}\n".encode() if name else b""
    return head + b"data: " + orjson.dumps(payload) + b"\n\n"


class _Recording(_Upstream):
    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[dict[str, Any]] = []

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.bodies.append(body)
        refusal = self._refusal(body)
        if refusal is not None:
            error = {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": refusal},
            }
            return web.Response(
                status=400, body=orjson.dumps(error), content_type="application/json"
            )
        if body.get("stream"):
            return web.Response(body=self._stream(body), content_type="text/event-stream")
        return web.Response(body=orjson.dumps(self._whole(body)), content_type="application/json")

    def _refusal(self, body: dict[str, Any]) -> str | None:
        return None

    def _whole(self, body: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def _stream(self, body: dict[str, Any]) -> bytes:
        raise NotImplementedError


class ReasoningChat(_Recording):
    """Chat completions with `reasoning_content` (or, `field="reasoning"`, `reasoning`)."""

    def __init__(self, field: str = "reasoning_content") -> None:
        super().__init__()
        self.field = field

    def _whole(self, body: dict[str, Any]) -> dict[str, Any]:
        message = {"role": "assistant", "content": "".join(TEXT), self.field: "".join(REASONING)}
        return {
            "id": "chatcmpl-r",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11},
        }

    def _stream(self, body: dict[str, Any]) -> bytes:
        deltas: list[dict[str, Any]] = [
            {"role": "assistant", "content": None, self.field: REASONING[0]},
            *({self.field: r} for r in REASONING[1:]),
            *({"content": t} for t in TEXT),
        ]
        frame = {"id": "chatcmpl-r", "object": "chat.completion.chunk", "created": 0}
        chunks = [{"index": 0, "delta": d, "finish_reason": None} for d in deltas]
        chunks.append({"index": 0, "delta": {}, "finish_reason": "stop"})
        out = [_sse({**frame, "model": body.get("model"), "choices": [c]}) for c in chunks]
        usage = {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11}
        out.append(_sse({**frame, "model": body.get("model"), "choices": [], "usage": usage}))
        return b"".join(out) + b"data: [DONE]\n\n"


def _thinks(body: dict[str, Any]) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") == "enabled"


def _calls_tool(body: dict[str, Any]) -> str | None:
    """The tool the answer calls: the first one, unless the request answers a call."""
    tools, turns = body.get("tools") or [], body.get("messages") or []
    last = turns[-1].get("content") if turns else None
    answers = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
    return None if not tools or answers else str(tools[0]["name"])


_MESSAGES_FIELDS = frozenset(
    {
        *("model", "messages", "max_tokens", "system", "metadata", "stop_sequences", "stream"),
        *("temperature", "top_k", "top_p", "tools", "tool_choice", "thinking"),
        *("output_config", "output_format", "service_tier", "container", "context_management"),
    }
)


def _refused_with_thinking(body: dict[str, Any]) -> str | None:
    if body.get("temperature", 1) != 1:
        return "`temperature` may only be set to 1 when thinking is enabled"
    if "top_k" in body:
        return "`top_k` may not be set when thinking is enabled"
    if body.get("top_p", 1) < 0.95:
        return "`top_p` must be greater than or equal to 0.95 when thinking is enabled"
    if (body.get("tool_choice") or {}).get("type") in ("any", "tool"):
        return "Thinking may not be enabled when `tool_choice` forces tool use."
    if body["max_tokens"] <= body["thinking"]["budget_tokens"]:
        return "`max_tokens` must be greater than `thinking.budget_tokens`"
    return None


class ThinkingMessages(_Recording):
    """Anthropic Messages: a signed thinking block first when `thinking` is enabled."""

    def _refusal(self, body: dict[str, Any]) -> str | None:
        foreign = sorted(set(body) - _MESSAGES_FIELDS)
        if foreign:
            return f"{foreign[0]}: Extra inputs are not permitted"
        if _thinks(body):
            with_thinking = _refused_with_thinking(body)
            if with_thinking is not None:
                return with_thinking
        turns = body.get("messages") or []
        for i, turn in enumerate(turns):
            content = turn.get("content")
            for j, block in enumerate(content if isinstance(content, list) else ()):
                if block.get("type") != "thinking":
                    continue
                if block.get("signature") != signature(str(block.get("thinking"))):
                    return f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
        last = turns[-1].get("content") if turns else None
        answers = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
        if _thinks(body) and answers and len(turns) > 1:
            first = (turns[-2].get("content") or [{}])[0]
            if first.get("type") not in ("thinking", "redacted_thinking"):
                return (
                    f"messages.{len(turns) - 2}.content.0.type: Expected `thinking` or "
                    f"`redacted_thinking`, but found `{first.get('type')}`. When `thinking` "
                    "is enabled, a final `assistant` message must start with a thinking block"
                )
        return None

    def _whole(self, body: dict[str, Any]) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if _thinks(body):
            thought = "".join(REASONING)
            content.append(
                {"type": "thinking", "thinking": thought, "signature": signature(thought)}
            )
        tool = _calls_tool(body)
        if tool is None:
            content.append({"type": "text", "text": "".join(TEXT)})
        else:
            content.append({"type": "tool_use", "id": "toolu_1", "name": tool, "input": {}})
        return {
            "id": "msg_r",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": content,
            "stop_reason": "end_turn" if tool is None else "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 7, "output_tokens": 4},
        }

    def _stream(self, body: dict[str, Any]) -> bytes:
        message = {**self._whole(body), "content": [], "stop_reason": None}
        message["usage"] = {"input_tokens": 7, "output_tokens": 1}
        out = [_sse({"type": "message_start", "message": message}, "message_start")]
        blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
        if _thinks(body):
            thought = "".join(REASONING)
            deltas = [{"type": "thinking_delta", "thinking": r} for r in REASONING]
            deltas.append({"type": "signature_delta", "signature": signature(thought)})
            blocks.append(({"type": "thinking", "thinking": "", "signature": ""}, deltas))
        tool = _calls_tool(body)
        if tool is None:
            texts = [{"type": "text_delta", "text": t} for t in TEXT]
            blocks.append(({"type": "text", "text": ""}, texts))
        else:
            call = {"type": "tool_use", "id": "toolu_1", "name": tool, "input": {}}
            blocks.append((call, [{"type": "input_json_delta", "partial_json": "{}"}]))
        for index, (block, deltas) in enumerate(blocks):
            start = {"type": "content_block_start", "index": index, "content_block": block}
            out.append(_sse(start, "content_block_start"))
            for delta in deltas:
                event = {"type": "content_block_delta", "index": index, "delta": delta}
                out.append(_sse(event, "content_block_delta"))
            out.append(_sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
        delta = {"stop_reason": "end_turn" if tool is None else "tool_use", "stop_sequence": None}
        usage = {"output_tokens": 4}
        out.append(_sse({"type": "message_delta", "delta": delta, "usage": usage}, "message_delta"))
        out.append(_sse({"type": "message_stop"}, "message_stop"))
        return b"".join(out)
