"""Chat engines on loopback that report the stop that ended an answer as vLLM and SGLang do.

Both cut the reply before the first stop string they hold (the request's `stop`, and the
engine's own `template_stops`: SGLang's built-in chat templates add theirs) and name it
on the choice, whole or in the stream's finishing chunk; at the model's natural end they
name the end token's id (an int), or nothing:

* vLLM: `stop_reason`, the stop string, or an int for a stop token id (`eos_id`), else
  null; a stream's last content chunk carries `finish_reason` and `stop_reason` with it.
* SGLang: `matched_stop`, the stop string, or the EOS token's id; a stream ends with a
  chunk of its own, `delta: {}` with `finish_reason` and `matched_stop`.
* OpenAI: names nothing, refuses more than four stop sequences (a 400, as OpenAI's), and
  has no `/v1/messages` (a 404).

vLLM's own `/v1/messages` (an Anthropic client's native endpoint on a vllm provider) says
`end_turn` and no `stop_sequence` where a stop string ended the output, as vLLM does.
The engines keep the request bodies they were sent, per path.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from aiohttp import web

from tests.security.servers import _Upstream

Style = Literal["vllm", "sglang", "openai"]
_USAGE = {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}


def _sse(payload: dict[str, Any], name: str | None = None) -> bytes:
    head = f"event: {name}\n".encode() if name else b""
    return head + b"data: " + orjson.dumps(payload) + b"\n\n"


def _stops(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop") or body.get("stop_sequences") or []
    return [stop] if isinstance(stop, str) else list(stop)


class StoppingChat(_Upstream):
    """Chat completions (and vLLM's Messages) that stop at stop strings as `style` does."""

    def __init__(
        self,
        style: Style,
        pieces: list[str],
        *,
        template_stops: tuple[str, ...] = (),
        eos_id: int | None = 151645,
    ) -> None:
        super().__init__()
        self.style = style
        self.pieces = pieces
        self.template_stops = template_stops
        self.eos_id = eos_id
        self.bodies: dict[str, list[dict[str, Any]]] = {}

    def _cut(self, body: dict[str, Any]) -> tuple[list[str], str | int | None]:
        """The pieces sent before the first stop, and what the engine says matched."""
        text = "".join(self.pieces)
        found = [(text.find(s), s) for s in (*_stops(body), *self.template_stops) if s in text]
        if not found:
            return self.pieces, self.eos_id
        at, stop = min(found)
        out, seen = [], 0
        for piece in self.pieces:
            if seen + len(piece) >= at:
                out.append(piece[: at - seen])
                break
            out.append(piece)
            seen += len(piece)
        return [p for p in out if p], stop

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.bodies.setdefault(request.path, []).append(body)
        stops = _stops(body)
        if self.style == "openai" and request.path.endswith("/messages"):
            error = {
                "message": f"Invalid URL (POST {request.path})",
                "type": "invalid_request_error",
            }
            return web.Response(
                status=404, body=orjson.dumps({"error": error}), content_type="application/json"
            )
        if self.style == "openai" and len(stops) > 4:
            message = (
                "Invalid 'stop': array too long. Expected an array with maximum length 4, "
                f"but got an array with length {len(stops)} instead."
            )
            error = {
                "message": message,
                "type": "invalid_request_error",
                "param": "stop",
                "code": "array_above_max_length",
            }
            return web.Response(
                status=400, body=orjson.dumps({"error": error}), content_type="application/json"
            )
        pieces, matched = self._cut(body)
        if request.path.endswith("/messages"):
            return self._messages(body, pieces)
        if body.get("stream"):
            return web.Response(
                body=self._stream(body, pieces, matched), content_type="text/event-stream"
            )
        message = {"role": "assistant", "content": "".join(pieces)}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        if self.style != "openai":
            choice["stop_reason" if self.style == "vllm" else "matched_stop"] = matched
        answer = {**self._frame(body, "chat.completion"), "choices": [choice], "usage": _USAGE}
        return web.Response(body=orjson.dumps(answer), content_type="application/json")

    def _frame(self, body: dict[str, Any], kind: str) -> dict[str, Any]:
        return {"id": "chatcmpl-s", "object": kind, "created": 0, "model": body.get("model")}

    def _stream(self, body: dict[str, Any], pieces: list[str], matched: str | int | None) -> bytes:
        frame = self._frame(body, "chat.completion.chunk")
        choices: list[dict[str, Any]] = []
        for i, piece in enumerate(pieces):
            delta = {"role": "assistant", "content": piece} if i == 0 else {"content": piece}
            choices.append({"index": 0, "delta": delta, "finish_reason": None})
        if self.style == "openai":
            choices[-1]["finish_reason"] = "stop"
        elif self.style == "vllm":  # the last token's chunk says why it was the last
            for choice in choices:
                choice["stop_reason"] = None
            choices[-1].update(finish_reason="stop", stop_reason=matched)
        else:
            for choice in choices:
                choice["matched_stop"] = None
            choices.append(
                {"index": 0, "delta": {}, "finish_reason": "stop", "matched_stop": matched}
            )
        out = [_sse({**frame, "choices": [c]}) for c in choices]
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            out.append(_sse({**frame, "choices": [], "usage": _USAGE}))
        return b"".join(out) + b"data: [DONE]\n\n"

    def _messages(self, body: dict[str, Any], pieces: list[str]) -> web.Response:
        """vLLM's `/v1/messages`: `end_turn` at any stop, no stop sequence named."""
        usage = {"input_tokens": 5, "output_tokens": 6}
        message = {
            "id": "msg_s",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": [{"type": "text", "text": "".join(pieces)}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }
        if not body.get("stream"):
            return web.Response(body=orjson.dumps(message), content_type="application/json")
        start = {**message, "content": [], "stop_reason": None}
        events = [
            _sse({"type": "message_start", "message": start}, "message_start"),
            _sse(
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
                "content_block_start",
            ),
            *(
                _sse(
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": p},
                    },
                    "content_block_delta",
                )
                for p in pieces
            ),
            _sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
            _sse(
                {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": usage},
                "message_delta",
            ),
            _sse({"type": "message_stop"}, "message_stop"),
        ]
        return web.Response(body=b"".join(events), content_type="text/event-stream")
