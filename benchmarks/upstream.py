"""A fake OpenAI-compatible upstream that costs almost no CPU (raw asyncio protocol, httptools).

Answers from prebuilt bytes, so a benchmark measures the gateway in front of it, not it:

- `POST …/chat/completions` → a fixed ~370-byte `chat.completion` JSON.
- the same with `"stream": true` in the body (or under a `/sse` prefix) → `text/event-stream`,
  chunked: 20 `chat.completion.chunk` events, a usage chunk and `data: [DONE]`, all at once.
- under a `/paced` prefix (or every stream, with `--pace-streams`) → the same stream, one
  event per write, `--gap-ms` apart, so a gateway has to handle each event on its own
  instead of one coalesced read.
- with `--delay-ms N`, every chat answer leaves N ms after its request, the upstream idle
  meanwhile, as a real engine is to everything but its own compute (`engine_latency.py
  --upstream fake --fake-delay-ms N` tells the engine's idle wait from its compute).
- `GET …/models` → a model list; `GET /_stats` → requests seen per upstream model name.

The `model` of every answer is the one the request named (each name's answers are built once),
like a real engine, so a gateway's model-name rewriting in both directions is exercised.

Run: `python3 -m benchmarks.upstream --port 18090 [--cpu 0] [--chunks 20] [--gap-ms 1]
[--delay-ms 0]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
from collections.abc import Mapping

import httptools
import orjson

CREATED = 1700000000
_MODEL_RE = re.compile(rb'"model"\s*:\s*"((?:[^"\\]|\\.){1,200})"')
_STREAM_RE = re.compile(rb'"stream"\s*:\s*true')
_MAX_MODELS = 256  # answers cached per model name; more names than that reuse "unknown"


def completion(model: str) -> bytes:
    return orjson.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": CREATED,
            "model": model,
            "system_fingerprint": "fp_bench",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": "bench-ok: the quick brown fox jumps over the lazy dog.",
                        "refusal": None,
                    },
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 12, "completion_tokens": 12, "total_tokens": 24},
        }
    )


def stream_events(model: str, chunks: int) -> list[bytes]:
    """`chunks` completion chunks (role, content…, finish), a usage chunk, then [DONE]."""

    def event(delta: dict[str, str], finish: str | None = None, usage: bool = False) -> bytes:
        body: dict[str, object] = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "system_fingerprint": "fp_bench",
            "choices": []
            if usage
            else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if usage:
            body["usage"] = {"prompt_tokens": 12, "completion_tokens": 12, "total_tokens": 24}
        return b"data: " + orjson.dumps(body) + b"\n\n"

    words = ["bench-ok"] + ["tok"] * max(chunks, 1)
    events = [event({"role": "assistant", "content": ""})]
    events += [event({"content": words[i] + " "}) for i in range(max(chunks - 2, 0))]
    events.append(event({}, finish="stop"))
    events.append(event({}, usage=True))
    events.append(b"data: [DONE]\n\n")
    return events


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _head(status: bytes, content_type: bytes, length: int | None) -> bytes:
    framing = b"Transfer-Encoding: chunked" if length is None else b"Content-Length: %d" % length
    extra = b"Cache-Control: no-cache\r\n" if content_type == b"text/event-stream" else b""
    return b"HTTP/1.1 %s\r\nContent-Type: %s\r\n%s%s\r\n\r\n" % (
        status,
        content_type,
        extra,
        framing,
    )


def _json_response(body: bytes, status: bytes = b"200 OK") -> bytes:
    return _head(status, b"application/json", len(body)) + body


_NOT_FOUND = _json_response(
    b'{"error":{"message":"not found","type":"invalid_request_error"}}', b"404 Not Found"
)
_BAD_REQUEST = _json_response(
    b'{"error":{"message":"bad request","type":"invalid_request_error"}}', b"400 Bad Request"
)
_SSE_HEAD = _head(b"200 OK", b"text/event-stream", None)
_LAST_CHUNK = b"0\r\n\r\n"


class Answers:
    """Prebuilt response bytes per model name, plus counters."""

    def __init__(
        self, chunks: int, gap: float, delay: float = 0.0, pace_streams: bool = False
    ) -> None:
        self.chunks = chunks
        # every stream paced, whatever its path (a data plane sends the client's `/v1` path)
        self.pace_streams = pace_streams
        self.gap = gap
        self.delay = delay
        self.requests = 0
        self.per_model: dict[str, int] = {}
        self._plain: dict[bytes, bytes] = {}
        self._stream: dict[bytes, bytes] = {}
        self._paced: dict[bytes, list[bytes]] = {}

    @staticmethod
    def _key(cache: Mapping[bytes, object], raw: bytes) -> bytes:
        # a client sending endless distinct names must not grow the caches without bound
        return raw if len(cache) < _MAX_MODELS else b"unknown"

    def plain(self, raw: bytes) -> bytes:
        answer = self._plain.get(raw)
        if answer is None:
            raw = self._key(self._plain, raw)
            answer = self._plain.setdefault(
                raw, _json_response(completion(raw.decode("utf-8", "replace")))
            )
        return answer

    def stream(self, raw: bytes) -> bytes:
        answer = self._stream.get(raw)
        if answer is None:
            raw = self._key(self._stream, raw)
            answer = self._stream.setdefault(raw, b"".join(self.paced(raw)))
        return answer

    def paced(self, raw: bytes) -> list[bytes]:
        """The stream as HTTP pieces: head + first event, then one chunk per event."""
        parts = self._paced.get(raw)
        if parts is None:
            raw = self._key(self._paced, raw)
            events = stream_events(raw.decode("utf-8", "replace"), self.chunks)
            parts = [_SSE_HEAD + _chunk(events[0])]
            parts += [_chunk(e) for e in events[1:]]
            parts[-1] += _LAST_CHUNK
            parts = self._paced.setdefault(raw, parts)
        return parts

    def count(self, raw: bytes) -> None:
        self.requests += 1
        name = raw.decode("utf-8", "replace")
        self.per_model[name] = self.per_model.get(name, 0) + 1

    def stats(self) -> bytes:
        return _json_response(orjson.dumps({"requests": self.requests, "models": self.per_model}))

    def models(self) -> bytes:
        data = [
            {"id": name, "object": "model", "created": CREATED, "owned_by": "bench"}
            for name in ("bench-model", "bench-model-stream")
        ]
        return _json_response(orjson.dumps({"object": "list", "data": data}))


class Connection(asyncio.Protocol):
    """One keep-alive client connection; httptools calls the on_* methods while parsing."""

    def __init__(self, answers: Answers) -> None:
        self.answers = answers
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.write(_BAD_REQUEST)
            self.transport.close()

    # ---- httptools callbacks --------------------------------------------------------
    def on_message_begin(self) -> None:
        self.url = b""
        self.body = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        method = self.parser.get_method()
        path = self.url.partition(b"?")[0]
        if method == b"POST" and path.endswith(b"/chat/completions"):
            body = b"".join(self.body)
            match = _MODEL_RE.search(body)
            model = match.group(1) if match else b"unknown"
            self.answers.count(model)
            if path.startswith(b"/paced/") or (
                self.answers.pace_streams and _STREAM_RE.search(body)
            ):
                self._paced(self.answers.paced(model), 0)
                return
            if path.startswith(b"/sse/") or _STREAM_RE.search(body):
                answer = self.answers.stream(model)
            else:
                answer = self.answers.plain(model)
            if self.answers.delay:
                self._paced([answer], 0, self.answers.delay)
                return
            transport.write(answer)
        elif method == b"GET" and path.endswith(b"/models"):
            transport.write(self.answers.models())
        elif method == b"GET" and path == b"/_stats":
            transport.write(self.answers.stats())
        else:
            transport.write(_NOT_FOUND)
        if not self.parser.should_keep_alive():
            transport.close()

    def _paced(self, parts: list[bytes], index: int, wait: float = 0.0) -> None:
        if wait:  # the first part leaves after `wait`
            asyncio.get_running_loop().call_later(wait, self._paced, parts, index)
            return
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.write(parts[index])
        if index + 1 < len(parts):
            asyncio.get_running_loop().call_later(self.answers.gap, self._paced, parts, index + 1)
        elif not self.parser.should_keep_alive():
            transport.close()


async def serve(host: str, port: int, answers: Answers) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Connection(answers), host, port, backlog=4096, reuse_address=True
    )
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18090)
    parser.add_argument("--chunks", type=int, default=20, help="completion chunks per stream")
    parser.add_argument("--gap-ms", type=float, default=1.0, help="event gap under /paced")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="each chat answer's wait")
    parser.add_argument("--cpu", type=int, default=None, help="pin to this CPU")
    parser.add_argument("--pace-streams", action="store_true", help="pace every stream")
    args = parser.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    try:
        import uvloop
    except ImportError:  # plain asyncio still works, only slower
        uvloop = None
    answers = Answers(args.chunks, args.gap_ms / 1000, args.delay_ms / 1000, args.pace_streams)
    coro = serve(args.host, args.port, answers)
    try:
        if uvloop is not None:
            uvloop.run(coro)
        else:
            asyncio.run(coro)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
