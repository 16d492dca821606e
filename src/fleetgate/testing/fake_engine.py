"""A fake OpenAI-compatible inference engine: a real aiohttp HTTP server on loopback.

Used as the demo's backends and as the upstreams of the test suite. It speaks the
OpenAI API under ``/v1`` (chat completions, completions, embeddings, models, and the
Responses API ``/v1/responses``), the Anthropic Messages API ``/v1/messages`` as vLLM
serves it, plus vLLM's ``POST /tokenize`` at the root, and can inject faults on demand.

Deterministic token rule (tests depend on it):

* ``prompt_tokens`` = number of whitespace-separated words in all text of the request:
  each message's ``content`` (a string, or the ``text`` of ``text`` / ``input_text`` /
  ``output_text`` parts), ``prompt``, ``input`` (a string, a list of strings, or a list of
  Responses input items, each counted as a message), ``system`` and ``instructions``,
  plus 1 per message.
* ``completion_tokens`` = ``reply_words``, capped by ``max_tokens`` /
  ``max_completion_tokens`` / ``max_output_tokens`` when given (``finish_reason`` is then
  ``"length"``; Anthropic ``stop_reason`` ``"max_tokens"``, Responses ``"incomplete"``).
* The reply text is ``f"{name} says:"`` followed by `` w1 w2 ... wN`` with
  N = ``completion_tokens``. A stream sends the prefix as the first content chunk
  (which also carries the role) and then one chunk per word, so a stream has
  ``completion_tokens + 1`` content chunks, one finish chunk, a usage chunk when
  ``stream_options.include_usage`` is true, then ``data: [DONE]``. Messages and Responses
  streams are named events (``event: ...``), one text delta per piece, without ``[DONE]``.
* Context enforcement: ``prompt_tokens + (max_tokens or max_completion_tokens or 0)
  > context_window`` is answered with the ``error_style`` engine's context-length 400.
  On ``/v1/messages`` every error is wrapped as vLLM does it:
  ``{"type": "error", "error": {"type": <the engine's type>, "message": ...}}``.

Tools: a chat request with ``tools`` (and ``tool_choice`` not ``"none"``) is answered with
``tool_calls`` calls (default 1), cycling through the tools; each call's arguments give
every declared property the value ``"a<i>"`` (``{}`` without properties). A stream sends
each call's id and name, then its arguments in two pieces.

``missing_paths`` are answered 404, as by a host that lacks those endpoints.

Timing: ``latency`` is awaited before every JSON answer of the inference endpoints
(success or error); ``ttft`` after the stream's headers and before its first event;
``1 / tokens_per_second`` between stream events; ``linger`` after a stream's last event
and before its body ends (llama.cpp ends its body a moment after ``[DONE]``, and a client
that has its ``[DONE]`` may leave first). ``tokenize_delay`` delays ``/tokenize``.
:meth:`FakeEngine.hold` keeps those JSON answers, and streams after their headers, waiting
until :meth:`FakeEngine.release` (from any thread), so a test can keep a request in flight
for exactly as long as it needs.

Load: ``GET /metrics`` answers vLLM's load gauges (``vllm:num_requests_waiting``,
``vllm:num_requests_running``, ``vllm:kv_cache_usage_perc``) from :attr:`FakeEngine.load`
(running defaults to the requests in progress); ``metrics_redirect`` makes it a 302 there
instead. These polls are counted in ``metrics_calls``, not kept in ``requests``.

Faults (:class:`Fault`) either persist (:meth:`FakeEngine.set_fault`) or are queued for
the next N inference requests (:meth:`FakeEngine.fail_next`). A persistent ``status``,
``reset`` or ``hang`` fault hits every endpoint (the engine looks down); the other kinds
only hit the inference endpoints. The kinds, each a fault a real engine or network shows:

* ``status``: an error answer with ``status`` (and ``Retry-After``), in the endpoint's shape;
* ``reset``: the connection drops before any answer; ``hang``: no answer, ever;
* ``slow_first_byte``: a 200 head at once, then nothing for ``delay`` seconds, then the
  normal answer;
* ``break_stream`` / ``stall_stream``: the answer stops after ``after_chunks`` stream
  events (a whole-body answer: after its head and half its bytes); the connection then
  drops (``break_stream``) or stays open and silent (``stall_stream``);
* ``invalid_json``: a 200 whose body, or whose stream event after ``after_chunks`` good
  ones, is not JSON;
* ``context_error``, ``bad_request``: the engine's context-length 400, or a plain 400;
* ``error_mid_stream``: a stream that sends ``after_chunks`` good events, then an error
  event (``message`` and ``status``, in ``error_style``'s shape) and ends, as an engine
  that fails while it generates;
* ``stream_error_event``: a 200 stream whose first event is an error: the context-length
  error, or with ``message`` set that message with ``status``, in ``error_style``'s shape
  (SGLang's ``{"object": "error", ...}``, nested under ``"error"`` in a stream).

A refused connection is a stopped engine: :meth:`FakeEngine.stop` keeps the port, and
nothing listens on it until :meth:`FakeEngine.start`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, NoReturn, cast

import orjson
from aiohttp import web

from fleetgate.testing.protocol_shapes import (
    Event,
    anthropic_answer,
    anthropic_error,
    responses_answer,
    responses_error_event,
)

FaultKind = Literal[
    "status",
    "reset",
    "hang",
    "slow_first_byte",
    "break_stream",
    "stall_stream",
    "invalid_json",
    "context_error",
    "bad_request",
    "stream_error_event",
    "error_mid_stream",
]
ErrorStyle = Literal["vllm", "sglang", "llamacpp", "openai"]
_ERROR_STYLES = ("vllm", "sglang", "llamacpp", "openai")
_ENGINE_DOWN_KINDS = ("status", "reset", "hang")
_INFERENCE_PATHS = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completion",
    "/v1/embeddings": "embedding",
    "/v1/messages": "messages",
    "/v1/responses": "responses",
}
_EVENT_KINDS = ("messages", "responses")  # named SSE events, no [DONE]


@dataclass(frozen=True)
class Fault:
    """A failure the engine injects instead of answering normally."""

    kind: FaultKind
    status: int = 503
    retry_after: float | None = None  # seconds, sent as the Retry-After header
    # break/stall_stream, invalid_json, error_mid_stream: good events sent first
    after_chunks: int = 3
    message: str | None = None
    delay: float = 0.0  # slow_first_byte: seconds between the head and the first byte


@dataclass
class ReceivedRequest:
    """One request as the engine received it; ``time`` is ``time.monotonic()``."""

    path: str
    method: str
    headers: dict[str, str]
    body: Any
    time: float


@dataclass
class _Call:
    """Per-request state: whether the engine itself dropped the connection."""

    aborted: bool = False


@dataclass
class _Reply:
    """What an inference request is answered with (before shaping per endpoint)."""

    model: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    tool_name: str | None = None
    # every tool call of the turn: (name, JSON arguments)
    calls: list[tuple[str, str]] = field(default_factory=list)
    created: int = field(default_factory=lambda: int(time.time()))
    rid: str = field(default_factory=lambda: uuid.uuid4().hex[:24])
    cached_tokens: int | None = None  # of the prompt, read from a cache (reported when set)

    @property
    def usage(self) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }
        if self.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return usage


def _texts(value: Any) -> list[str]:
    """The strings in a ``prompt``/``input`` value or a message ``content``."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        return []
    out: list[str] = []
    for item in value:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict) and item.get("type") == "text":
            text = item.get("text")
            if isinstance(text, str):
                out.append(text)
    return out


def _content_texts(value: Any) -> list[str]:
    """`_texts`, plus the Responses API's ``input_text`` / ``output_text`` parts."""
    out = _texts(value)
    if isinstance(value, list):
        for part in value:
            if isinstance(part, dict) and part.get("type") in ("input_text", "output_text"):
                text = part.get("text")
                if isinstance(text, str):
                    out.append(text)
    return out


def count_prompt_tokens(body: Mapping[str, Any]) -> int:
    """Prompt tokens of a request body under the module's deterministic token rule."""
    texts: list[str] = []
    messages = body.get("messages")
    items = body.get("input")
    if not (isinstance(items, list) and any(isinstance(i, dict) for i in items)):
        texts += _texts(items)
        items = []
    n_messages = 0
    for group in (messages, items):  # chat/Anthropic messages, Responses input items
        if isinstance(group, list):
            for message in group:
                n_messages += 1
                if isinstance(message, dict):
                    texts += _content_texts(message.get("content"))
    for key in ("prompt", "system", "instructions"):
        texts += _texts(body.get(key))
    return n_messages + sum(len(t.split()) for t in texts)


def requested_completion_tokens(body: Mapping[str, Any]) -> int:
    """``max_tokens or max_completion_tokens or max_output_tokens or 0``."""
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def _arguments(parameters: Any, i: int) -> str:
    """A call's JSON arguments: `"a<i>"` for each declared property (none: `{}`)."""
    props = parameters.get("properties") if isinstance(parameters, dict) else None
    if not isinstance(props, dict) or not props:
        return "{}"
    return orjson.dumps({name: f"a{i}" for name in props}).decode()


def _error(message: str, err_type: str, code: int | str) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": None, "code": code}}


def context_exceeded_error(
    style: ErrorStyle, limit: int, prompt: int, completion: int
) -> dict[str, Any]:
    """The body an engine of ``style`` answers (with status 400) to an over-long request."""
    total = prompt + completion
    if style == "vllm":
        message = (
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{total} tokens ({prompt} in the messages, {completion} in the completion). "
            "Please reduce the length of the messages or completion."
        )
        return _error(message, "BadRequestError", 400)
    if style == "sglang":  # SGLang's ErrorResponse is flat, not nested under "error"
        if prompt >= limit:
            message = (
                f"The input ({prompt} tokens) is longer than the model's context length "
                f"({limit} tokens)."
            )
        else:
            message = (
                "Requested token count exceeds the model's maximum context length of "
                f"{limit} tokens. You requested a total of {total} tokens: {prompt} tokens "
                f"from the input messages and {completion} tokens for the completion. Please "
                "reduce the number of tokens in the input messages or the completion to fit "
                "within the limit."
            )
        return {
            "object": "error",
            "message": message,
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    if style == "llamacpp":
        message = (
            f"request ({prompt} tokens) exceeds the available context size ({limit} tokens), "
            "try increasing it"
        )
        return {
            "error": {
                "code": 400,
                "message": message,
                "type": "exceed_context_size_error",
                "n_prompt_tokens": prompt,
                "n_ctx": limit,
            }
        }
    if completion:
        message = (
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{total} tokens ({prompt} in the messages, {completion} in the completion). "
            "Please reduce the length of the messages or completion."
        )
    else:
        message = (
            f"This model's maximum context length is {limit} tokens. However, your messages "
            f"resulted in {prompt} tokens. Please reduce the length of the messages."
        )
    body = _error(message, "invalid_request_error", "context_length_exceeded")
    body["error"]["param"] = "messages"
    return body


_MALFORMED = _error("Malformed JSON: the body must be a JSON object", "BadRequestError", 400)


def _embedding(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [round(b / 127.5 - 1.0, 6) for b in digest[:8]]


async def _forever() -> NoReturn:
    """Wait until cancelled (by the client going away, or by ``stop()``)."""
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


def _sse(payload: Any, name: str | None = None) -> bytes:
    head = b"event: " + name.encode() + b"\n" if name else b""
    return head + b"data: " + orjson.dumps(payload) + b"\n\n"


def _in_protocol(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """An error body as the endpoint answers it: vLLM wraps it for the Messages API."""
    if kind != "messages":
        return body
    err = body.get("error", body)
    return anthropic_error(str(err.get("type", "BadRequestError")), str(err.get("message")))


class FakeEngine:
    """A fake inference engine serving the OpenAI API on ``url`` + ``/v1``."""

    def __init__(
        self,
        name: str,
        *,
        context_window: int = 8192,
        latency: float = 0.0,
        ttft: float = 0.0,
        tokens_per_second: float | None = None,
        reply_words: int = 8,
        error_style: str = "vllm",
        served_model: str = "fake-model",
        tool_calls: int = 1,
        missing_paths: tuple[str, ...] = (),
        answer_model: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if error_style not in _ERROR_STYLES:
            raise ValueError(f"error_style must be one of {_ERROR_STYLES}, got {error_style!r}")
        self.name = name
        self.context_window = context_window
        self.latency = latency
        self.ttft = ttft
        self.tokens_per_second = tokens_per_second
        self.linger = 0.0  # seconds between a stream's last event and the end of its body
        self.reply_words = reply_words
        self.error_style = cast(ErrorStyle, error_style)
        self.served_model = served_model
        self.tool_calls = tool_calls  # tool calls in one turn, when the request has tools
        self.missing_paths = frozenset(missing_paths)  # answered 404, as a host without them
        # the `model` answers carry; None echoes the request's (vLLM answers with its first
        # served name whatever alias was asked, so a gateway cannot rely on an echo)
        self.answer_model = answer_model
        self.host = host
        self.port = port
        self.tokenize_delay = 0.0
        # prompt tokens each answer says its cache served (`prompt_tokens_details`); None: no
        # such detail, as most engines answer
        self.cached_tokens: int | None = None
        # headers every answer carries besides its own (a `Set-Cookie`, say)
        self.response_headers: dict[str, str] = {}
        self.load: dict[str, float] = {}  # waiting / running / kv_cache, as /metrics says
        self.metrics_redirect: str | None = None
        self.metrics_calls = 0
        self.requests: list[ReceivedRequest] = []
        self.tokenize_calls = 0
        self.active = 0
        self.cancelled = 0
        self._fault: Fault | None = None
        self._queued: deque[Fault] = deque()
        self._every: tuple[int, Fault] | None = None
        self._inference_count = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._runner: web.ServerRunner | None = None
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._held: asyncio.Event | None = None

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:41234`` (the OpenAI API lives under /v1)."""
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        """Listen on ``host:port``; a restart after ``stop()`` reuses the bound port."""
        server = web.Server(self._dispatch, handler_cancellation=True)
        self._runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        self.port = self._runner.addresses[0][1]
        self._stopping = False
        self._loop = asyncio.get_running_loop()

    async def stop(self) -> None:
        """Close the listener and every connection; in-flight handlers are cancelled."""
        if self._runner is None:
            return
        self._stopping = True
        for task in list(self._tasks):
            task.cancel()
        await self._runner.cleanup()
        self._runner = None

    async def __aenter__(self) -> FakeEngine:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- fault control -----------------------------------------------------------------

    def set_fault(self, fault: Fault | None) -> None:
        """Apply ``fault`` to every request from now on (``None`` clears it)."""
        self._fault = fault

    def fail_next(self, fault: Fault, count: int = 1) -> None:
        """Apply ``fault`` to the next ``count`` inference requests (any ``/v1`` POST)."""
        self._queued.extend([fault] * count)

    def fail_every(self, n: int, fault: Fault | None) -> None:
        """Apply ``fault`` to every ``n``-th inference request (None stops)."""
        self._every = (n, fault) if fault is not None else None
        self._inference_count = 0

    def hold(self) -> None:
        """Keep every JSON answer of the inference endpoints, and every stream after its
        headers, waiting from now on, until :meth:`release`."""
        if self._held is None:
            self._held = asyncio.Event()

    def release(self) -> None:
        """Let the held answers go (and the later ones pass); safe from any thread."""
        held, self._held = self._held, None
        if held is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(held.set)

    def reset_counters(self) -> None:
        """Forget received requests, counters and queued faults."""
        self.requests.clear()
        self.tokenize_calls = 0
        self.cancelled = 0
        self._queued.clear()

    def _take_fault(self, inference: bool) -> Fault | None:
        if inference and self._queued:
            return self._queued.popleft()
        if inference and self._every is not None:
            self._inference_count += 1
            if self._inference_count % self._every[0] == 0:
                return self._every[1]
        fault = self._fault
        if fault is not None and (inference or fault.kind in _ENGINE_DOWN_KINDS):
            return fault
        return None

    # -- dispatch ----------------------------------------------------------------------

    async def _dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.method == "GET" and request.path == "/metrics":
            return self._metrics()
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.active += 1
        call = _Call()
        try:
            raw = await request.read()
            body: Any = None
            malformed = False
            if raw:
                try:
                    body = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    malformed = True
            self.requests.append(
                ReceivedRequest(
                    request.path, request.method, dict(request.headers), body, time.monotonic()
                )
            )
            return await self._route(request, body, malformed, call)
        except (asyncio.CancelledError, ConnectionError):
            if not call.aborted and not self._stopping:
                self.cancelled += 1
            raise
        finally:
            self.active -= 1
            self._tasks.discard(task)

    async def _route(
        self, request: web.BaseRequest, body: Any, malformed: bool, call: _Call
    ) -> web.StreamResponse:
        kind = _INFERENCE_PATHS.get(request.path) if request.method == "POST" else None
        if request.path in self.missing_paths:
            kind = None
        if kind is not None:
            fault = self._take_fault(inference=True)
            return await self._inference(request, kind, body, malformed, fault, call)
        route = (request.method, request.path)
        if route not in (("GET", "/v1/models"), ("POST", "/tokenize"), ("GET", "/health")):
            message = f"Not Found: {request.method} {request.path}"
            return web.json_response(_error(message, "NotFoundError", 404), status=404)
        fault = self._take_fault(inference=False)
        if fault is not None:
            return await self._apply_fault(request, fault, "", {}, call)
        if request.path == "/v1/models":
            return self._models()
        if request.path == "/health":  # as vLLM and llama.cpp answer it
            return web.json_response({"status": "ok"})
        return await self._tokenize(body, malformed)

    # -- endpoints ---------------------------------------------------------------------

    def _metrics(self) -> web.Response:
        self.metrics_calls += 1
        if self.metrics_redirect is not None:
            return web.Response(status=302, headers={"Location": self.metrics_redirect})
        label = f'{{model_name="{self.served_model}"}}'
        gauges = {
            "vllm:num_requests_waiting": self.load.get("waiting", 0.0),
            "vllm:num_requests_running": self.load.get("running", float(self.active)),
            "vllm:kv_cache_usage_perc": self.load.get("kv_cache", 0.0),
        }
        text = "".join(
            f"# HELP {name} {name}\n# TYPE {name} gauge\n{name}{label} {value}\n"
            for name, value in gauges.items()
        )
        return web.Response(text=text, content_type="text/plain")

    def _models(self) -> web.Response:
        model = {
            "id": self.served_model,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "fake",
            "max_model_len": self.context_window,
        }
        return web.json_response({"object": "list", "data": [model]})

    async def _tokenize(self, body: Any, malformed: bool) -> web.Response:
        self.tokenize_calls += 1
        if malformed or not isinstance(body, dict):
            return web.json_response(_MALFORMED, status=400)
        await asyncio.sleep(self.tokenize_delay)
        count = count_prompt_tokens(body)
        return web.json_response(
            {"count": count, "max_model_len": self.context_window, "tokens": list(range(count))}
        )

    async def _inference(
        self,
        request: web.BaseRequest,
        kind: str,
        body: Any,
        malformed: bool,
        fault: Fault | None,
        call: _Call,
    ) -> web.StreamResponse:
        body = body if isinstance(body, dict) else {}
        if fault is not None:
            return await self._apply_fault(request, fault, kind, body, call)
        if malformed or not body:
            return await self._json(400, _MALFORMED)
        prompt = count_prompt_tokens(body)
        requested = requested_completion_tokens(body)
        if prompt + requested > self.context_window:
            error = context_exceeded_error(self.error_style, self.context_window, prompt, requested)
            return await self._json(400, _in_protocol(kind, error))
        if kind == "embedding":
            return await self._embeddings(body, prompt)
        reply = self._reply(body, kind, prompt, requested)
        if body.get("stream"):
            return await self._stream(request, kind, body, reply, call)
        return await self._json(200, self._whole_answer(kind, reply))

    def _whole_answer(self, kind: str, reply: _Reply) -> dict[str, Any]:
        if kind in _EVENT_KINDS:
            return self._answer(kind, reply)[0]
        return self._completion_body(kind, reply)

    def _reply(self, body: Mapping[str, Any], kind: str, prompt: int, requested: int) -> _Reply:
        completion = min(self.reply_words, requested) if requested else self.reply_words
        finish = "length" if completion < self.reply_words else "stop"
        tool_name = None
        calls: list[tuple[str, str]] = []
        tools = body.get("tools")
        if (
            kind == "chat"
            and isinstance(tools, list)
            and tools
            and body.get("tool_choice") != "none"
        ):
            function = tools[0].get("function", {}) if isinstance(tools[0], dict) else {}
            tool_name = str(function.get("name", "tool"))
            for i in range(self.tool_calls):
                tool = tools[i % len(tools)]
                fn = tool.get("function", {}) if isinstance(tool, dict) else {}
                calls.append((str(fn.get("name", "tool")), _arguments(fn.get("parameters"), i)))
            finish = "tool_calls"
        model = self.answer_model or str(body.get("model") or self.served_model)
        reply = _Reply(model, prompt, completion, finish, tool_name, calls)
        if self.cached_tokens is not None:
            reply.cached_tokens = min(self.cached_tokens, prompt)
        return reply

    def _pieces(self, reply: _Reply) -> list[str]:
        return [f"{self.name} says:"] + [f" w{i}" for i in range(1, reply.completion_tokens + 1)]

    def _envelope(self, kind: str, reply: _Reply, chunk: bool) -> dict[str, Any]:
        if kind == "chat":
            obj, prefix = ("chat.completion.chunk" if chunk else "chat.completion"), "chatcmpl"
        else:
            obj, prefix = "text_completion", "cmpl"
        return {
            "id": f"{prefix}-{reply.rid}",
            "object": obj,
            "created": reply.created,
            "model": reply.model,
            "system_fingerprint": f"fake-{self.name}",
            "fake_engine": self.name,
        }

    def _tool_calls(self, reply: _Reply) -> list[dict[str, Any]]:
        return [
            {
                "id": f"call_{reply.rid}_{i}",
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
            for i, (name, arguments) in enumerate(reply.calls)
        ]

    def _completion_body(self, kind: str, reply: _Reply) -> dict[str, Any]:
        text = "".join(self._pieces(reply))
        choice: dict[str, Any] = {
            "index": 0,
            "logprobs": None,
            "finish_reason": reply.finish_reason,
        }
        if kind == "completion":
            choice["text"] = text
        elif reply.tool_name is not None:
            choice["message"] = {
                "role": "assistant",
                "content": None,
                "tool_calls": self._tool_calls(reply),
            }
        else:
            choice["message"] = {"role": "assistant", "content": text}
        return {
            **self._envelope(kind, reply, chunk=False),
            "choices": [choice],
            "usage": reply.usage,
        }

    def _answer(self, kind: str, reply: _Reply) -> tuple[dict[str, Any], list[Event]]:
        """The Messages or Responses body and stream of ``reply``."""
        pieces = self._pieces(reply)
        tokens = (reply.prompt_tokens, reply.completion_tokens, reply.finish_reason)
        if kind == "messages":
            return anthropic_answer(f"msg_{reply.rid}", reply.model, pieces, *tokens)
        rid, mid = f"resp_{reply.rid}", f"msg_{reply.rid}"
        return responses_answer(rid, mid, reply.model, pieces, *tokens)

    def _stream_events(self, kind: str, body: Mapping[str, Any], reply: _Reply) -> list[Event]:
        if kind in _EVENT_KINDS:
            return self._answer(kind, reply)[1]

        def event(choice: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
            choices = [] if choice is None else [{"index": 0, "logprobs": None, **choice}]
            return {**self._envelope(kind, reply, chunk=True), "choices": choices, **extra}

        events: list[dict[str, Any]] = []
        if kind == "completion":
            for piece in self._pieces(reply):
                events.append(event({"text": piece, "finish_reason": None}))
            events.append(event({"text": "", "finish_reason": reply.finish_reason}))
        elif reply.tool_name is not None:
            # each call: its id and name, then its arguments in two pieces (as engines do)
            for i, call in enumerate(self._tool_calls(reply)):
                arguments = call["function"]["arguments"]
                half = len(arguments) // 2
                head = {**call, "function": {"name": call["function"]["name"], "arguments": ""}}
                delta = {"tool_calls": [{"index": i, **head}]}
                if i == 0:
                    delta = {"role": "assistant", "content": None, **delta}
                events.append(event({"delta": delta, "finish_reason": None}))
                for piece in (arguments[:half], arguments[half:]):
                    part = {"index": i, "function": {"arguments": piece}}
                    events.append(event({"delta": {"tool_calls": [part]}, "finish_reason": None}))
            events.append(event({"delta": {}, "finish_reason": reply.finish_reason}))
        else:
            for i, piece in enumerate(self._pieces(reply)):
                delta = {"role": "assistant", "content": piece} if i == 0 else {"content": piece}
                events.append(event({"delta": delta, "finish_reason": None}))
            events.append(event({"delta": {}, "finish_reason": reply.finish_reason}))
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            events.append(event(None, usage=reply.usage))
        return [(None, e) for e in events]

    async def _stream(
        self,
        request: web.BaseRequest,
        kind: str,
        body: Mapping[str, Any],
        reply: _Reply,
        call: _Call,
        fault: Fault | None = None,
    ) -> web.StreamResponse:
        resp = await self._open_stream(request)
        if self._held is not None:
            await self._held.wait()
        await asyncio.sleep(fault.delay if fault is not None else self.ttft)
        gap = 1.0 / self.tokens_per_second if self.tokens_per_second else 0.0
        cut = fault is not None and fault.kind in ("break_stream", "stall_stream")
        at = fault.after_chunks if fault is not None else -1
        for i, (name, payload) in enumerate(self._stream_events(kind, body, reply)):
            if i == at and cut:
                await self._cut(request, fault, call)
            if i and gap:
                await asyncio.sleep(gap)
            if i == at and fault is not None and fault.kind == "error_mid_stream":
                message = fault.message or f"{self.name}: injected fault mid-stream"
                await resp.write(self._error_event(kind, self._engine_error(message, fault.status)))
                await resp.write_eof()
                return resp
            if i == at and fault is not None and fault.kind == "invalid_json":
                await resp.write(b"data: " + repr(payload).encode() + b"\n\n")
                continue
            await resp.write(_sse(payload, name))
        if cut:
            await self._cut(request, fault, call)
        if kind not in _EVENT_KINDS:
            await resp.write(b"data: [DONE]\n\n")
        if self.linger:
            await asyncio.sleep(self.linger)
        await resp.write_eof()
        return resp

    async def _embeddings(self, body: Mapping[str, Any], prompt: int) -> web.Response:
        answer = self._embeddings_body(body, prompt)
        if answer is None:
            return await self._json(
                400, _error("input must be a string or a list of strings", "BadRequestError", 400)
            )
        return await self._json(200, answer)

    def _embeddings_body(self, body: Mapping[str, Any], prompt: int) -> dict[str, Any] | None:
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else inputs
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return None
        data = [
            {"object": "embedding", "index": i, "embedding": _embedding(text)}
            for i, text in enumerate(texts)
        ]
        model = str(body.get("model") or self.served_model)
        usage = {"prompt_tokens": prompt, "total_tokens": prompt}
        return {"object": "list", "data": data, "model": model, "usage": usage}

    # -- faults and helpers ------------------------------------------------------------

    async def _apply_fault(
        self,
        request: web.BaseRequest,
        fault: Fault,
        kind: str,
        body: Mapping[str, Any],
        call: _Call,
    ) -> web.StreamResponse:
        prompt = count_prompt_tokens(body)
        requested = requested_completion_tokens(body)
        if fault.kind == "status":
            err_type = (
                "rate_limit_error"
                if fault.status == 429
                else "overloaded_error"
                if fault.status == 529
                else "server_error"
                if fault.status >= 500
                else "invalid_request_error"
            )
            message = fault.message or f"{self.name}: injected fault (HTTP {fault.status})"
            headers = {}
            if fault.retry_after is not None:
                headers["Retry-After"] = f"{fault.retry_after:g}"
            error = _in_protocol(kind, _error(message, err_type, fault.status))
            return await self._json(fault.status, error, headers=headers)
        if fault.kind == "hang":
            await _forever()
        if fault.kind == "context_error":
            error = context_exceeded_error(self.error_style, self.context_window, prompt, requested)
            return await self._json(400, _in_protocol(kind, error))
        if fault.kind == "bad_request":
            message = fault.message or "invalid parameter: the request was rejected by the engine"
            return await self._json(
                400, _in_protocol(kind, _error(message, "BadRequestError", 400))
            )
        if fault.kind == "stream_error_event" or (
            fault.kind == "error_mid_stream" and not body.get("stream")
        ):
            if fault.message is None:
                error = context_exceeded_error(
                    self.error_style, self.context_window, prompt, requested
                )
            else:
                error = self._engine_error(fault.message, fault.status)
            if not body.get("stream"):  # the same failure, as the engine answers it whole
                return await self._json(fault.status, _in_protocol(kind, error))
            resp = await self._open_stream(request)
            await asyncio.sleep(self.ttft)
            await resp.write(self._error_event(kind, error))
            await resp.write_eof()
            return resp
        if fault.kind == "reset":
            await self._drop_connection(request, call)
        # the answer itself goes wrong: slow, cut, stalled or not JSON
        if kind == "embedding":
            answer = self._embeddings_body(body, prompt) or {}
        else:
            reply = self._reply(body, kind, prompt, requested)
            if body.get("stream"):
                return await self._stream(request, kind, body, reply, call, fault)
            answer = self._whole_answer(kind, reply)
        return await self._faulty_body(request, answer, fault, call)

    async def _faulty_body(
        self, request: web.BaseRequest, answer: dict[str, Any], fault: Fault, call: _Call
    ) -> web.StreamResponse:
        """A whole-body 200 that goes wrong after its head (or is not JSON at all)."""
        data = repr(answer).encode() if fault.kind == "invalid_json" else orjson.dumps(answer)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.content_length = len(data)
        await resp.prepare(request)
        if fault.kind in ("break_stream", "stall_stream"):
            await resp.write(data[: len(data) // 2])
            await self._cut(request, fault, call)
        await asyncio.sleep(fault.delay)
        await resp.write(data)
        await resp.write_eof()
        return resp

    async def _cut(self, request: web.BaseRequest, fault: Fault, call: _Call) -> NoReturn:
        """End an answer midway: drop the connection, or leave it open and silent."""
        if fault.kind == "stall_stream":
            await _forever()
        await self._drop_connection(request, call)

    def _engine_error(self, message: str, status: int) -> dict[str, Any]:
        """A generic engine error in `error_style`'s shape."""
        err_type = (
            "BadRequestError"
            if status < 500
            else "overloaded_error"
            if status == 529
            else "InternalServerError"
        )
        if self.error_style == "sglang":  # flat, as SGLang's ErrorResponse
            return {
                "object": "error",
                "message": message,
                "type": err_type,
                "param": None,
                "code": status,
            }
        return _error(message, err_type, status)

    def _error_event(self, kind: str, error: dict[str, Any]) -> bytes:
        """An in-stream error event in the endpoint's own shape."""
        if kind == "messages":
            return _sse(_in_protocol(kind, error), "error")
        err = error.get("error", error)
        if kind == "responses":
            return _sse(
                responses_error_event(err.get("code", 400), err.get("message", "")), "error"
            )
        if self.error_style == "sglang":  # SGLang writes its events with json.dumps
            return b"data: " + json.dumps({"error": err}).encode() + b"\n\n"
        return _sse({"error": err})

    async def _drop_connection(self, request: web.BaseRequest, call: _Call) -> NoReturn:
        """Abort the TCP connection without a (complete) response."""
        call.aborted = True
        if request.transport is not None:
            request.transport.abort()
        await _forever()  # the connection loss cancels this handler

    async def _open_stream(self, request: web.BaseRequest) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                **self.response_headers,
            }
        )
        await resp.prepare(request)
        return resp

    async def _json(
        self, status: int, payload: Any, headers: Mapping[str, str] | None = None
    ) -> web.Response:
        if self._held is not None:
            await self._held.wait()
        await asyncio.sleep(self.latency)
        return web.Response(
            body=orjson.dumps(payload),
            status=status,
            content_type="application/json",
            headers={**self.response_headers, **(headers or {})},
        )
