"""Small hostile upstreams for the security tests: real aiohttp servers on loopback."""

from __future__ import annotations

from aiohttp import web


class Redirector:
    """Answers every request with a redirect to the same path on `target`."""

    def __init__(self, target: str, status: int = 302) -> None:
        self.target = target
        self.status = status
        self.hits: list[str] = []
        self.port = 0
        self._runner: web.ServerRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        self.hits.append(request.path)
        await request.read()
        return web.Response(status=self.status, headers={"Location": self.target + request.path_qs})

    async def start(self) -> None:
        self._runner = web.ServerRunner(web.Server(self._handle), handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
