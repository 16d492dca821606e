"""The floor: a bare pass-through on the same stack as fleetgate, for comparison only.

Raw ASGI on uvicorn (uvloop, httptools), one aiohttp session, orjson: read the body, swap
the model name, POST it upstream, swap the name back in the answer (chunk by chunk for
streams). No routing, fallback, records, metrics or headers. What fleetgate costs above
this is its pipeline; what this costs is the server and client libraries.

Its loop is fleetgate's (`fleetgate.server.accept`: uvloop whose listeners accept every
waiting connection each turn), so a tail ratio compares like with like: on uvloop's own
one-accept-per-turn listener, a burst of new connections waits behind the open ones (the
floor's stream-c64 p99, median of 3 runs: 147 and 214 ms in two runs on uvloop's own
listener, 94 ms on this one; 2026-12-01).

Run: `python3 -m benchmarks.baseline --port 18092 --upstream http://127.0.0.1:18090`.
Model `X` goes to `{upstream}/v1/chat/completions` as `X` with `bench-model` replaced by
`upstream-bench`; `bench-model-paced` goes to `{upstream}/paced/v1/chat/completions`;
`bench-model-llama` goes to `{engine}/v1/chat/completions` (the real llama.cpp server,
`--engine`) as its alias `tiny-qwen2tok`.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import aiohttp
import orjson
import uvicorn


class Passthrough:
    def __init__(self, upstream: str, engine: str | None = None, stream_prefix: str = "") -> None:
        self.upstream = upstream.rstrip("/")
        self.engine = engine.rstrip("/") if engine else None
        self.stream_prefix = stream_prefix  # bench-peers' nginx streams under /sse/v1
        self.session: aiohttp.ClientSession | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    self.session = aiohttp.ClientSession(
                        connector=aiohttp.TCPConnector(limit=0, limit_per_host=0),  # no pool cap
                        skip_auto_headers=("User-Agent",),
                    )
                    await send({"type": "lifespan.startup.complete"})
                else:
                    if self.session is not None:
                        await self.session.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if scope["path"] == "/readyz":
            await self._send(send, 200, b'{"status":"ready"}', b"application/json")
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = orjson.loads(b"".join(chunks))
        client_model = body["model"]
        upstream_model = client_model.replace("bench-model", "upstream-bench")
        base = self.upstream
        if client_model == "bench-model-llama" and self.engine:
            base, upstream_model = self.engine, "tiny-qwen2tok"
        body["model"] = upstream_model
        prefix = "/paced" if client_model == "bench-model-paced" else ""
        if client_model == "bench-model-stream":
            prefix = self.stream_prefix
        old = b'"model":' + orjson.dumps(upstream_model)
        new = b'"model":' + orjson.dumps(client_model)
        assert self.session is not None
        async with self.session.post(
            f"{base}{prefix}/v1/chat/completions",
            data=orjson.dumps(body),
            headers={"Content-Type": "application/json"},
        ) as resp:
            content_type = resp.headers.get("Content-Type", "application/json")
            if not content_type.startswith("text/event-stream"):
                answer = (await resp.read()).replace(old, new)
                await self._send(send, resp.status, answer, content_type.encode())
                return
            await send(
                {
                    "type": "http.response.start",
                    "status": resp.status,
                    "headers": [(b"content-type", content_type.encode())],
                }
            )
            # a name split across two reads stays unrewritten: good enough for a floor
            async for chunk in resp.content.iter_any():
                await send(
                    {
                        "type": "http.response.body",
                        "body": chunk.replace(old, new),
                        "more_body": True,
                    }
                )
            await send({"type": "http.response.body", "body": b""})

    @staticmethod
    async def _send(send: Any, status: int, body: bytes, content_type: bytes) -> None:
        headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def app_from_env() -> Passthrough:
    """For `--workers N`: each worker builds its own pass-through."""
    return Passthrough(
        os.environ["BASELINE_UPSTREAM"],
        os.environ.get("BASELINE_ENGINE"),
        os.environ.get("BASELINE_STREAM_PREFIX", ""),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18092)
    parser.add_argument("--upstream", required=True, help="e.g. http://127.0.0.1:18090")
    parser.add_argument("--engine", help="the real llama.cpp server, for bench-model-llama")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--stream-prefix", default="", help="path prefix for bench-model-stream (e.g. /sse)"
    )
    args = parser.parse_args(argv)
    options: dict[str, Any] = {
        "host": args.host,
        "port": args.port,
        "loop": "fleetgate.server.accept:new_event_loop",  # uvloop, accepting as fleetgate
        "http": "httptools",
        "lifespan": "on",
        "access_log": False,
        "log_level": "warning",
    }
    if args.workers > 1:
        os.environ["BASELINE_UPSTREAM"] = args.upstream
        if args.engine:
            os.environ["BASELINE_ENGINE"] = args.engine
        os.environ["BASELINE_STREAM_PREFIX"] = args.stream_prefix
        app = "benchmarks.baseline:app_from_env"
        uvicorn.run(app, factory=True, workers=args.workers, **options)
        return
    uvicorn.run(Passthrough(args.upstream, args.engine, args.stream_prefix), **options)


if __name__ == "__main__":
    main()
