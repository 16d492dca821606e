"""Repairs of native answers in which an engine gets a field of the protocol wrong.

llama.cpp's `/v1/messages` names the stop sequence that ended its output
(`"stop_sequence": "<it>"`) but says `"stop_reason": "end_turn"`, where Anthropic says
`"stop_sequence"`: a client that checks `stop_reason` (the SDK's own types document it)
takes the stop for the model's natural end. The repair is a byte substitution on the
answer and on each block of whole stream events: JSON escapes every quote inside a
string, so the pattern is the two keys themselves, never text.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

Repair = Callable[[bytes], bytes]

# as llama.cpp writes them (compact JSON, in this order), the stop sequence a string
_END_TURN_AT_STOP = b'"stop_reason":"end_turn","stop_sequence":"'
_STOP_SEQUENCE = b'"stop_reason":"stop_sequence","stop_sequence":"'


def llama_stop_reason(block: bytes) -> bytes:
    """llama.cpp's Messages answer or events, `stop_reason` set right at a stop sequence."""
    if _END_TURN_AT_STOP not in block:
        return block
    return block.replace(_END_TURN_AT_STOP, _STOP_SEQUENCE)


def asks_stop_sequences(body: dict[str, Any]) -> bool:
    """Whether an Anthropic request names stop sequences (else no answer names one)."""
    return bool(body.get("stop_sequences"))


async def repaired(upstream: AsyncIterator[bytes], repair: Repair) -> AsyncIterator[bytes]:
    """A native stream (blocks of whole events) with `repair` applied to each block."""
    try:
        async for block in upstream:
            yield repair(block)
    finally:
        closer = getattr(upstream, "aclose", None)
        if closer is not None:
            await closer()
