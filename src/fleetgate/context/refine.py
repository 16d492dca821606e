"""Refine: an exact token count from the engine when it could change the plan's order.

Only for plans with two or more distinct known windows, and only when the estimate lies
within [band_low, band_high] x one of them. The count comes from a base-tier deployment's
tokenize endpoint (vLLM `POST /tokenize` at the server root with `messages`; SGLang
`POST /v1/tokenize` with text; llama.cpp `POST /apply-template` then `POST /tokenize`),
under a time budget and a cap on counts in flight; when the cap is full, on timeout or on
any failure, the estimate stands. Requests with image or audio parts keep the estimate
(counting them would make the engine fetch and process the media).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace
from typing import Any

import aiohttp
import orjson

from fleetgate.config.schema import ContextConfig
from fleetgate.context.capabilities import context_settings
from fleetgate.context.placement import (
    context_too_large,
    effective_window,
    fits_nowhere,
    known_windows,
    near_boundary,
    order_by_fit,
    record_estimate,
)
from fleetgate.execute.upstream import UpstreamPool
from fleetgate.fleet import Deployment, Fleet
from fleetgate.ingress.profile import RequestProfile
from fleetgate.routing.filters.context_fit import GUARD_PENDING
from fleetgate.routing.plan import Candidate, RoutePlan

TOKENIZING_KINDS = frozenset({"vllm", "sglang", "llamacpp"})
_REFINABLE_ENDPOINTS = frozenset({"chat.completions", "completions"})


class TokenizeError(Exception):
    """The engine gave no usable count."""


def _server_root(base_url: str) -> str:
    # providers are configured with their OpenAI base (…/v1); vLLM and llama.cpp serve
    # their tokenizer at the server root
    return base_url.removesuffix("/v1")


def _count(data: Any) -> int:
    if isinstance(data, dict):
        count = data.get("count")
        if type(count) is int and count >= 0:
            return count
        tokens = data.get("tokens")
        if isinstance(tokens, list):
            return len(tokens)
    raise TokenizeError("no count in the tokenize answer")


def _plain_text(profile: RequestProfile) -> str:
    """The request's text, for engines that tokenize text only."""
    body = profile.body
    if profile.endpoint == "completions":
        prompt = body.get("prompt")
        return prompt if isinstance(prompt, str) else ""
    parts: list[str] = []
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(
                p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
    return "\n".join(parts)


def _tools_tokens(body: dict[str, Any], settings: ContextConfig) -> int:
    """Tool schemas stay estimated: not every engine's tokenizer endpoint accepts them."""
    tools = body.get("tools") or body.get("functions")
    if not tools:
        return 0
    return math.ceil(len(orjson.dumps(tools)) / 4 * (1 + settings.margin_percent / 100))


class ContextRefiner:
    """Exact counts under a budget and a concurrency cap; one per gateway."""

    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool
        self.inflight = 0

    def wants(self, plan: RoutePlan, profile: RequestProfile, settings: ContextConfig) -> bool:
        """Whether an exact count could change this plan (cheap; no I/O)."""
        estimate = profile.context
        refine = settings.refine
        if estimate is None or estimate.exact or estimate.media_parts or not refine.enabled:
            return False
        if profile.endpoint not in _REFINABLE_ENDPOINTS:
            return False
        windows = known_windows(plan.candidates, plan.window_of)
        if len(windows) < 2:
            return False
        return near_boundary(estimate.total, windows, refine.band_low, refine.band_high)

    async def refine(self, plan: RoutePlan, profile: RequestProfile, fleet: Fleet) -> None:
        """Re-order the plan by an exact count when it could matter; never raises for I/O."""
        settings = context_settings(fleet)
        if self.wants(plan, profile, settings):
            await self._refine(plan, profile, settings)
        if plan.notes.pop(GUARD_PENDING, False):
            estimate = profile.context
            assert estimate is not None
            if fits_nowhere(plan.candidates, estimate.total, plan.window_of):
                raise context_too_large(
                    profile.model, estimate, max(known_windows(plan.candidates, plan.window_of))
                )

    async def _refine(
        self, plan: RoutePlan, profile: RequestProfile, settings: ContextConfig
    ) -> None:
        estimate = profile.context
        assert estimate is not None
        counter = _counter_for(plan.candidates)
        if counter is None:
            plan.notes["context_refine"] = "no_tokenizer"
            return
        if self.inflight >= settings.refine.max_concurrency:
            plan.notes["context_refine"] = "skipped_busy"
            return
        self.inflight += 1
        try:
            async with asyncio.timeout(settings.refine.timeout_seconds):
                prompt = await self._tokenize(counter, profile, settings)
        except TimeoutError:
            plan.notes["context_refine"] = "timeout"
            return
        except (aiohttp.ClientError, TokenizeError, orjson.JSONDecodeError, ValueError):
            plan.notes["context_refine"] = "failed"
            return
        finally:
            self.inflight -= 1
        exact = replace(estimate, prompt_tokens=prompt, exact=True)
        profile.context = exact
        plan.notes["context_refine"] = "exact"
        plan.notes["context_estimated"] = estimate.total
        record_estimate(exact, plan.headers, plan.notes)
        plan.candidates = order_by_fit(plan.candidates, exact.total, plan.window_of)

    async def count(self, dep: Deployment, profile: RequestProfile, settings: ContextConfig) -> int:
        """The engine's prompt count of a chat or completions request (tool schemas
        estimated); raises on any failure. `POST /v1/messages/count_tokens` uses it."""
        return await self._tokenize(dep, profile, settings)

    async def _tokenize(
        self, dep: Deployment, profile: RequestProfile, settings: ContextConfig
    ) -> int:
        client = self.pool.client(dep.provider)
        root = _server_root(client.base_url)
        body = profile.body
        chat = profile.endpoint == "chat.completions"
        kind = dep.provider.kind
        extra = _tools_tokens(body, settings)

        async def post(url: str, payload: dict[str, Any]) -> Any:
            async with client.session.post(
                url, data=orjson.dumps(payload), headers=client.headers
            ) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    raise TokenizeError(f"tokenize answered {resp.status}")
                return orjson.loads(raw)

        if kind == "vllm":
            payload: dict[str, Any] = {"model": dep.upstream_model}
            if chat:
                payload["messages"] = body["messages"]
                payload["add_generation_prompt"] = True
            else:
                payload["prompt"] = body.get("prompt")
            return _count(await post(root + "/tokenize", payload)) + extra
        if kind == "llamacpp":
            if chat:
                templated = await post(root + "/apply-template", {"messages": body["messages"]})
                text = templated.get("prompt") if isinstance(templated, dict) else None
                if not isinstance(text, str):
                    raise TokenizeError("no prompt in the apply-template answer")
            else:
                text = _plain_text(profile)
            return _count(await post(root + "/tokenize", {"content": text})) + extra
        # SGLang: text only, so the chat template's overhead stays estimated
        payload = {"model": dep.upstream_model, "prompt": _plain_text(profile)}
        count = _count(await post(client.base_url + "/tokenize", payload))
        messages = len(body.get("messages") or ()) if chat else 0
        return count + messages * settings.message_overhead + extra


def _counter_for(candidates: list[Candidate]) -> Deployment | None:
    """A base-tier deployment (smallest known window) whose engine can count tokens."""
    able = [c.deployment for c in candidates if c.deployment.provider.kind in TOKENIZING_KINDS]
    if not able:
        return None
    return min(able, key=lambda d: (effective_window(d) or math.inf, d.index))
