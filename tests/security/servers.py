"""Small hostile upstreams for the security tests: real aiohttp servers on loopback."""

from __future__ import annotations

import orjson
from aiohttp import web


class _Upstream:
    """An aiohttp server on a free loopback port answering every request with `_handle`."""

    def __init__(self) -> None:
        self.port = 0
        self._runner: web.ServerRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        raise NotImplementedError

    async def start(self) -> None:
        self._runner = web.ServerRunner(web.Server(self._handle), handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


class Redirector(_Upstream):
    """Answers every request with a redirect to the same path on `target`."""

    def __init__(self, target: str, status: int = 302) -> None:
        super().__init__()
        self.target = target
        self.status = status
        self.hits: list[str] = []

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        self.hits.append(request.path)
        await request.read()
        return web.Response(status=self.status, headers={"Location": self.target + request.path_qs})


class Echo(_Upstream):
    """A hostile upstream: answers every request with `status` and an OpenAI-shaped error
    whose message quotes every header it was sent (credentials included), after `pad`
    characters (so that a message cut at some length cuts through the first header)."""

    def __init__(self, status: int = 401, pad: int = 0) -> None:
        super().__init__()
        self.status = status
        self.pad = pad

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        await request.read()
        first = request.headers.get("Authorization") or request.headers.get("x-api-key", "")
        quoted = "; ".join(f"{k}={v}" for k, v in request.headers.items())
        message = f"rejected, you sent: {'.' * self.pad}{first}; {quoted}"
        return web.json_response(
            {"error": {"message": message, "type": "auth_error"}}, status=self.status
        )


class Scripted(_Upstream):
    """Answers every request with `answer`: (status, headers, body), set between requests."""

    def __init__(self) -> None:
        super().__init__()
        self.answer: tuple[int, dict[str, str], bytes] = (200, {}, b"{}")

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        await request.read()
        status, headers, body = self.answer
        return web.Response(status=status, headers=headers, body=body)


def chat_answer(usage: dict[str, object]) -> tuple[int, dict[str, str], bytes]:
    """A `Scripted` answer: a whole chat completion of model `m` whose usage says `usage`."""
    answer = {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": usage,
    }
    return 200, {"Content-Type": "application/json"}, orjson.dumps(answer)
