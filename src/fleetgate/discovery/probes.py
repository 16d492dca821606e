"""Ask one worker about its context window, in its engine's own API."""

from __future__ import annotations

import time
from typing import Any

import orjson

from fleetgate.discovery.evidence import (
    Evidence,
    parse_llamacpp_props,
    parse_ollama_ps,
    parse_ollama_show,
    parse_openai_models,
    parse_sglang_model_info,
)
from fleetgate.execute.outcome import error_message
from fleetgate.execute.upstream import UpstreamSession
from fleetgate.fleet import Deployment, Provider
from fleetgate.fleet.model import redactor_for

DISCOVERABLE = frozenset({"ollama", "vllm", "sglang", "llamacpp"})


class ProbeCache:
    """Answers shared by the deployments of one provider within one refresh."""

    def __init__(self, session: UpstreamSession) -> None:
        self.session = session
        self._answers: dict[tuple[str, str, str], Any] = {}

    async def get(self, provider: Provider, path: str, body: Any = None) -> Any:
        """GET (or POST `body`) a JSON endpoint; raises on transport errors and non-2xx."""
        key = (provider.id, path, orjson.dumps(body).decode() if body is not None else "")
        if key in self._answers:
            return self._answers[key]
        headers = {"Content-Type": "application/json", **provider_headers(provider)}
        url = provider_url(provider, path)
        import aiohttp  # loaded by the session that asks

        if body is None:
            request = self.session.get(url, headers=headers)
        else:
            request = self.session.post(url, data=orjson.dumps(body), headers=headers)
        async with request as resp:
            raw = await resp.read()
            if resp.status >= 300:  # a redirect is never followed (execute/upstream.py)
                said = "a redirect"
                if resp.status >= 400:  # the answer may quote the credential it was sent
                    said = error_message(redactor_for([provider]).bytes(raw), 200)
                raise aiohttp.ClientResponseError(
                    resp.request_info,
                    (),
                    status=resp.status,
                    message=f"HTTP {resp.status}: {said}",
                )
        answer = orjson.loads(raw)
        self._answers[key] = answer
        return answer


def provider_headers(provider: Provider) -> dict[str, str]:
    """The provider's own headers and its key: what a worker's status endpoints may need."""
    headers = dict(provider.headers)
    if provider.api_key:
        headers["Authorization"] = f"Bearer {provider.api_key}"
    return headers


def provider_url(provider: Provider, path: str) -> str:
    """`/v1/...` paths go under the OpenAI base; others (`/api/ps`, `/props`) at the root."""
    root = provider.base_url.removesuffix("/v1")
    return root + path


async def probe(cache: ProbeCache, dep: Deployment) -> Evidence:
    """What the worker says now; a failed call leaves its fields None and notes the error."""
    kind = dep.provider.kind
    model = dep.upstream_model
    fields: dict[str, Any] = {}
    errors: list[str] = []

    import aiohttp  # loaded by the session that asks

    async def ask(path: str, body: Any = None) -> Any:
        try:
            return await cache.get(dep.provider, path, body)
        except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError) as exc:
            errors.append(f"{path}: {type(exc).__name__} {exc}".strip())
            return None

    if kind == "ollama":
        ps = await ask("/api/ps")
        if ps is not None:
            fields["loaded"], fields["loaded_context"] = parse_ollama_ps(ps, model)
        show = await ask("/api/show", {"model": model})
        if show is not None:
            fields["num_ctx"], fields["model_max"] = parse_ollama_show(show)
    elif kind in ("vllm", "sglang"):
        models = await ask("/v1/models")
        window = parse_openai_models(models, model) if models is not None else None
        source = "api_models"
        if window is None and kind == "sglang":
            info = await ask("/get_model_info")
            window = parse_sglang_model_info(info) if info is not None else None
            source = "model_info"
        if window is not None:
            fields["engine_window"], fields["engine_source"] = window, source
    elif kind == "llamacpp":
        props = await ask("/props")
        window = parse_llamacpp_props(props, dep.provider.unified_kv) if props else None
        if window is not None:
            fields["engine_window"], fields["engine_source"] = window, "props"
    return Evidence(**fields, error="; ".join(errors) or None, fetched_at=time.time())
