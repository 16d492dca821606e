"""`fleetgate demo`: a simulated fleet of fake engines with the gateway in front of it."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import socket
import tempfile
from typing import Any

import aiohttp
import orjson

from fleetgate.assemble import build_gateway
from fleetgate.config import validate_config
from fleetgate.control.plane import ControlOptions
from fleetgate.server.run import server_for
from fleetgate.store.database import data_dir
from fleetgate.testing import FakeEngine, Fault

ENGINES: dict[str, dict[str, Any]] = {
    # name -> FakeEngine settings
    "flaky": {"context_window": 8192, "reply_words": 12},
    "steady": {"context_window": 8192, "reply_words": 12, "latency": 0.02},
    "long": {"context_window": 65536, "reply_words": 12, "latency": 0.05},
    "embedder": {"context_window": 8192},
}


def demo_config(urls: dict[str, str], host: str, port: int) -> dict[str, Any]:
    return {
        "server": {"host": host, "port": port},
        "providers": [
            {
                "id": name,
                "kind": "vllm",
                "base_url": url + "/v1",
                "timeouts": {"connect": 2, "first_byte": 10, "total": 60},
            }
            for name, url in urls.items()
        ],
        "deployments": [
            {
                "id": "flaky",
                "model": "demo-chat",
                "provider": "flaky",
                "upstream_model": "sim/llama-8b-a",
                "context_window": 8192,
                "priority": 0,
                "price": {"input": 0.05, "output": 0.10},
            },
            {
                "id": "steady",
                "model": "demo-chat",
                "provider": "steady",
                "upstream_model": "sim/llama-8b-b",
                "context_window": 8192,
                "priority": 1,
                "price": {"input": 0.08, "output": 0.16},
            },
            {
                "id": "long",
                "model": "demo-chat",
                "provider": "long",
                "upstream_model": "sim/llama-8b-long",
                "context_window": 65536,
                "tier": "long",
                # the window decides first, then priority: the 8k hosts take what they hold
                "priority": 2,
                "price": {"input": 0.30, "output": 0.60},
            },
            {
                "id": "embedder",
                "model": "demo-embed",
                "provider": "embedder",
                "upstream_model": "sim/embed-small",
                "context_window": 8192,
            },
        ],
        "virtual_models": [
            {
                "name": "support-bot",
                "routes": [
                    {"deployment": "steady", "params": {"temperature": 0.2, "max_tokens": 256}},
                    {"deployment": "long", "params": {"temperature": 0.3}},
                ],
            },
        ],
        "models": [
            {"id": "demo-chat", "owned_by": "fleetgate-demo"},
            {"id": "demo-embed", "owned_by": "fleetgate-demo"},
        ],
    }


def _sample_bodies() -> list[tuple[str, dict[str, Any]]]:
    short = [{"role": "user", "content": "Say hello."}]
    long = [{"role": "user", "content": "Summarise this: " + "lorem ipsum " * 8000}]
    return [
        ("demo-chat", {"model": "demo-chat", "messages": short}),
        ("demo-chat", {"model": "demo-chat", "messages": short}),
        ("demo-chat", {"model": "demo-chat", "messages": short}),
        ("demo-chat, ~100 KB prompt", {"model": "demo-chat", "messages": long}),
        ("support-bot (virtual)", {"model": "support-bot", "messages": short}),
    ]


async def _sample_requests(base: str) -> list[str]:
    """Send a few requests so the newcomer sees routing and a fallback right away."""
    lines = []
    async with aiohttp.ClientSession() as session:
        for i, (label, body) in enumerate(_sample_bodies(), 1):
            async with session.post(base + "/v1/chat/completions", json=body) as resp:
                data = await resp.read()
                h = resp.headers
                model = orjson.loads(data).get("model") if resp.status == 200 else "-"
                note = ""
                if h.get("x-fleetgate-fallback-count", "0") != "0":
                    note = "  <- fallback: 'flaky' answered 503, the chain moved on"
                elif h.get("x-fleetgate-context-tier") == "long":
                    note = (
                        f"  <- too big for 8k: long-context tier "
                        f"(estimate {h.get('x-fleetgate-context-estimate')})"
                    )
                elif h.get("x-fleetgate-virtual-model"):
                    note = "  <- virtual model: its first route, with its own temperature"
                lines.append(
                    f"  #{i} {label} -> {resp.status}, answered by "
                    f"{h.get('x-fleetgate-route')} (attempts {h.get('x-fleetgate-attempts')}, "
                    f"model in body {model!r}){note}"
                )
    return lines


def _instructions(base: str, samples: list[str], admin_key: str) -> str:
    return f"""
fleetgate demo — gateway on {base}, in front of {len(ENGINES)} simulated engines
  model demo-chat  -> deployment 'flaky' (8k window, priority 0; answers 503 to every
                      2nd request), then 'steady' (8k, priority 1): the fallback;
                      'long' (64k window, tier long, priority 2) takes what the 8k
                      hosts can't hold
  support-bot      -> a virtual model: 'steady' (temperature 0.2), then 'long'
  model demo-embed -> deployment 'embedder'

Requests sent just now:
{chr(10).join(samples)}

Try it:
  curl -s {base}/v1/models
  curl -si {base}/v1/chat/completions -H 'content-type: application/json' \\
       -d '{{"model":"demo-chat","messages":[{{"role":"user","content":"hi"}}]}}'
  curl -s {base}/v1/routing/explain -H 'content-type: application/json' \\
       -d '{{"model":"demo-chat","messages":[{{"role":"user","content":"hi"}}]}}'
  python3 -c "from openai import OpenAI; c = OpenAI(base_url='{base}/v1', api_key='x'); \\
print(c.chat.completions.create(model='demo-chat', \\
messages=[{{'role': 'user', 'content': 'hi'}}]).choices[0].message.content)"

The dashboard: {base}/ui  (sign in with the admin key {admin_key})
  the fleet with windows and health, every request above with its attempts (the
  fallback, the long-context one), explain, keys and charts.

The admin API (docs at {base}/admin/docs) and the request log:
  curl -s {base}/admin/fleet -H 'Authorization: Bearer {admin_key}'
  curl -s '{base}/admin/requests?limit=5' -H 'Authorization: Bearer {admin_key}'

Response headers X-Fleetgate-Route / -Attempts / -Fallback-Count show how each request was
routed. Ctrl-C stops the demo.
"""


async def _run(host: str, port: int) -> int:
    engines = {name: FakeEngine(name, **kw) for name, kw in ENGINES.items()}
    for engine in engines.values():
        await engine.start()
    engines["flaky"].fail_every(2, Fault("status", status=503))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        print(
            f"fleetgate demo: cannot listen on {host}:{port}: {exc.strerror}. "
            "Pick another port with --port (0 picks a free one)."
        )
        return 1
    port = sock.getsockname()[1]
    config, problems = validate_config(
        demo_config({n: e.url for n, e in engines.items()}, host, port)
    )
    assert config is not None, problems
    # the demo's engines get new ports each run, so its store is fresh each run too: a
    # SQLite file in a temporary directory under the data directory, removed at exit
    base_dir = data_dir()
    base_dir.mkdir(parents=True, exist_ok=True)
    store_dir = tempfile.TemporaryDirectory(dir=base_dir, prefix="demo-")
    admin_key = "fg-admin-" + secrets.token_urlsafe(12)
    gateway = build_gateway(config, ControlOptions(data_dir=store_dir.name, admin_key=admin_key))
    server = server_for(gateway, host, port)
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started:
        if serving.done():
            return 1
        await asyncio.sleep(0.01)
    base = f"http://{host}:{port}"
    print(_instructions(base, await _sample_requests(base), admin_key), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.should_exit = True
    await serving
    for engine in engines.values():
        await engine.stop()
    store_dir.cleanup()
    return 0


def run_demo(host: str = "127.0.0.1", port: int = 8080) -> int:
    try:
        import uvloop

        return uvloop.run(_run(host, port))
    except ImportError:
        return asyncio.run(_run(host, port))
