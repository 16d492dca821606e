"""The link from one replica to Redis: a write queue off the hot path, pub/sub between
replicas, and graceful degradation when Redis goes away.

Nothing here ever fails a request: when Redis is unreachable the link marks itself down,
logs one warning, counts the error, and callers fall back to their local state until the
listener reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import urllib.parse
from collections import deque
from collections.abc import Callable
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from fleetgate.auth.limits import WINDOW, MemoryLimiter
from fleetgate.outage import Outage

log = logging.getLogger("fleetgate.redis")

RECONNECT_SECONDS = 0.5
_OUTBOX = 10_000  # queued writes kept while Redis is slow; the oldest go first

Handler = Callable[[dict[str, Any]], Any]


def default_namespace(url: str) -> str:
    """`fleetgate:<db>`: the database number of the URL (`/N` or `?db=N`; 0 by default).
    Keys already live per database, but pub/sub channels span them all."""
    parts = urllib.parse.urlsplit(url)
    db = parts.path.strip("/")
    if parts.scheme == "unix" or not db.isdigit():
        db = urllib.parse.parse_qs(parts.query).get("db", ["0"])[0]
    return f"fleetgate:{int(db) if db.isdigit() else 0}"


class RedisLink:
    def __init__(self, url: str, namespace: str | None = None) -> None:
        self.url = url
        self.namespace = namespace or default_namespace(url)
        self.replica = os.urandom(6).hex()
        self.channel = self.key("events")
        # short timeouts and one retry (which replaces a pooled connection that died with
        # an earlier Redis): a dead Redis must cost a request nothing noticeable
        self.client = aioredis.Redis.from_url(
            url, socket_timeout=0.5, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 1)
        )
        self.healthy = False
        self.outage = Outage("Redis", log, url.split("@")[-1])
        self.dropped_writes = 0
        self._handlers: dict[str, list[Handler]] = {}
        self._outbox: deque[tuple[str, Any]] = deque()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._subscribed = asyncio.Event()

    def key(self, *parts: str) -> str:
        return ":".join((self.namespace, *parts))

    def on(self, event_type: str, handler: Handler) -> None:
        self._handlers.setdefault(event_type, []).append(handler)

    async def start(self) -> None:
        try:
            await self.client.ping()
            self.healthy = True
        except (RedisError, OSError) as exc:
            self.fail(exc)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._listen()), loop.create_task(self._write())]
        # wait (briefly) until we hear other replicas, so no notification is missed
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._subscribed.wait(), 2.0)

    async def stop(self) -> None:
        await self._drain()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(RedisError, OSError):
            await self.client.aclose()

    # ---- health -------------------------------------------------------------------------
    def fail(self, exc: BaseException) -> None:
        """Count a failed operation; the first one of an outage logs a warning."""
        self.healthy = False
        self.outage.failed(exc, "using local state until it is back")

    def _recovered(self) -> None:
        self.healthy = True
        self.outage.ok()

    @property
    def errors(self) -> int:
        """The metric: Redis operations that failed."""
        return self.outage.failures

    @property
    def outages(self) -> int:
        return self.outage.outages

    @property
    def down_since(self) -> float | None:
        return self.outage.down_since

    def status(self) -> dict[str, Any]:
        return {
            "connected": self.healthy,
            "errors": self.errors,
            "outages": self.outages,
            "down_since": self.down_since,
            "dropped_writes": self.dropped_writes,
            "replica": self.replica,
        }

    # ---- writes (queued; the hot path only appends) --------------------------------------
    def announce(self, event: dict[str, Any]) -> None:
        """Publish an event to every other replica."""
        self._queue(("publish", {**event, "origin": self.replica}))

    def run_script(
        self, script: AsyncScript, keys: list[str], args: list[Any], durable: bool = False
    ) -> None:
        """Run a Lua script with the next batch; `durable`: kept while Redis is down."""
        self._queue(("script", (script, keys, args, durable)))

    def _queue(self, op: tuple[str, Any]) -> None:
        if len(self._outbox) >= _OUTBOX:
            self._outbox.popleft()
            self.dropped_writes += 1
        self._outbox.append(op)
        self._wake.set()

    async def _write(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._drain()

    async def _drain(self) -> None:
        if not self._outbox:
            return
        if not self.healthy:
            # While Redis is down, state writes are dropped (the local state is the truth
            # meanwhile); config and key notifications wait for the link to come back.
            kept = [op for op in self._outbox if _durable(op)]
            self.dropped_writes += len(self._outbox) - len(kept)
            self._outbox.clear()
            self._outbox.extend(kept)
            return
        ops = list(self._outbox)
        self._outbox.clear()
        kept = [op for op in ops if _durable(op)]
        pipe = self.client.pipeline(transaction=False)
        for op, arg in ops:
            if op == "publish":
                pipe.publish(self.channel, orjson.dumps(arg))
            else:
                script, keys, args, _ = arg
                await script(keys=keys, args=args, client=pipe)  # queued, not sent yet
        try:
            results = await pipe.execute(raise_on_error=False)
        except (RedisError, OSError) as exc:
            self.dropped_writes += len(ops) - len(kept)
            self._outbox.extendleft(reversed(kept))
            self.fail(exc)
            return
        for result in results:
            if isinstance(result, RedisError):  # a command Redis refused: a bug, not an outage
                log.error("Redis refused a write: %s", result)

    # ---- reads --------------------------------------------------------------------------
    async def read_hash(self, name: str) -> dict[str, dict[str, Any]]:
        try:
            raw = await self.client.hgetall(self.key(name))
        except (RedisError, OSError) as exc:
            self.fail(exc)
            return {}
        return {k.decode(): orjson.loads(v) for k, v in raw.items()}

    # ---- pub/sub ------------------------------------------------------------------------
    async def _listen(self) -> None:
        while True:
            pubsub = self.client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.channel)
                was_down = not self.healthy
                self._recovered()
                self._subscribed.set()
                if was_down:
                    # notifications may have been missed while down: catch up
                    await self._dispatch({"type": "resync"})
                    self._wake.set()
                while True:
                    if not self.healthy:
                        # a write failed but the subscription lives: confirm and resume
                        await self.client.ping()
                        self._recovered()
                        await self._dispatch({"type": "resync"})
                        self._wake.set()
                    message = await pubsub.get_message(timeout=1.0)
                    if message is None or message.get("type") != "message":
                        continue
                    event = orjson.loads(message["data"])
                    if event.get("origin") != self.replica:
                        await self._dispatch(event)
            except (RedisError, OSError) as exc:
                self.fail(exc)
                await asyncio.sleep(RECONNECT_SECONDS)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    async def _dispatch(self, event: dict[str, Any]) -> None:
        for handler in self._handlers.get(str(event.get("type")), []):
            try:
                result = handler(event)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("handling a %s event failed", event.get("type"))

    def limiter(self) -> RedisLimiter:
        return RedisLimiter(self)


def _durable(op: tuple[str, Any]) -> bool:
    """Notifications other replicas must not miss (config and key changes), and spend."""
    if op[0] == "script":
        return bool(op[1][3])
    return op[0] == "publish" and op[1].get("type") in ("config", "keys")


class RedisLimiter:
    """Cluster-exact fixed-window counters (INCRBY + EXPIRE in one MULTI); local when down."""

    def __init__(self, link: RedisLink) -> None:
        self.link = link
        self.fallback = MemoryLimiter()

    def _key(self, name: str, now: float) -> str:
        return self.link.key("rl", name, str(int(now // WINDOW)))

    async def _incr(self, name: str, amount: int, now: float) -> int | None:
        if not self.link.healthy:
            return None
        pipe = self.link.client.pipeline(transaction=True)
        key = self._key(name, now)
        pipe.incrby(key, amount)
        pipe.expire(key, int(WINDOW * 2))
        try:
            count, _ = await pipe.execute()
        except (RedisError, OSError) as exc:
            self.link.fail(exc)
            return None
        return int(count)

    async def hit(self, name: str, limit: int, now: float) -> bool:
        count = await self._incr(name, 1, now)
        if count is None:
            return await self.fallback.hit(name, limit, now)
        return count <= limit

    async def add(self, name: str, amount: int, now: float) -> None:
        if await self._incr(name, amount, now) is None:
            await self.fallback.add(name, amount, now)

    async def used(self, name: str, now: float) -> int:
        if self.link.healthy:
            try:
                value = await self.link.client.get(self._key(name, now))
                return int(value or 0)
            except (RedisError, OSError) as exc:
                self.link.fail(exc)
        return await self.fallback.used(name, now)
