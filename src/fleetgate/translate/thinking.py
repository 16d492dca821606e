"""Anthropic's signed thinking, carried through Chat Completions and back.

Anthropic signs each `thinking` block (`redacted_thinking` carries encrypted `data`) and
verifies the signature when the block comes back in a later request: an unsigned or altered
block is a 400 ("Invalid `signature` in `thinking` block"). Chat has no field for it, so an
assistant message translated from Anthropic carries its blocks, as Anthropic gave them, in
`thinking_blocks` (the name other gateways use), beside the readable `reasoning_content`;
a client that sends the message back sends them back, and they go to Anthropic as they came.
A Responses reasoning item carries them in its `encrypted_content` (opaque to the client,
which sends the item back as it got it, as OpenAI's own reasoning state: `sealed`).
Reasoning without a signature (from a chat engine, an Ollama `thinking`, a Responses
reasoning item of another origin) cannot be verified and is not sent to Anthropic.

With thinking enabled, Anthropic also wants the assistant turn whose tool calls the last
user turn answers to start with a thinking block; when the history has none to give, the
request goes without thinking (what Anthropic's own error advises), rather than failing.
Nor does it take thinking with a forced tool choice (the request goes without thinking:
the forced call is the client's contract, thinking a preference), a `temperature` other
than 1 or a `top_k` (left out), or a `top_p` under 0.95 (raised to it).
"""

from __future__ import annotations

from typing import Any

import orjson

THINKING_KINDS = ("thinking", "redacted_thinking")
_LEAST_BUDGET = 1024  # Anthropic's smallest `budget_tokens`


def signed(block: Any) -> dict[str, Any] | None:
    """A thinking block Anthropic can verify, in its own shape (None: not one)."""
    if not isinstance(block, dict):
        return None
    kind = block.get("type")
    if kind == "thinking":
        thinking, signature = block.get("thinking"), block.get("signature")
        if isinstance(thinking, str) and isinstance(signature, str) and signature:
            return {"type": "thinking", "thinking": thinking, "signature": signature}
    elif kind == "redacted_thinking" and isinstance(block.get("data"), str) and block["data"]:
        return {"type": "redacted_thinking", "data": block["data"]}
    return None


def chat_blocks(content: Any) -> list[dict[str, Any]]:
    """The signed thinking blocks of an Anthropic answer's content, for `thinking_blocks`."""
    found = (signed(b) for b in content) if isinstance(content, list) else ()
    return [b for b in found if b is not None]


def anthropic_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The thinking blocks to send Anthropic for a chat assistant message: those it carries
    in `thinking_blocks` (a stream's entries have an `index` too) that Anthropic signed."""
    blocks = message.get("thinking_blocks")
    found = (signed(b) for b in blocks) if isinstance(blocks, list) else ()
    return [b for b in found if b is not None]


def sealed(blocks: list[dict[str, Any]]) -> str:
    """Signed thinking blocks as a Responses reasoning item's `encrypted_content`."""
    return orjson.dumps(blocks).decode()


def unsealed(content: Any) -> list[dict[str, Any]]:
    """The signed thinking blocks in a reasoning item's `encrypted_content` (none in one of
    another origin, such as OpenAI's own)."""
    if not isinstance(content, str) or not content.startswith("["):
        return []
    try:
        blocks = orjson.loads(content)
    except orjson.JSONDecodeError:
        return []
    found = (signed(b) for b in blocks) if isinstance(blocks, list) else ()
    return [b for b in found if b is not None]


def unthought_tool_turn(turns: list[dict[str, Any]]) -> bool:
    """Whether the last turn answers tool calls of an assistant turn that does not start
    with a thinking block: with thinking enabled, Anthropic refuses such a request."""
    if len(turns) < 2 or turns[-1]["role"] != "user" or turns[-2]["role"] != "assistant":
        return False
    if not any(b.get("type") == "tool_result" for b in turns[-1]["content"]):
        return False
    blocks = turns[-2]["content"]
    return not blocks or blocks[0].get("type") not in THINKING_KINDS


def can_think(out: dict[str, Any]) -> bool:
    """Whether Anthropic takes thinking with this request (translated, without it yet)."""
    forced = isinstance(out.get("tool_choice"), dict) and out["tool_choice"].get("type") in (
        "any",
        "tool",
    )
    return not forced and not unthought_tool_turn(out["messages"])


def with_thinking(out: dict[str, Any], budget: int) -> None:
    """`out` asks for thinking with `budget` tokens, its sampling as Anthropic takes it then
    (`max_tokens` above the budget)."""
    out["thinking"] = {"type": "enabled", "budget_tokens": budget}
    tokens = out.get("max_tokens")
    out["max_tokens"] = max(tokens if type(tokens) is int else 0, budget + 1)
    thinking_sampling(out)


def thinks(out: dict[str, Any]) -> bool:
    """Whether an Anthropic request asks for thinking (`enabled`, or `adaptive`)."""
    thinking = out.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def fit_budget(out: dict[str, Any]) -> None:
    """A thinking budget under `max_tokens`, as Anthropic wants it, after a cap lowered
    `max_tokens`: the budget lowered to fit, or no thinking when not even Anthropic's
    least budget (1024) fits."""
    thinking, tokens = out.get("thinking"), out.get("max_tokens")
    budget = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
    if type(budget) is not int or type(tokens) is not int or budget < tokens:
        return
    if tokens > _LEAST_BUDGET:
        out["thinking"] = {**thinking, "budget_tokens": tokens - 1}
    else:
        del out["thinking"]


def thinking_sampling(out: dict[str, Any]) -> None:
    """The sampling of a request with thinking as Anthropic takes it: no `temperature`
    other than 1, no `top_k`, a `top_p` of at least 0.95."""
    if out.get("temperature") != 1:
        out.pop("temperature", None)
    out.pop("top_k", None)
    top_p = out.get("top_p")
    if isinstance(top_p, (int, float)) and top_p < 0.95:
        out["top_p"] = 0.95


class StreamedBlocks:
    """A Messages stream's thinking blocks as they come, each whole when it stops."""

    __slots__ = ("_open", "count")

    def __init__(self) -> None:
        self._open: dict[int, dict[str, Any]] = {}  # content block index -> the block so far
        self.count = 0  # thinking blocks finished so far

    def start(self, index: int, block: dict[str, Any]) -> None:
        if block.get("type") in THINKING_KINDS:
            self._open[index] = dict(block)

    def delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self._open.get(index)
        if block is None:
            return
        if delta.get("type") == "thinking_delta":
            block["thinking"] = str(block.get("thinking") or "") + str(delta.get("thinking", ""))
        elif delta.get("type") == "signature_delta":
            block["signature"] = str(delta.get("signature", ""))

    def stop(self, index: int) -> dict[str, Any] | None:
        """The `thinking_blocks` entry of a block that stopped (None: no signed thinking);
        its `index` counts the thinking blocks, as a chat stream's list entries want."""
        block = signed(self._open.pop(index, None))
        if block is None:
            return None
        entry = {"index": self.count, **block}
        self.count += 1
        return entry
