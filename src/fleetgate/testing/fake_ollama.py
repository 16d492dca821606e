"""A fake Ollama worker: a real aiohttp HTTP server speaking Ollama's native and compatible APIs.

Native: ``POST /api/chat``, ``/api/generate`` (NDJSON streams unless ``"stream": false``),
``/api/embed``, ``/api/embeddings``, ``/api/show``, ``GET /api/tags``, ``/api/ps``,
``/api/version``.
Compatible: ``POST /v1/chat/completions`` (SSE), ``/v1/messages`` (Anthropic events),
``/v1/responses`` (Responses events), ``GET /v1/models``.

Context, as Ollama does it: a request runs with ``options.num_ctx`` when it gives one, else
with the context the model is loaded with (``loaded``), else the Modelfile's ``num_ctx``,
else ``default_num_ctx``; never more than the model's maximum. The request loads the model
with that context (``/api/ps`` then shows it). A prompt longer than the context is *silently
truncated*: the answer is a normal 200 whose ``prompt_eval_count`` (or ``prompt_tokens`` /
``input_tokens``) equals the context.

Token rule (as :mod:`fleetgate.testing.fake_engine`): prompt tokens = whitespace-separated
words in all text (messages, system, prompt, input, instructions) + 1 per message; the
reply is ``f"{name} says:"`` and ``reply_words`` words ``w1 … wN`` (capped by
``num_predict`` / ``max_tokens`` / ``max_output_tokens``), streamed one word per event.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from fleetgate.testing.fake_engine import ReceivedRequest, _embedding, _texts
from fleetgate.testing.protocol_shapes import anthropic_answer, responses_answer

VERSION = "0.12.6"


@dataclass
class OllamaModel:
    """A model the worker has pulled."""

    name: str
    max_context: int = 131072  # model_info["<arch>.context_length"]
    num_ctx: int | None = None  # PARAMETER num_ctx in the Modelfile
    arch: str = "llama"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime())


def _part_texts(content: Any) -> list[str]:
    """Texts of a content value: a string, or parts typed text / input_text / output_text."""
    if isinstance(content, list):
        out = _texts(content)
        for part in content:
            if isinstance(part, dict) and part.get("type") in ("input_text", "output_text"):
                text = part.get("text")
                if isinstance(text, str):
                    out.append(text)
        return out
    return _texts(content)


def prompt_words(body: Mapping[str, Any]) -> int:
    """Prompt tokens of any request body this worker serves (the module's token rule)."""
    texts: list[str] = []
    n = 0
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            n += 1
            if isinstance(message, dict):
                texts += _part_texts(message.get("content"))
    items = body.get("input")
    if isinstance(items, list) and any(isinstance(i, dict) for i in items):
        for item in items:
            if isinstance(item, dict):
                n += 1
                texts += _part_texts(item.get("content"))
    else:
        texts += _texts(items)
    for key in ("prompt", "system", "instructions"):
        texts += _part_texts(body.get(key))
    return n + sum(len(t.split()) for t in texts)


class FakeOllama:
    """A fake Ollama worker on ``url`` (native API at the root, compatible API under /v1)."""

    def __init__(
        self,
        name: str,
        models: list[OllamaModel | str] | None = None,
        *,
        loaded: Mapping[str, int] | None = None,
        default_num_ctx: int = 4096,
        reply_words: int = 8,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.name = name
        given = models if models is not None else ["llama3.2"]
        self.models = {
            m.name: m for m in (OllamaModel(m) if isinstance(m, str) else m for m in given)
        }
        self.loaded: dict[str, int] = dict(loaded or {})
        self.default_num_ctx = default_num_ctx
        self.reply_words = reply_words
        self.host = host
        self.port = port
        self.requests: list[ReceivedRequest] = []
        self.active = 0
        self.down = False  # every request is answered 500
        self._faults: deque[tuple[int, str]] = deque()
        self._stream_errors: deque[str] = deque()
        self._breaks: deque[int] = deque()
        self._gate: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.ServerRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        server = web.Server(self._dispatch, handler_cancellation=True)
        self._runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._gate is not None:
            self._gate.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- control (callable from any thread) --------------------------------------------

    def fail_next(self, status: int = 500, message: str = "injected fault", count: int = 1) -> None:
        """Answer the next ``count`` inference requests with ``{"error": message}``."""
        self._faults.extend([(status, message)] * count)

    def stream_error_next(self, message: str = "model runner crashed", count: int = 1) -> None:
        """Answer the next ``count`` native streams with 200 and one ``{"error": …}`` line."""
        self._stream_errors.extend([message] * count)

    def break_stream_next(self, after_events: int = 3) -> None:
        """Drop the connection of the next stream (any API) after ``after_events`` events."""
        self._breaks.append(after_events)

    def hold(self) -> None:
        """Keep inference requests waiting (in flight) until :meth:`release`."""
        self._gate = asyncio.Event()

    def release(self) -> None:
        gate, self._gate = self._gate, None
        if gate is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(gate.set)

    def _take_break(self) -> int | None:
        return self._breaks.popleft() if self._breaks else None

    def inference_requests(self) -> list[ReceivedRequest]:
        return [r for r in self.requests if r.method == "POST" and r.path != "/api/show"]

    # -- dispatch ----------------------------------------------------------------------

    async def _dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            return _json(400, {"error": "invalid character in JSON body"})
        self.requests.append(
            ReceivedRequest(
                request.path, request.method, dict(request.headers), body, time.monotonic()
            )
        )
        if self.down:
            return _json(500, {"error": f"{self.name} is down"})
        route = (request.method, request.path)
        if route == ("GET", "/api/version"):
            return _json(200, {"version": VERSION})
        if route == ("GET", "/api/tags"):
            return _json(200, {"models": [self._tag(m) for m in self.models.values()]})
        if route == ("GET", "/api/ps"):
            return _json(200, {"models": [self._ps(n, c) for n, c in self.loaded.items()]})
        if route == ("GET", "/v1/models"):
            data = [
                {"id": n, "object": "model", "created": 0, "owned_by": "library"}
                for n in self.models
            ]
            return _json(200, {"object": "list", "data": data})
        if route == ("POST", "/api/show"):
            return self._show(body)
        handler = _INFERENCE.get(request.path) if request.method == "POST" else None
        if handler is None:
            return web.Response(status=404, text="404 page not found")
        model = self.models.get(str(body.get("model")))
        if model is None:
            message = f'model "{body.get("model")}" not found, try pulling it first'
            if request.path.startswith("/api/"):
                return _json(404, {"error": message})
            return _json(404, {"error": {"message": message, "type": "not_found_error"}})
        self.active += 1
        try:
            if self._faults:
                status, message = self._faults.popleft()
                if request.path.startswith("/api/"):
                    return _json(status, {"error": message})
                return _json(status, {"error": {"message": message, "type": "api_error"}})
            if self._gate is not None:
                await self._gate.wait()
            return await handler(self, request, body, model)
        finally:
            self.active -= 1

    # -- model facts -------------------------------------------------------------------

    def _details(self, model: OllamaModel) -> dict[str, Any]:
        return {
            "parent_model": "",
            "format": "gguf",
            "family": model.arch,
            "families": [model.arch],
            "parameter_size": "8.0B",
            "quantization_level": "Q4_K_M",
        }

    def _tag(self, model: OllamaModel) -> dict[str, Any]:
        return {
            "name": model.name,
            "model": model.name,
            "modified_at": _now(),
            "size": 4_900_000_000,
            "digest": uuid.uuid5(uuid.NAMESPACE_DNS, model.name).hex,
            "details": self._details(model),
        }

    def _ps(self, name: str, context: int) -> dict[str, Any]:
        model = self.models.get(name) or OllamaModel(name)
        return {
            **self._tag(model),
            "expires_at": "2099-01-01T00:00:00Z",
            "size_vram": 4_900_000_000,
            "context_length": context,
        }

    def _show(self, body: dict[str, Any]) -> web.Response:
        name = body.get("model") or body.get("name")
        model = self.models.get(str(name))
        if model is None:
            return _json(404, {"error": f"model '{name}' not found"})
        params = ['stop                           "<|eot_id|>"']
        if model.num_ctx is not None:
            params.insert(0, f"num_ctx                        {model.num_ctx}")
        info = {
            "general.architecture": model.arch,
            "general.parameter_count": 8_000_000_000,
            f"{model.arch}.context_length": model.max_context,
            f"{model.arch}.embedding_length": 4096,
        }
        return _json(
            200,
            {
                "license": "",
                "modelfile": f"FROM {model.name}\n",
                "parameters": "\n".join(params),
                "template": "{{ .Prompt }}",
                "details": self._details(model),
                "model_info": info,
                "capabilities": ["completion", "tools"],
                "modified_at": _now(),
            },
        )

    def context_for(self, model: OllamaModel, body: Mapping[str, Any]) -> int:
        """The context this request runs with; loads the model with it."""
        options = body.get("options") if isinstance(body.get("options"), dict) else {}
        asked = options.get("num_ctx") if isinstance(options, dict) else None
        if isinstance(asked, int) and asked > 0:
            ctx = asked
        elif model.name in self.loaded:
            ctx = self.loaded[model.name]
        else:
            ctx = model.num_ctx or self.default_num_ctx
        ctx = min(ctx, model.max_context)
        self.loaded[model.name] = ctx
        return ctx

    def _run(self, model: OllamaModel, body: Mapping[str, Any]) -> tuple[int, list[str]]:
        """(prompt tokens as reported, reply pieces) — prompt tokens silently truncated."""
        ctx = self.context_for(model, body)
        prompt = min(prompt_words(body), ctx)
        limit = None
        options = body.get("options")
        if isinstance(options, dict) and isinstance(options.get("num_predict"), int):
            limit = options["num_predict"]
        for key in ("max_tokens", "max_output_tokens", "max_completion_tokens"):
            if isinstance(body.get(key), int):
                limit = body[key]
        words = self.reply_words if limit is None or limit < 0 else min(limit, self.reply_words)
        return prompt, [f"{self.name} says:"] + [f" w{i}" for i in range(1, words + 1)]

    # -- native endpoints --------------------------------------------------------------

    async def _native(
        self, request: web.BaseRequest, body: dict[str, Any], model: OllamaModel, key: str
    ) -> web.StreamResponse:
        if body.get("stream", True) is not False and self._stream_errors:
            resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
            await resp.prepare(request)
            await resp.write(orjson.dumps({"error": self._stream_errors.popleft()}) + b"\n")
            await resp.write_eof()
            return resp
        prompt, pieces = self._run(model, body)
        stats = {
            "done_reason": "stop",
            "total_duration": 1000,
            "load_duration": 10,
            "prompt_eval_count": prompt,
            "prompt_eval_duration": 100,
            "eval_count": len(pieces) - 1,
            "eval_duration": 800,
        }
        name = model.name

        def part(text: str) -> dict[str, Any]:
            if key == "message":
                return {"message": {"role": "assistant", "content": text}}
            return {"response": text}

        final: dict[str, Any] = {
            "model": name,
            "created_at": _now(),
            **part(""),
            "done": True,
            **stats,
        }
        if key == "response":
            final["context"] = [1, 2, 3]
        if body.get("stream", True) is False:
            final.update(part("".join(pieces)))
            return _json(200, final)
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)
        cut = self._breaks.popleft() if self._breaks else None
        for i, piece in enumerate(pieces):
            if i == cut:
                await _drop(request)
            line = {"model": name, "created_at": _now(), **part(piece), "done": False}
            await resp.write(orjson.dumps(line) + b"\n")
        await resp.write(orjson.dumps(final) + b"\n")
        await resp.write_eof()
        return resp

    async def _chat(
        self, request: web.BaseRequest, body: dict[str, Any], model: OllamaModel
    ) -> web.StreamResponse:
        return await self._native(request, body, model, "message")

    async def _generate(
        self, request: web.BaseRequest, body: dict[str, Any], model: OllamaModel
    ) -> web.StreamResponse:
        return await self._native(request, body, model, "response")

    async def _embed(
        self, request: web.BaseRequest, body: dict[str, Any], model: OllamaModel
    ) -> web.StreamResponse:
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
        prompt, _ = self._run(model, body)
        return _json(
            200,
            {
                "model": model.name,
                "embeddings": [_embedding(str(t)) for t in texts],
                "total_duration": 1000,
                "load_duration": 10,
                "prompt_eval_count": prompt,
            },
        )

    async def _embeddings(
        self, request: web.BaseRequest, body: dict[str, Any], model: OllamaModel
    ) -> web.StreamResponse:
        """The older `/api/embeddings`: one prompt, its vector alone (empty: none)."""
        prompt = body.get("prompt")
        return _json(200, {"embedding": _embedding(str(prompt)) if prompt else []})

    # -- compatible endpoints ----------------------------------------------------------

    async def _openai_chat(
        self, request: web.BaseRequest, body: dict[str, Any], model: OllamaModel
    ) -> web.StreamResponse:
        prompt, pieces = self._run(model, body)
        rid, created = f"chatcmpl-{uuid.uuid4().hex[:8]}", int(time.time())
        head = {
            "id": rid,
            "created": created,
            "model": model.name,
            "system_fingerprint": "fp_ollama",
        }
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": len(pieces) - 1,
            "total_tokens": prompt + len(pieces) - 1,
        }
        if not body.get("stream"):
            message = {"role": "assistant", "content": "".join(pieces)}
            return _json(
                200,
                {
                    **head,
                    "object": "chat.completion",
                    "usage": usage,
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                },
            )
        events: list[tuple[str | None, Any]] = []
        for piece in pieces:
            choice = {
                "index": 0,
                "delta": {"role": "assistant", "content": piece},
                "finish_reason": None,
            }
            events.append((None, {**head, "object": "chat.completion.chunk", "choices": [choice]}))
        events.append(
            (
                None,
                {
                    **head,
                    "object": "chat.completion.chunk",
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": ""},
                            "finish_reason": "stop",
                        }
                    ],
                },
            )
        )
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            events.append(
                (None, {**head, "object": "chat.completion.chunk", "choices": [], "usage": usage})
            )
        return await _sse(request, events, True, self._take_break())

    async def _messages(
        self, request: web.BaseRequest, body: dict[str, Any], model: OllamaModel
    ) -> web.StreamResponse:
        prompt, pieces = self._run(model, body)
        message, events = anthropic_answer(
            f"msg_{uuid.uuid4().hex[:12]}", model.name, pieces, prompt, len(pieces) - 1, "stop"
        )
        if not body.get("stream"):
            return _json(200, message)
        return await _sse(request, list(events), False, self._take_break())

    async def _responses(
        self, request: web.BaseRequest, body: dict[str, Any], model: OllamaModel
    ) -> web.StreamResponse:
        prompt, pieces = self._run(model, body)
        answer, events = responses_answer(
            f"resp_{uuid.uuid4().hex[:12]}",
            f"msg_{uuid.uuid4().hex[:12]}",
            model.name,
            pieces,
            prompt,
            len(pieces) - 1,
            "stop",
        )
        if not body.get("stream"):
            return _json(200, answer)
        return await _sse(request, list(events), False, self._take_break())


_INFERENCE = {
    "/api/chat": FakeOllama._chat,
    "/api/generate": FakeOllama._generate,
    "/api/embed": FakeOllama._embed,
    "/api/embeddings": FakeOllama._embeddings,
    "/v1/chat/completions": FakeOllama._openai_chat,
    "/v1/messages": FakeOllama._messages,
    "/v1/responses": FakeOllama._responses,
}


def _json(status: int, payload: Any) -> web.Response:
    return web.Response(body=orjson.dumps(payload), status=status, content_type="application/json")


async def _drop(request: web.BaseRequest) -> None:
    """Abort the connection mid-answer; the connection loss cancels the handler."""
    if request.transport is not None:
        request.transport.abort()
    await asyncio.Event().wait()


async def _sse(
    request: web.BaseRequest,
    events: list[tuple[str | None, Any]],
    done: bool,
    cut: int | None = None,
) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for i, (name, payload) in enumerate(events):
        if i == cut:
            await _drop(request)
        head = b"event: " + name.encode() + b"\n" if name else b""
        await resp.write(head + b"data: " + orjson.dumps(payload) + b"\n\n")
    if done:
        await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp
