"""A fake Anthropic API: a real aiohttp server speaking the Messages wire format.

``POST /v1/messages`` (and ``/v1/messages/count_tokens``) as Anthropic answers them: the
request needs ``x-api-key`` (401 ``authentication_error`` otherwise), ``anthropic-version``,
``max_tokens`` and alternating ``user``/``assistant`` turns (400 ``invalid_request_error``).
The reply follows the token rule of :mod:`fleetgate.testing.fake_engine` (prompt tokens =
words of all text + 1 per message; ``f"{name} says:"`` and ``reply_words`` words, capped by
``max_tokens``). With ``tools`` (and ``tool_choice`` not ``none``) the answer is one
``tool_use`` block per tool, up to ``tool_calls``, each input giving every property the
value ``"a<i>"``. ``reply_pieces`` replaces the words: the text is their join, one output
token and one stream delta each. ``stop_sequences`` are honoured as Anthropic does: the
text ends before the first one it holds, ``stop_reason`` is ``"stop_sequence"`` and
``stop_sequence`` the one matched; a list that is not of strings, or a sequence that is
only whitespace, is a 400 (the real API's "each stop sequence must contain
non-whitespace"). Streams are Anthropic's events: ``message_start``, ``ping``, content
blocks with ``text_delta`` / ``input_json_delta`` (in two pieces), ``message_delta`` with
the usage, ``message_stop``.

Faults: ``overload_next(n)`` answers 529 ``overloaded_error``; a prompt over
``context_window`` is 400 "prompt is too long: N tokens > M maximum".
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson
from aiohttp import web

from fleetgate.testing.fake_engine import ReceivedRequest, _texts


def _error(status: int, kind: str, message: str) -> web.Response:
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def _words(content: Any) -> int:
    n = sum(len(t.split()) for t in _texts(content))
    for block in content if isinstance(content, list) else ():
        if isinstance(block, dict) and block.get("type") == "tool_result":
            n += _words(block.get("content"))
    return n


def prompt_tokens(body: dict[str, Any]) -> int:
    messages = body.get("messages") or []
    return (
        len(messages) + _words(body.get("system")) + sum(_words(m.get("content")) for m in messages)
    )


def _input(tool: dict[str, Any], i: int) -> dict[str, Any]:
    schema = tool.get("input_schema")
    props = schema.get("properties") if isinstance(schema, dict) else None
    return {name: f"a{i}" for name in props} if isinstance(props, dict) else {}


def _cut(pieces: list[str], at: int) -> list[str]:
    """The pieces of the first `at` characters of their join (the last one cut short)."""
    kept: list[str] = []
    for piece in pieces:
        if at <= 0:
            break
        kept.append(piece[:at])
        at -= len(piece)
    return kept


class FakeAnthropic:
    """A fake Anthropic API on ``url`` (Messages under ``/v1``)."""

    def __init__(
        self,
        name: str,
        *,
        reply_words: int = 8,
        tool_calls: int = 1,
        reply_pieces: list[str] | None = None,
        context_window: int = 200_000,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.name = name
        self.reply_words = reply_words
        self.tool_calls = tool_calls
        self.reply_pieces = reply_pieces
        self.context_window = context_window
        self.host = host
        self.port = port
        self.requests: list[ReceivedRequest] = []
        # prompt tokens each answer says were read from the cache (`cache_read_input_tokens`,
        # apart from `input_tokens` as Anthropic reports them); 0: not reported
        self.cache_read = 0
        self._overloads = 0
        self._runner: web.ServerRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        server = web.Server(self._dispatch, handler_cancellation=True)
        self._runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def overload_next(self, count: int = 1) -> None:
        self._overloads += count

    async def _dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            return _error(400, "invalid_request_error", "Request body is not valid JSON")
        self.requests.append(
            ReceivedRequest(
                request.path, request.method, dict(request.headers), body, time.monotonic()
            )
        )
        if request.method != "POST" or request.path not in (
            "/v1/messages",
            "/v1/messages/count_tokens",
        ):
            return _error(404, "not_found_error", f"Not found: {request.path}")
        if not request.headers.get("x-api-key"):
            return _error(401, "authentication_error", "x-api-key header is required")
        if not request.headers.get("anthropic-version"):
            return _error(400, "invalid_request_error", "anthropic-version header is required")
        problem = self._invalid(body, count=request.path.endswith("count_tokens"))
        if problem:
            return _error(400, "invalid_request_error", problem)
        prompt = prompt_tokens(body)
        if request.path.endswith("count_tokens"):
            return web.json_response({"input_tokens": prompt})
        if self._overloads:
            self._overloads -= 1
            return _error(529, "overloaded_error", "Overloaded")
        if prompt > self.context_window:
            return _error(
                400,
                "invalid_request_error",
                f"prompt is too long: {prompt} tokens > {self.context_window} maximum",
            )
        message, pieces = self._answer(body, prompt)
        if body.get("stream"):
            return await self._stream(request, message, pieces)
        return web.json_response(message)

    def _invalid(self, body: dict[str, Any], count: bool) -> str | None:
        if not isinstance(body.get("model"), str):
            return "model: Field required"
        if not count and (type(body.get("max_tokens")) is not int or body["max_tokens"] < 1):
            return "max_tokens: Field required"
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return "messages: at least one message is required"
        for i, message in enumerate(messages):
            role = message.get("role") if isinstance(message, dict) else None
            if role not in ("user", "assistant"):
                return f"messages.{i}.role: Input should be 'user' or 'assistant'"
            if i and messages[i - 1].get("role") == role:
                return "messages: roles must alternate between user and assistant"
            content = message.get("content")
            if isinstance(content, list):
                for block in content:
                    if not isinstance(block, dict) or "type" not in block:
                        return f"messages.{i}.content: each block needs a type"
        if messages[0].get("role") != "user":
            return "messages: the first message must use the user role"
        stops = body.get("stop_sequences")
        if stops is not None:
            if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
                return "stop_sequences: Input should be a valid list of strings"
            if any(not s.strip() for s in stops):
                return "stop_sequences: each stop sequence must contain non-whitespace"
        system = body.get("system")
        if system is not None and not isinstance(system, (str, list)):
            return "system: Input should be a valid string or list"
        return None

    def _reply(self, budget: int) -> tuple[list[str], int, str]:
        """(the text deltas of the reply, its output tokens, its stop reason)."""
        if self.reply_pieces is not None:
            kept = self.reply_pieces[:budget]
            full = len(kept) == len(self.reply_pieces)
            return kept, len(kept), "end_turn" if full else "max_tokens"
        words = min(self.reply_words, budget)
        head, *rest = (f"{self.name} says:" + "".join(f" w{i}" for i in range(1, words + 1))).split(
            " "
        )
        pieces = [head, *(" " + w for w in rest)]
        return pieces, words, "max_tokens" if words < self.reply_words else "end_turn"

    def _answer(self, body: dict[str, Any], prompt: int) -> tuple[dict[str, Any], list[str]]:
        """The message, and the text deltas of its stream."""
        pieces, words, stop = self._reply(body["max_tokens"])
        text = "".join(pieces)
        found = [(text.find(s), s) for s in body.get("stop_sequences") or () if s in text]
        matched = None
        if found:
            at, matched = min(found)
            text, stop = text[:at], "stop_sequence"
            pieces = _cut(pieces, at)
            words = min(words, len(pieces))
        content: list[dict[str, Any]] = [{"type": "text", "text": text}]
        tools = body.get("tools") or []
        choice = body.get("tool_choice") or {}
        if tools and choice.get("type") != "none":
            content = [
                {
                    "type": "tool_use",
                    "id": f"toolu_{uuid.uuid4().hex[:20]}",
                    "name": tools[i % len(tools)]["name"],
                    "input": _input(tools[i % len(tools)], i),
                }
                for i in range(self.tool_calls)
            ]
            stop = "tool_use"
        return {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": stop,
            "stop_sequence": matched,
            "usage": self._usage(prompt, words),
        }, pieces

    def _usage(self, prompt: int, words: int) -> dict[str, int]:
        if not self.cache_read:
            return {"input_tokens": prompt, "output_tokens": words}
        cached = min(self.cache_read, prompt)
        return {
            "input_tokens": prompt - cached,
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0,
            "output_tokens": words,
        }

    async def _stream(
        self, request: web.BaseRequest, message: dict[str, Any], pieces: list[str]
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def send(kind: str, payload: dict[str, Any]) -> None:
            data = orjson.dumps({"type": kind, **payload})
            await resp.write(b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n")

        usage = message["usage"]
        start = {**message, "content": [], "stop_reason": None}
        start["usage"] = {**usage, "output_tokens": 1}
        await send("message_start", {"message": start})
        await send("ping", {})
        for index, block in enumerate(message["content"]):
            if block["type"] == "text":
                await send(
                    "content_block_start",
                    {"index": index, "content_block": {"type": "text", "text": ""}},
                )
                for piece in pieces:
                    delta = {"type": "text_delta", "text": piece}
                    await send("content_block_delta", {"index": index, "delta": delta})
            else:
                opened = {**block, "input": {}}
                await send("content_block_start", {"index": index, "content_block": opened})
                arguments = orjson.dumps(block["input"]).decode()
                half = len(arguments) // 2
                for piece in (arguments[:half], arguments[half:]):
                    delta = {"type": "input_json_delta", "partial_json": piece}
                    await send("content_block_delta", {"index": index, "delta": delta})
            await send("content_block_stop", {"index": index})
        delta = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
        await send(
            "message_delta", {"delta": delta, "usage": {"output_tokens": usage["output_tokens"]}}
        )
        await send("message_stop", {})
        await resp.write_eof()
        return resp
