"""Exact prompt counts: what a request's prompt comes to on a deployment, everything counted.

`count_prompt(pool, dep, profile, settings)` is the one entry point (the refine stage and
`/v1/messages/count_tokens` use it). By engine:

* a deployment with a local `tokenizer:` (a `tokenizer.json`): its text counted by the
  `tokenizers` library, off the event loop for long inputs, plus the chat template's
  scaffolding as the family estimates it; no network call;
* llama.cpp: `POST /v1/messages/count_tokens` (the templated length, tools included, in one
  call) for plain chats; `POST /apply-template` with `messages`, `tools` and `tool_choice`
  then `POST /tokenize` when turns carry tool calls;
* vLLM: `POST /tokenize` at the server root with `messages`, `tools` and
  `add_generation_prompt`, or `prompt`;
* SGLang: `POST /v1/tokenize` with the text; the template's scaffolding as the family
  estimates it.

Counts are cached by a hash of what was counted and where (a retried or repeated request
costs no call). Upstream calls never follow redirects.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from functools import lru_cache
from typing import Any, NamedTuple

import orjson

from fleetgate.config.schema import ContextConfig
from fleetgate.context.families import FAMILIES
from fleetgate.context.tally import FIELDS, tally_body
from fleetgate.execute.upstream import UpstreamPool
from fleetgate.fleet import Deployment
from fleetgate.ingress.profile import RequestProfile

TOKENIZING_KINDS = frozenset({"vllm", "sglang", "llamacpp"})
COUNTABLE_ENDPOINTS = frozenset({"chat.completions", "completions"})
OFF_LOOP_BYTES = 32_768  # local counts of longer texts run in a thread
_CACHE_SIZE = 4096
# template fields: what a count adds for the scaffolding when it counts text only
_STRUCTURE = tuple(
    i for i, f in enumerate(FIELDS) if f in ("messages", "tools", "tool_blocks", "requests")
)


class TokenizeError(Exception):
    """The engine gave no usable count."""


def can_count(dep: Deployment) -> bool:
    return dep.tokenizer is not None or dep.provider.kind in TOKENIZING_KINDS


def _server_root(base_url: str) -> str:
    # providers are configured with their OpenAI base (…/v1); vLLM and llama.cpp serve
    # their tokenizer at the server root
    return base_url.removesuffix("/v1")


def _count(data: Any) -> int:
    if isinstance(data, dict):
        for key in ("count", "input_tokens"):
            count = data.get(key)
            if type(count) is int and count >= 0:
                return count
        tokens = data.get("tokens")
        if isinstance(tokens, list):
            return len(tokens)
    raise TokenizeError("no count in the tokenize answer")


def _texts(profile: RequestProfile) -> list[str]:
    """The request's text pieces, for tokenizers that count text only."""
    body = profile.body
    if profile.endpoint == "completions":
        prompt = body.get("prompt")
        return [prompt] if isinstance(prompt, str) else []
    parts: list[str] = []
    for message in body.get("messages") or ():
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(
                p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
        if message.get("tool_calls"):
            parts.append(orjson.dumps(message["tool_calls"]).decode())
    if body.get("tools"):
        parts.append(orjson.dumps(body["tools"]).decode())
    return parts


def _scaffolding(dep: Deployment, profile: RequestProfile) -> int:
    """The family's estimate of the template's own tokens (for text-only counts)."""
    if profile.endpoint != "chat.completions":
        return 0
    counts = tally_body({k: profile.body.get(k) for k in ("messages", "tools")}, "chat")
    weights = FAMILIES[dep.tokenizer_family].weights
    return round(sum(weights[i] * counts.counts[i] for i in _STRUCTURE))


@lru_cache(maxsize=8)
def _load_tokenizer(path: str) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


def _local_count(path: str, texts: list[str]) -> int:
    tokenizer = _load_tokenizer(path)
    return sum(len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False))


def _plain_chat(messages: list[Any]) -> bool:
    """Messages the Messages API's count_tokens takes as they are."""
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
            return False
        if not isinstance(m.get("content"), str) or m.get("tool_calls"):
            return False
    return True


def _anthropic_count_body(body: dict[str, Any], model: str) -> dict[str, Any]:
    messages = body["messages"]
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    out: dict[str, Any] = {
        "model": model,
        "messages": [m for m in messages if m["role"] != "system"],
    }
    if system:
        out["system"] = system
    tools = body.get("tools")
    if tools:
        out["tools"] = [
            {
                "name": t["function"]["name"],
                "description": t["function"].get("description", ""),
                "input_schema": t["function"].get("parameters") or {"type": "object"},
            }
            for t in tools
        ]
    return out


class Counted(NamedTuple):
    tokens: int
    calls: int  # the engine calls it took (0: a cache hit or a local tokenizer)


class ExactCounter:
    """Exact counts with a cache; one per gateway."""

    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool
        self.calls = 0  # engine calls made, in all
        self._cache: OrderedDict[bytes, int] = OrderedDict()

    def _key(self, dep: Deployment, profile: RequestProfile) -> bytes:
        body = profile.body
        what = [profile.endpoint, dep.tokenizer or dep.provider.base_url, dep.upstream_model]
        for name in ("messages", "prompt", "tools", "tool_choice"):
            what.append(body.get(name))
        return hashlib.blake2b(orjson.dumps(what), digest_size=16).digest()

    async def count(
        self, dep: Deployment, profile: RequestProfile, settings: ContextConfig
    ) -> Counted:
        """The prompt tokens of `profile` on `dep`; raises on any failure (the caller keeps
        the estimate)."""
        key = self._key(dep, profile)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return Counted(cached, 0)
        spent = [0]  # this count's engine calls (others may count at the same time)
        if dep.tokenizer is not None:
            texts = _texts(profile)
            if sum(len(t) for t in texts) > OFF_LOOP_BYTES:
                text_count = await asyncio.to_thread(_local_count, dep.tokenizer, texts)
            else:
                text_count = _local_count(dep.tokenizer, texts)
            count = text_count + _scaffolding(dep, profile)
        else:
            count = await self._engine_count(dep, profile, spent)
        self._cache[key] = count
        if len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
        return Counted(count, spent[0])

    async def _post(
        self, dep: Deployment, url: str, payload: dict[str, Any], spent: list[int]
    ) -> Any:
        client = self.pool.client(dep.provider)
        self.calls += 1
        spent[0] += 1
        async with client.session.post(
            url, data=orjson.dumps(payload), headers=client.headers, allow_redirects=False
        ) as resp:
            raw = await resp.read()
            if resp.status != 200:
                raise TokenizeError(f"tokenize answered {resp.status}")
            return orjson.loads(raw)

    async def _engine_count(
        self, dep: Deployment, profile: RequestProfile, spent: list[int]
    ) -> int:
        client = self.pool.client(dep.provider)
        root = _server_root(client.base_url)
        body = profile.body
        chat = profile.endpoint == "chat.completions"
        kind = dep.provider.kind
        tools = body.get("tools")
        if kind == "vllm":
            payload: dict[str, Any] = {"model": dep.upstream_model}
            if chat:
                payload["messages"] = body["messages"]
                payload["add_generation_prompt"] = True
                if tools:
                    payload["tools"] = tools
            else:
                payload["prompt"] = body.get("prompt")
            return _count(await self._post(dep, root + "/tokenize", payload, spent))
        if kind == "llamacpp":
            if not chat:
                content = "".join(_texts(profile))
                return _count(
                    await self._post(dep, root + "/tokenize", {"content": content}, spent)
                )
            messages = body["messages"]
            if _plain_chat(messages):
                answer = await self._post(
                    dep,
                    root + "/v1/messages/count_tokens",
                    _anthropic_count_body(body, dep.upstream_model),
                    spent,
                )
                return _count(answer)
            payload = {"messages": messages}
            if tools:
                payload["tools"] = tools
                if body.get("tool_choice") is not None:
                    payload["tool_choice"] = body["tool_choice"]
            templated = await self._post(dep, root + "/apply-template", payload, spent)
            text = templated.get("prompt") if isinstance(templated, dict) else None
            if not isinstance(text, str):
                raise TokenizeError("no prompt in the apply-template answer")
            return _count(await self._post(dep, root + "/tokenize", {"content": text}, spent))
        # SGLang: text only, so the chat template's scaffolding stays estimated
        payload = {"model": dep.upstream_model, "prompt": "\n".join(_texts(profile))}
        count = _count(await self._post(dep, client.base_url + "/tokenize", payload, spent))
        return count + _scaffolding(dep, profile)


async def count_prompt(
    counter: ExactCounter, dep: Deployment, profile: RequestProfile, settings: ContextConfig
) -> Counted:
    """The exact prompt tokens of a request on a deployment (raises when it cannot tell)."""
    if profile.endpoint not in COUNTABLE_ENDPOINTS:
        raise TokenizeError(f"{profile.endpoint} requests are not counted")
    return await counter.count(dep, profile, settings)
