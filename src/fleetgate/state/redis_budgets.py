"""Budgets exact across replicas: each key's spend and its requests' holds live in Redis,
checked and held in one atomic script before dispatch, settled in another after.

Per key: `budget:<id>:spent` (the cluster's total, seeded from the store's when Redis has
none), `budget:<id>:held` (a sorted set of holds, scored by when they expire, so a replica
that vanished mid-request frees its holds), `budget:<id>:last` (the last served request's
cost: what the next one holds). While Redis is down each replica holds locally
(`LocalBudgets`) and its settles wait in the link's outbox, never dropped.
"""

from __future__ import annotations

import time

from redis.exceptions import RedisError

from fleetgate.auth.budgets import Hold, LocalBudgets
from fleetgate.auth.keys import ClientKey
from fleetgate.state.redis_link import RedisLink

_HOLD = """
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('SET', KEYS[1], ARGV[6]) end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[5])
local held = 0
for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  held = held + tonumber(string.match(member, '^([^|]*)|'))
end
local spent = tonumber(redis.call('GET', KEYS[1]))
if spent + held >= tonumber(ARGV[1]) then return {0, tostring(spent + held)} end
local amount = math.max(tonumber(ARGV[2]), tonumber(redis.call('GET', KEYS[3]) or '0'))
local member = string.format('%.17g', amount) .. '|' .. ARGV[3]
redis.call('ZADD', KEYS[2], ARGV[4], member)
redis.call('EXPIREAT', KEYS[2], math.ceil(tonumber(ARGV[4])))
return {1, member}
"""

_SETTLE = """
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('SET', KEYS[1], ARGV[3]) end
if ARGV[1] ~= '' then redis.call('ZREM', KEYS[2], ARGV[1]) end
local cost = tonumber(ARGV[2])
if cost > 0 then
  redis.call('INCRBYFLOAT', KEYS[1], ARGV[2])
  redis.call('SET', KEYS[3], ARGV[2])
end
return 1
"""


class RedisBudgets:
    def __init__(self, link: RedisLink, local: LocalBudgets) -> None:
        self.link = link
        self.local = local
        self._hold = link.client.register_script(_HOLD)
        self._settle = link.client.register_script(_SETTLE)

    def _keys(self, key_id: str) -> list[str]:
        return [self.link.key("budget", key_id, part) for part in ("spent", "held", "last")]

    async def hold(self, key: ClientKey, amount: float, request_id: str, ttl: float) -> Hold | None:
        if not self.link.healthy or key.budget is None:
            return self.local.hold_now(key, amount, request_id)
        now = time.time()
        args = [key.budget, repr(amount), request_id, now + ttl, now, repr(key.spent)]
        try:
            allowed, member = await self._hold(keys=self._keys(key.id), args=args)
        except (RedisError, OSError) as exc:
            self.link.fail(exc)
            return self.local.hold_now(key, amount, request_id)
        if not allowed:
            return None
        token = member.decode() if isinstance(member, bytes) else str(member)
        return Hold(key.id, float(token.partition("|")[0]), token, shared=True)

    async def settle(self, key: ClientKey, hold: Hold, cost: float) -> None:
        if hold.settled:
            return
        self.local.settle_now(key, hold, cost)  # this replica's view, for when Redis goes
        args = [hold.token if hold.shared else "", repr(cost), repr(key.spent)]
        if self.link.healthy:
            try:
                await self._settle(keys=self._keys(key.id), args=args)
                return
            except (RedisError, OSError) as exc:
                self.link.fail(exc)
        # settled locally meanwhile; the cluster's total gets it when Redis is back
        self.link.run_script(self._settle, self._keys(key.id), args, durable=True)
