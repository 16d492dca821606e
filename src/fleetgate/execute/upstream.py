"""Pooled keep-alive HTTP connections to providers, one pool per provider, with its
timeouts.

Proxied requests, exact counts and Ollama listings go through `http1.Http1Pool` (a lean
client: the proxied path pays its cost on every request); the background pollers
(discovery probes, engine load) through an `UpstreamSession` on aiohttp, imported only when
one opens. Neither follows a redirect (a 3xx would carry the provider's credentials to
whatever host it names) nor keeps a cookie.

A pooled connection is only worth keeping while the server keeps it too. llama.cpp's
server (cpp-httplib) ends the connection after every streamed answer although its headers
say `Keep-Alive`, and closes idle ones after 5 s: a connection handed out again before its
close has been seen carries the next request into a closed socket (a reset: the attempt
fails). So a streamed request to it says `Connection: close` (the connection is not pooled
again), and idle ones are dropped before the server drops them (`KEEP_ALIVE`; uvicorn, under
vLLM and SGLang, closes idle ones after 5 s too). A close that still meets a request on its
way is taken up by `http1`, which sends that request once more on a new connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleetgate.execute.http1 import Http1Pool, Timeouts
from fleetgate.fleet import Provider
from fleetgate.fleet.model import redactor_for
from fleetgate.redact import Redactor

if TYPE_CHECKING:  # aiohttp is imported when a session opens: serving needs none
    from aiohttp.client import _RequestContextManager
    from yarl import URL


class UpstreamSession:
    """An aiohttp session whose requests never follow redirects (the one way to open one)
    and which keeps no cookies.

    A redirect answer comes back as it is, for the caller to treat as an upstream error. A
    cookie an upstream sets is dropped: kept, it would go upstream with every later request
    of every client (and a jar costs CPU on each request).
    """

    __slots__ = ("_session",)

    def __init__(self, total: float, connect: float) -> None:
        import aiohttp  # only the gateway's background calls use it (about 0.2 s to import)

        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=total, connect=connect),
            cookie_jar=aiohttp.DummyCookieJar(),
        )

    def request(self, method: str, url: str | URL, **kwargs: Any) -> _RequestContextManager:
        kwargs["allow_redirects"] = False
        return self._session.request(method, url, **kwargs)

    def get(self, url: str | URL, **kwargs: Any) -> _RequestContextManager:
        return self.request("GET", url, **kwargs)

    def post(self, url: str | URL, **kwargs: Any) -> _RequestContextManager:
        return self.request("POST", url, **kwargs)

    @property
    def closed(self) -> bool:
        return self._session.closed

    async def close(self) -> None:
        await self._session.close()


@dataclass(frozen=True, slots=True)
class KeepAlive:
    """What a provider kind's HTTP server does with kept-alive connections."""

    idle_seconds: float = 60.0  # how long an idle pooled connection is kept
    after_stream: bool = True  # whether a streamed answer's connection may serve another


# where a server differs from keeping every connection open: cpp-httplib (llama.cpp) closes
# idle ones after 5 s, and uvicorn (vLLM's and SGLang's server) after its 5 s default
KEEP_ALIVE: dict[str, KeepAlive] = {
    "llamacpp": KeepAlive(idle_seconds=4.0, after_stream=False),
    "vllm": KeepAlive(idle_seconds=4.0),
    "sglang": KeepAlive(idle_seconds=4.0),
}
_DEFAULT_KEEP_ALIVE = KeepAlive()

# The most connections a provider's pool opens when its `max_concurrency` is not set: the
# pool grows with demand up to this, so requests queue in the upstream, whose queue depth
# and 429s the gateway reads, not unseen in the gateway. Hosted APIs take thousands of
# concurrent requests; an engine's own scheduler (vLLM's `max_num_seqs`, SGLang's
# `max_running_requests`, llama.cpp's slots, Ollama's `OLLAMA_NUM_PARALLEL`) admits what it
# can and queues the rest itself.
POOL_BOUND: dict[str, int] = {
    "openai": 4096,
    "openrouter": 4096,
    "anthropic": 4096,
    "vllm": 1024,
    "sglang": 1024,
    "llamacpp": 1024,
    "ollama": 1024,
}
_DEFAULT_POOL_BOUND = 1024


def pool_limit(provider: Provider) -> int:
    """The most connections the provider's pool opens at once: its `max_concurrency`, or
    its kind's bound."""
    if provider.max_concurrency is not None:
        return provider.max_concurrency
    return POOL_BOUND.get(provider.kind, _DEFAULT_POOL_BOUND)


@dataclass(frozen=True, slots=True)
class ProviderClient:
    http: Http1Pool  # proxied requests and the gateway's own (counts, Ollama listings)
    timeouts: Timeouts
    headers: dict[str, str]
    base_url: str
    # this provider's credentials out of its error text, before any of it is cut short
    redactor: Redactor
    # the headers of a streamed request (with `Connection: close` where the server ends the
    # connection after a stream anyway)
    stream_headers: dict[str, str] = field(default_factory=dict)


async def call(
    client: ProviderClient,
    method: str,
    url: str,
    body: bytes = b"",
    extra_headers: Mapping[str, str] | None = None,
) -> tuple[int, bytes]:
    """One request on the provider's pool with its headers (and `extra_headers`): the
    answer's status and whole body (the gateway's own calls: exact counts, Ollama's
    listings)."""
    headers = {**client.headers, **extra_headers} if extra_headers else client.headers
    resp = await client.http.request(method, url, headers, body, client.timeouts)
    try:
        return resp.status, await resp.read()
    finally:
        resp.close()


def _auth(provider: Provider, key: str) -> dict[str, str]:
    if provider.kind == "anthropic":
        return {"x-api-key": key}
    return {"Authorization": f"Bearer {key}"}


def _headers(provider: Provider) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    if provider.kind == "anthropic":
        headers["anthropic-version"] = "2023-06-01"  # required by the Messages API
    if provider.api_key:
        headers.update(_auth(provider, provider.api_key))
    headers.update(provider.headers)
    return headers


def request_headers(
    client: ProviderClient, provider: Provider, key_label: str | None, stream: bool = False
) -> dict[str, str]:
    """The provider's headers (a stream's, when streaming), with the labelled credential
    instead of the default one."""
    headers = client.stream_headers if stream else client.headers
    if key_label is None:
        return headers
    credential = provider.credential(key_label)
    if credential is None or credential[0] is None:
        return headers  # availability has dropped such a route already
    return {**headers, **_auth(provider, credential[0])}


class UpstreamPool:
    """One connection pool (`http1.Http1Pool`) per provider, created on first use."""

    def __init__(self) -> None:
        self._clients: dict[str, tuple[Provider, ProviderClient]] = {}
        self._retired: list[ProviderClient] = []

    def client(self, provider: Provider) -> ProviderClient:
        entry = self._clients.get(provider.id)
        if entry is not None and entry[0] is provider:
            return entry[1]
        return self._create(provider, entry)

    def _create(
        self, provider: Provider, old: tuple[Provider, ProviderClient] | None
    ) -> ProviderClient:
        if old is not None:
            # The provider changed (a new fleet snapshot): keep the pool if its connection
            # settings are the same; otherwise retire it (closed at shutdown, so requests
            # still using it finish).
            prev, client = old
            same = (prev.base_url, prev.max_concurrency, prev.kind)
            if same == (provider.base_url, provider.max_concurrency, provider.kind):
                client = _client(client.http, provider)
                self._clients[provider.id] = (provider, client)
                return client
            self._retired.append(client)
        idle_seconds = KEEP_ALIVE.get(provider.kind, _DEFAULT_KEEP_ALIVE).idle_seconds
        http = Http1Pool(
            provider.base_url,
            limit=pool_limit(provider),
            idle_seconds=idle_seconds,
            name=provider.id,
            capped=provider.max_concurrency is not None,
        )
        client = _client(http, provider)
        self._clients[provider.id] = (provider, client)
        return client

    async def close(self) -> None:
        clients = [c for _, c in self._clients.values()] + self._retired
        self._clients.clear()
        self._retired.clear()
        await asyncio.gather(*(c.http.close() for c in clients), return_exceptions=True)


def _client(http: Http1Pool, provider: Provider) -> ProviderClient:
    headers = _headers(provider)
    keep = KEEP_ALIVE.get(provider.kind, _DEFAULT_KEEP_ALIVE)
    t = provider.timeouts
    return ProviderClient(
        http,
        Timeouts(connect=t.connect, read=t.first_byte, total=t.total),
        headers,
        provider.base_url,
        redactor_for([provider]),
        headers if keep.after_stream else {**headers, "Connection": "close"},
    )
