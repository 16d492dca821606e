"""Exact prompt counts: what a request's prompt comes to on a deployment, everything counted.

`count_prompt(pool, dep, profile, settings)` is the one entry point (the refine stage and
`/v1/messages/count_tokens` use it). By engine:

* a deployment with a local `tokenizer:` (a `tokenizer.json`): its text counted by the
  `tokenizers` library, off the event loop for long inputs, plus the chat template's
  scaffolding as the family estimates it; no network call;
* llama.cpp: `POST /v1/chat/completions/input_tokens` (the templated length of the chat as
  it is, tools, tool calls and tool results included, in one call). An engine that predates
  it (a 404, remembered per engine) is asked as before: `POST /v1/messages/count_tokens`
  for plain chats; `POST /apply-template` with `messages`, `tools` and `tool_choice` then
  `POST /tokenize` when turns carry tool calls. Rendering the template is most of
  such a call (about 2.7 ms of it on one engine thread, whatever the length), so a chat
  whose messages are plain text costs, once its shape (roles, tools) was counted whole,
  one `/tokenize` of its texts plus the shape's framing (`template_costs.py`). A whole
  prompt (templated, or a completions prompt) is tokenized with `add_special`: the special
  tokens the engine adds to a prompt it serves (a BOS token on many vocabularies; the
  rendered template leaves it out), which its window and usage count, as count_tokens does;
  texts counted apart go without (the framing learned holds those tokens);
* vLLM: `POST /tokenize` at the server root with `messages`, `tools` and
  `add_generation_prompt`, or `prompt`;
* SGLang: `POST /v1/tokenize` with the text; the template's scaffolding as the family
  estimates it.

Counts are cached by a hash of what was counted and where (a retried or repeated request
costs no call). Upstream calls never follow redirects; each carries the headers the count
was given (the request's `traceparent`, naming the count's span as its parent).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson

from fleetgate.config.schema import ContextConfig
from fleetgate.context.families import FAMILIES
from fleetgate.context.tally import FIELDS, tally_body
from fleetgate.context.template_costs import Key, TemplateCosts, step_key, whole_key
from fleetgate.execute.upstream import UpstreamPool, call
from fleetgate.fleet import Deployment, Fleet
from fleetgate.ingress.profile import RequestProfile

log = logging.getLogger(__name__)

TOKENIZING_KINDS = frozenset({"vllm", "sglang", "llamacpp"})
WHOLE_COUNTING_KINDS = frozenset({"vllm", "llamacpp"})  # they count the templated request
COUNTABLE_ENDPOINTS = frozenset({"chat.completions", "completions"})
OFF_LOOP_BYTES = 32_768  # local counts of longer texts run in a thread
_CACHE_SIZE = 4096
# llama.cpp's /tokenize adds no special tokens unless asked: a whole prompt takes those the
# engine adds to what it serves (its usage and its window count them)
_SERVED = {"add_special": True}
# llama.cpp's count of an OpenAI chat, templated as served (special tokens included)
CHAT_COUNT_PATH = "/v1/chat/completions/input_tokens"
# template fields: what a count adds for the scaffolding when it counts text only
_STRUCTURE = tuple(
    i for i, f in enumerate(FIELDS) if f in ("messages", "tools", "tool_blocks", "requests")
)


class TokenizeError(Exception):
    """The engine gave no usable count (`status`: its HTTP status, when it answered one)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


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


_TOKENIZERS: dict[str, Any] = {}  # loaded local tokenizers by path


def _load_tokenizer(path: str) -> Any:
    """The `tokenizers` Tokenizer of a tokenizer.json (loaded once; about 0.2 s for the
    Qwen2 one); TokenizeError when the file does not load."""
    tokenizer = _TOKENIZERS.get(path)
    if tokenizer is None:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise TokenizeError(
                f"the tokenizer {path} needs the tokenizers library: "
                "pip install 'fleetgate[tokenizers]'"
            ) from exc
        try:
            tokenizer = Tokenizer.from_file(path)
        except Exception as exc:  # the library raises a bare Exception for a bad file
            raise TokenizeError(f"the tokenizer {path} does not load: {exc}") from exc
        _TOKENIZERS[path] = tokenizer
    return tokenizer


async def load_tokenizers(fleet: Fleet) -> None:
    """Load every deployment's local tokenizer in a thread, at start-up and when the fleet
    changes, so that no request pays the load; one that does not load is logged (its
    counts then fail, and the estimate stands). Tokenizers the fleet no longer names are
    let go."""
    wanted = {d.tokenizer for d in fleet.deployments.values() if d.tokenizer}
    for stale in set(_TOKENIZERS) - wanted:
        del _TOKENIZERS[stale]
    for path in sorted(wanted):
        if path not in _TOKENIZERS:
            try:
                await asyncio.to_thread(_load_tokenizer, path)
            except TokenizeError as exc:
                log.warning("%s; exact counts on its deployments fall back to the estimate", exc)


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


def _chat_payload(body: dict[str, Any]) -> dict[str, Any]:
    """What llama.cpp templates of a chat: its messages, and its tools with `tool_choice`."""
    payload: dict[str, Any] = {"messages": body["messages"]}
    if body.get("tools"):
        payload["tools"] = body["tools"]
        if body.get("tool_choice") is not None:
            payload["tool_choice"] = body["tool_choice"]
    return payload


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


class _Calls:
    """One count's engine calls: how many it made, and the headers each carries (the
    request's `traceparent`, so an engine that traces joins the request's trace)."""

    __slots__ = ("headers", "made")

    def __init__(self, headers: Mapping[str, str] | None) -> None:
        self.made = 0
        self.headers = headers


class Counted(NamedTuple):
    tokens: int
    calls: int  # the engine calls it took (0: a cache hit or a local tokenizer)
    # what the answer's usage can teach: usage - tokens_without is the template's part
    # for this key (`template_costs.py`); None when the count was the engine's whole one
    basis: tuple[Key, int] | None = None
    # tokens of `tokens` the family estimated (a template's scaffolding not learned yet):
    # `tokens - estimated` is what was counted, the evidence a refusal may rest on
    estimated: int = 0


_PLAIN_KEYS = frozenset({"role", "content"})


def _pieces(message: Any) -> list[str] | None:
    """The text of a message whose template framing depends on its role only: a role and
    string content or text parts, nothing else but empty fields (a template may render a
    `name`, tool calls or reasoning; an SDK's echoed `refusal: null` or `tool_calls: []`
    renders nothing), no whitespace at either end; None otherwise. (A template's own
    newline before a text that starts with one merges with it into one token, and some
    templates trim the ends: there the framing depends on the text.)"""
    if not isinstance(message, dict) or message.get("role") == "tool":
        return None
    if any(value for key, value in message.items() if key not in _PLAIN_KEYS):
        return None
    content = message.get("content")
    texts: list[Any]
    if isinstance(content, str):
        texts = [content]
    elif isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" for p in content
    ):
        texts = [p.get("text") for p in content]
    else:
        return None
    for text in texts:
        if not isinstance(text, str) or text[:1].isspace() or text[-1:].isspace():
            return None
    return texts


def _framable(profile: RequestProfile) -> list[str] | None:
    """A chat's texts when its template framing depends on its shape only (every message
    as in `_pieces`), else None."""
    messages = profile.body.get("messages")
    if profile.endpoint != "chat.completions" or not isinstance(messages, list) or not messages:
        return None
    texts: list[str] = []
    for message in messages:
        pieces = _pieces(message)
        if pieces is None:
            return None
        texts.extend(pieces)
    return texts


class ExactCounter:
    """Exact counts with a cache per conversation prefix; one per gateway.

    A chat's count is cached under a running hash of its messages, so the next turn of a
    conversation finds its earlier messages counted, and costs one short call for the new
    ones (`template_costs.py`)."""

    def __init__(self, pool: UpstreamPool, template: TemplateCosts | None = None) -> None:
        self.pool = pool
        self.template = template or TemplateCosts()
        self.calls = 0  # engine calls made, in all
        self._cache: OrderedDict[bytes, int] = OrderedDict()
        self._without_chat_count: set[str] = set()  # engine roots that lack CHAT_COUNT_PATH

    def _keys(self, dep: Deployment, profile: RequestProfile) -> list[bytes]:
        """The cache keys of a request: of each prefix of its messages (chats), the last
        one the whole request's."""
        body = profile.body
        what = [profile.endpoint, dep.tokenizer or dep.provider.base_url, dep.upstream_model]
        what.extend(body.get(name) for name in ("tools", "tool_choice"))
        messages = body.get("messages")
        if profile.endpoint != "chat.completions" or not isinstance(messages, list):
            what.append(body.get("prompt"))
            return [hashlib.blake2b(orjson.dumps(what), digest_size=16).digest()]
        keys = []
        running = hashlib.blake2b(orjson.dumps(what), digest_size=16)
        for message in messages:
            running.update(orjson.dumps(message))
            keys.append(running.copy().digest())
        return keys or [running.digest()]

    def _remember(self, key: bytes, count: int) -> None:
        self._cache[key] = count
        if len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)

    def _prefix(self, keys: list[bytes]) -> tuple[int, int] | None:
        """(messages, count) of the longest counted prefix short of the whole request."""
        for k in range(len(keys) - 1, 0, -1):
            count = self._cache.get(keys[k - 1])
            if count is not None:
                return k, count
        return None

    async def count(
        self,
        dep: Deployment,
        profile: RequestProfile,
        settings: ContextConfig,
        headers: Mapping[str, str] | None = None,
    ) -> Counted:
        """The prompt tokens of `profile` on `dep`, each engine call with `headers`; raises
        on any failure (the caller keeps the estimate)."""
        keys = self._keys(dep, profile)
        cached = self._cache.get(keys[-1])
        if cached is not None:
            self._cache.move_to_end(keys[-1])
            return Counted(cached, 0)
        calls = _Calls(headers)  # this count's (others may count at the same time)
        counted = await self._step(dep, profile, keys, calls)
        if counted is None:
            counted = await self._whole(dep, profile, calls)
        if not counted.estimated:  # a guessed scaffolding is no count to keep
            self._remember(keys[-1], counted.tokens)
        return counted

    async def settle(
        self,
        dep: Deployment,
        profile: RequestProfile,
        counted: Counted,
        headers: Mapping[str, str] | None = None,
    ) -> Counted:
        """A count whose scaffolding was guessed, made exact by the engine's own count of
        the whole request (`WHOLE_COUNTING_KINDS`), which teaches the shape's scaffolding."""
        calls = _Calls(headers)
        tokens = await self._engine_count(dep, profile, calls)
        if counted.basis is not None:
            key, text = counted.basis
            self.template.learn(key, tokens - text)
        self._remember(self._keys(dep, profile)[-1], tokens)
        return Counted(tokens, counted.calls + calls.made, counted.basis)

    async def _step(
        self, dep: Deployment, profile: RequestProfile, keys: list[bytes], calls: _Calls
    ) -> Counted | None:
        """A conversation whose earlier messages were counted: their count, the new
        messages' text and the template's framing of them (learned: see the module doc)."""
        if dep.tokenizer is None and dep.provider.kind != "llamacpp":
            return None
        found = self._prefix(keys)
        if found is None:
            return None
        k, before = found
        messages = profile.body["messages"]
        pieces = [_pieces(m) for m in messages[k:]]
        if any(p is None for p in pieces):
            return None
        texts = [t for p in pieces for t in p or ()]
        key = step_key(dep, messages[k - 1], messages[k:])
        framing = self.template.get(key)
        if framing is None and dep.tokenizer is None:  # the first time: counted whole too
            whole, _ = await self._learn_framing(dep, profile, key, texts, before, calls)
            return Counted(whole, calls.made)
        text = await self._text_count(dep, texts, calls)
        if framing is not None:
            return Counted(before + text + framing, calls.made, (key, before + text))
        # a local tokenizer: the family's figure until usage teaches it
        per_message = FAMILIES[dep.tokenizer_family].weights[FIELDS.index("messages")]
        guess = round(per_message * (len(messages) - k))
        return Counted(before + text + guess, calls.made, (key, before + text), guess)

    async def _text_count(self, dep: Deployment, texts: list[str], calls: _Calls) -> int:
        """Tokens of each text alone, summed (no merges across them)."""
        if dep.tokenizer is not None:
            # long texts, and a tokenizer still to load, off the event loop
            if dep.tokenizer not in _TOKENIZERS or sum(len(t) for t in texts) > OFF_LOOP_BYTES:
                return await asyncio.to_thread(_local_count, dep.tokenizer, texts)
            return _local_count(dep.tokenizer, texts)
        root = _server_root(self.pool.client(dep.provider).base_url)
        # llama.cpp tokenizes each string of a list apart
        return _count(await self._post(dep, root + "/tokenize", {"content": texts}, calls))

    async def _whole(self, dep: Deployment, profile: RequestProfile, calls: _Calls) -> Counted:
        if dep.tokenizer is not None:
            text = await self._text_count(dep, _texts(profile), calls)
            return self._with_scaffolding(dep, profile, text)
        if dep.provider.kind == "sglang":
            return await self._sglang_count(dep, profile, calls)
        texts = _framable(profile) if dep.provider.kind == "llamacpp" else None
        if texts is not None:
            return await self._framed(dep, profile, texts, calls)
        return Counted(await self._engine_count(dep, profile, calls), calls.made)

    async def _framed(
        self, dep: Deployment, profile: RequestProfile, texts: list[str], calls: _Calls
    ) -> Counted:
        """A plain-text chat on llama.cpp: its texts' tokens plus its shape's framing (the
        roles' scaffolding and the rendered tools), learned the first time from the whole
        count, which runs beside the texts' count; then checked by every answer's usage."""
        key = whole_key(dep, profile.body)
        framing = self.template.get(key)
        if framing is not None:
            text = await self._text_count(dep, texts, calls)
            return Counted(text + framing, calls.made, (key, text))
        whole, text = await self._learn_framing(dep, profile, key, texts, 0, calls)
        return Counted(whole, calls.made, (key, text))

    async def _learn_framing(
        self,
        dep: Deployment,
        profile: RequestProfile,
        key: Key,
        texts: list[str],
        before: int,
        calls: _Calls,
    ) -> tuple[int, int]:
        """The engine's whole count beside the count of `texts` (both at once): what the
        whole holds beyond them and `before` (counted earlier) is `key`'s framing, learned.
        Returns (whole, texts)."""
        whole, text = await asyncio.gather(
            self._engine_count(dep, profile, calls), self._text_count(dep, texts, calls)
        )
        self.template.learn(key, whole - before - text)
        return whole, text

    def _with_scaffolding(self, dep: Deployment, profile: RequestProfile, text: int) -> Counted:
        """A text-only count plus the template's scaffolding: learned from usage for this
        request shape, else the family's estimate."""
        if profile.endpoint != "chat.completions":
            return Counted(text, 0)
        key = whole_key(dep, profile.body)
        learned = self.template.get(key)
        if learned is not None:
            return Counted(text + learned, 0, (key, text))
        guess = _scaffolding(dep, profile)
        return Counted(text + guess, 0, (key, text), guess)

    async def _post(self, dep: Deployment, url: str, payload: dict[str, Any], calls: _Calls) -> Any:
        self.calls += 1
        calls.made += 1
        client = self.pool.client(dep.provider)
        status, raw = await call(client, "POST", url, orjson.dumps(payload), calls.headers)
        if status != 200:
            raise TokenizeError(f"tokenize answered {status}", status)
        return orjson.loads(raw)

    async def _engine_count(self, dep: Deployment, profile: RequestProfile, calls: _Calls) -> int:
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
            return _count(await self._post(dep, root + "/tokenize", payload, calls))
        if kind == "llamacpp":
            if not chat:
                content = "".join(_texts(profile))
                payload = {"content": content, **_SERVED}
                return _count(await self._post(dep, root + "/tokenize", payload, calls))
            messages = body["messages"]
            if root not in self._without_chat_count:
                counted = await self._chat_count(dep, root, body, calls)
                if counted is not None:
                    return counted
            if _plain_chat(messages):
                answer = await self._post(
                    dep,
                    root + "/v1/messages/count_tokens",
                    _anthropic_count_body(body, dep.upstream_model),
                    calls,
                )
                return _count(answer)
            templated = await self._post(dep, root + "/apply-template", _chat_payload(body), calls)
            text = templated.get("prompt") if isinstance(templated, dict) else None
            if not isinstance(text, str):
                raise TokenizeError("no prompt in the apply-template answer")
            payload = {"content": text, **_SERVED}
            return _count(await self._post(dep, root + "/tokenize", payload, calls))
        raise TokenizeError(f"{kind} engines are not counted here")

    async def _chat_count(
        self, dep: Deployment, root: str, body: dict[str, Any], calls: _Calls
    ) -> int | None:
        """llama.cpp's count of the chat in one call; None: the engine lacks the endpoint
        (remembered: it is not asked again)."""
        payload = {"model": dep.upstream_model, **_chat_payload(body)}
        try:
            return _count(await self._post(dep, root + CHAT_COUNT_PATH, payload, calls))
        except TokenizeError as exc:
            if exc.status not in (404, 405):
                raise
        self._without_chat_count.add(root)
        # the provider's id, not its URL (a URL may carry credentials)
        log.info("%s has no %s: counted by its older endpoints", dep.provider.id, CHAT_COUNT_PATH)
        return None

    async def _sglang_count(
        self, dep: Deployment, profile: RequestProfile, calls: _Calls
    ) -> Counted:
        """SGLang counts text only: the template's scaffolding is learned, or estimated."""
        client = self.pool.client(dep.provider)
        payload = {"model": dep.upstream_model, "prompt": "\n".join(_texts(profile))}
        text = _count(await self._post(dep, client.base_url + "/tokenize", payload, calls))
        counted = self._with_scaffolding(dep, profile, text)
        return counted._replace(calls=calls.made)


async def count_prompt(
    counter: ExactCounter,
    dep: Deployment,
    profile: RequestProfile,
    settings: ContextConfig,
    headers: Mapping[str, str] | None = None,
) -> Counted:
    """The exact prompt tokens of a request on a deployment (raises when it cannot tell);
    every engine call carries `headers` (the count's `traceparent`)."""
    if profile.endpoint not in COUNTABLE_ENDPOINTS:
        raise TokenizeError(f"{profile.endpoint} requests are not counted")
    return await counter.count(dep, profile, settings, headers)
