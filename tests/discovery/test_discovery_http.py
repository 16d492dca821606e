"""Discovery against real HTTP workers: fake Ollama workers and a vLLM-shaped fake engine."""

from __future__ import annotations

import httpx
import ollama

from fleetgate.testing import OllamaModel
from tests.harness import Stack, ollama_provider, provider, wait_until


def windows(stack: Stack) -> dict[str, dict]:
    body = httpx.get(stack.url + "/v1/fleet/windows", timeout=5).json()
    return {row["deployment"]: row for row in body["data"]}


def refresh(stack: Stack) -> dict[str, dict]:
    """Probe every worker now (what the admin-only `POST /v1/fleet/windows/refresh` does)."""
    assert stack.gateway is not None
    stack.lt.run(stack.gateway.pipeline.discovery.refresh())
    return windows(stack)


def test_sources_and_clamps_per_worker(stack: Stack) -> None:
    loaded = stack.ollama(
        "loaded",
        OllamaModel("qwen3:8b", num_ctx=8192, max_context=40960),
        loaded={"qwen3:8b": 65536},
    )
    shown = stack.ollama("shown", OllamaModel("qwen3:8b", num_ctx=12288))
    plain = stack.ollama("plain", OllamaModel("qwen3:8b"))
    configured = stack.ollama("configured", OllamaModel("qwen3:8b"))
    limited = stack.ollama("limited", OllamaModel("qwen3:8b", num_ctx=32768))
    engine = stack.engine("v", context_window=24576, served_model="org/v")
    stack.start_gateway(
        {
            "model_capabilities": {"context": {"default_worker_tokens": 3072}},
            "providers": [
                ollama_provider("loaded", loaded),
                ollama_provider("shown", shown),
                {**ollama_provider("plain", plain), "discovery": False},
                {**ollama_provider("configured", configured), "default_context_tokens": 6144},
                {
                    **ollama_provider("limited", limited),
                    "context_limits": {"*": 16384, "qwen3:*": 10240},
                },
                {**provider("v", engine), "discovery": True},
                provider("v-off", engine),
            ],
            "deployments": [
                {"id": name, "model": "qwen", "provider": name, "upstream_model": "qwen3:8b"}
                for name in ("loaded", "shown", "plain", "configured", "limited")
            ]
            + [
                {"id": "v", "model": "other", "provider": "v", "upstream_model": "org/v"},
                {"id": "v-off", "model": "other", "provider": "v-off", "upstream_model": "org/v"},
            ],
        }
    )
    view = refresh(stack)
    assert (view["loaded"]["tokens"], view["loaded"]["source"]) == (40960, "api_ps")
    assert view["loaded"]["clamped_by"] == "model_max" and view["loaded"]["loaded"] is True
    assert (view["shown"]["tokens"], view["shown"]["source"]) == (12288, "api_show")
    assert (view["plain"]["tokens"], view["plain"]["source"]) == (3072, "default")
    assert (view["configured"]["tokens"], view["configured"]["source"]) == (6144, "config")
    assert view["limited"]["tokens"] == 10240
    assert view["limited"]["limit_pattern"] == "qwen3:*"
    assert (view["v"]["tokens"], view["v"]["source"]) == (24576, "api_models")
    assert (view["v-off"]["tokens"], view["v-off"]["source"]) == (None, "unknown")
    assert not [r for r in plain.requests if r.path in ("/api/ps", "/api/show")]
    catalog = {m["id"]: m for m in httpx.get(stack.url + "/v1/models", timeout=5).json()["data"]}
    assert catalog["qwen"]["context_length"] == 40960  # the largest discovered window
    assert catalog["other"]["context_length"] == 24576


def test_ttl_refresh_sees_a_reload_and_api_ps_lists_fleet_models(stack: Stack) -> None:
    worker = stack.ollama("w", OllamaModel("llama3.2", num_ctx=8192))
    stack.start_gateway(
        {
            "model_capabilities": {"cache_ttl": 1},
            "providers": [ollama_provider("w", worker)],
            "deployments": [
                {"id": "w", "model": "chat", "provider": "w", "upstream_model": "llama3.2"}
            ],
        }
    )
    wait_until(lambda: windows(stack)["w"]["source"] == "api_show", 10, "first discovery")
    assert ollama.Client(host=stack.url, timeout=5).ps().models == []
    # a request loads the model with a larger context; the next TTL round sees it
    httpx.post(
        stack.url + "/api/generate",
        timeout=10,
        json={"model": "chat", "prompt": "hi", "stream": False, "options": {"num_ctx": 16384}},
    )
    wait_until(lambda: windows(stack)["w"]["tokens"] == 16384, 10, "TTL refresh")
    assert windows(stack)["w"]["source"] == "api_ps"
    ps = ollama.Client(host=stack.url, timeout=5).ps().models
    assert [(m.model, m.context_length) for m in ps] == [("chat", 16384)]


def test_unreachable_worker_falls_back_to_config_and_notes_the_error(stack: Stack) -> None:
    stack.start_gateway(
        {
            "providers": [
                {
                    "id": "gone",
                    "kind": "ollama",
                    "base_url": "http://127.0.0.1:9",
                    "default_context_tokens": 5000,
                }
            ],
            "deployments": [{"id": "gone", "model": "m", "provider": "gone"}],
        }
    )
    row = refresh(stack)["gone"]
    assert (row["tokens"], row["source"]) == (5000, "config")
    assert "/api/ps" in row["error"]


def test_probes_ask_each_engine_at_its_own_paths(stack: Stack, loop_thread) -> None:
    """SGLang (old: no max_model_len, then /get_model_info) and llama.cpp (/props at the
    root) answered by a server replaying recorded bodies."""
    from pathlib import Path

    from aiohttp import web

    fixtures = Path(__file__).parent / "fixtures"
    seen: list[str] = []

    def replay(name: str):
        async def handler(request: web.Request) -> web.Response:
            seen.append(request.path)
            return web.Response(
                body=(fixtures / name).read_bytes(), content_type="application/json"
            )

        return handler

    app = web.Application()
    app.router.add_get("/v1/models", replay("sglang_models_old.json"))
    app.router.add_get("/get_model_info", replay("sglang_model_info.json"))
    app.router.add_get("/props", replay("llamacpp_props.json"))
    runner = web.AppRunner(app)

    async def serve() -> int:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner.addresses[0][1]

    port = loop_thread.run(serve())
    base = f"http://127.0.0.1:{port}/v1"
    try:
        stack.start_gateway(
            {
                "providers": [
                    {
                        "id": "sg",
                        "kind": "sglang",
                        "base_url": base,
                        "discovery": True,
                        "default_context_tokens": 2048,
                    },
                    {"id": "lc", "kind": "llamacpp", "base_url": base, "discovery": True},
                    {
                        "id": "lcu",
                        "kind": "llamacpp",
                        "base_url": base,
                        "discovery": True,
                        "unified_kv": True,
                    },
                ],
                "deployments": [
                    {
                        "id": "sg",
                        "model": "m",
                        "provider": "sg",
                        "upstream_model": "Qwen/Qwen2.5-7B-Instruct",
                    },
                    {"id": "lc", "model": "m", "provider": "lc"},
                    {"id": "lcu", "model": "m", "provider": "lcu"},
                ],
            }
        )
        view = refresh(stack)
        # the old SGLang states no window anywhere: the config value stands
        assert (view["sg"]["tokens"], view["sg"]["source"]) == (2048, "config")
        assert (view["lc"]["tokens"], view["lc"]["source"]) == (4096, "props")
        assert (view["lcu"]["tokens"], view["lcu"]["source"]) == (16384, "props")
        assert {"/v1/models", "/get_model_info", "/props"} <= set(seen)
    finally:
        loop_thread.run(runner.cleanup())


def test_a_config_swap_re_probes_at_once(stack: Stack) -> None:
    from fleetgate.fleet import build_fleet
    from tests.harness import fleet_config

    worker = stack.ollama("w", OllamaModel("small", num_ctx=2048), OllamaModel("big", num_ctx=8192))
    config = {
        "providers": [ollama_provider("w", worker)],
        "deployments": [{"id": "w", "model": "m", "provider": "w", "upstream_model": "small"}],
    }
    stack.start_gateway(config)
    assert refresh(stack)["w"]["tokens"] == 2048
    config["deployments"][0]["upstream_model"] = "big"
    stack.gateway.pipeline.holder.swap(build_fleet(fleet_config(config)))  # from this (test) thread
    wait_until(lambda: windows(stack)["w"]["tokens"] == 8192, 10, "re-probe after the swap")
