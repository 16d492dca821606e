"""Runtime state shared between replicas through Redis.

Reads stay synchronous on a local mirror (a `MemoryState`), so routing never awaits.
Every change to a deployment's circuit, cooldown or EMAs is applied locally first, then
queued to Redis as one atomic script on the deployment's entry of a hash (which replicas
load at start-up); the script publishes the result, which every replica (this one too)
applies at once. Failures are counted in the script, so failures seen at the same moment
on several replicas add up: the cluster as a whole opens the circuit at its threshold.

In-flight counts are approximate: each replica publishes its own counts about twice a
second (while they change or are non-zero), and every replica's mirror holds its own
count plus the others' last published ones; a replica that stops publishing drops out
after a few seconds. The context estimate's calibration: each replica publishes the
samples it observed every `CALIBRATION_INTERVAL` (the ratios, and each answer's tally and
prompt tokens for the deployment's tokenizer fit) and every replica adds the others' to its
own book, so all learn from all traffic; the changed books go to a hash that a starting
replica loads. Without Redis this is a `MemoryState`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import orjson
from redis.exceptions import RedisError

from fleetgate.config.schema import CircuitConfig
from fleetgate.context.tally import LAYOUT
from fleetgate.logs import fields as log_fields
from fleetgate.state.redis_link import RedisLink
from fleetgate.state.runtime import (
    CIRCUIT_OPEN,
    MAX_PROBE_HOLD,
    RATE_LIMITED,
    MemoryState,
    threshold,
)

_SHARED = (
    "consecutive_failures",
    "open_until",
    "open_reason",
    "open_cause",
    "ttft_ema",
    "tps_ema",
    "latency_ema",
)


# KEYS[1] the health hash; ARGV: channel, deployment, op, now, then per op:
# failure: threshold, cooldown, probing (1/0), reason, cause; cooldown: until, reason;
# success: the fields to set (JSON)
_HEALTH = """
local raw = redis.call('HGET', KEYS[1], ARGV[2])
local h = raw and cjson.decode(raw) or {}
local now = tonumber(ARGV[4])
local open_until = tonumber(h.open_until) or 0
if ARGV[3] == 'failure' then
  local count = (tonumber(h.consecutive_failures) or 0) + 1
  h.consecutive_failures = count
  if ARGV[7] == '1' or count >= tonumber(ARGV[5]) then
    local untl = now + tonumber(ARGV[6])
    if untl > open_until then
      h.open_until = untl; h.open_reason = ARGV[8]; h.open_cause = ARGV[9]
    end
  end
elseif ARGV[3] == 'cooldown' then
  local untl = tonumber(ARGV[5])
  if untl > open_until then h.open_until = untl; h.open_reason = ARGV[6] end
else
  for k, v in pairs(cjson.decode(ARGV[5])) do h[k] = v end
end
local fields = cjson.encode(h)
redis.call('HSET', KEYS[1], ARGV[2], fields)
redis.call('PUBLISH', ARGV[1], '{"type":"health","origin":"redis","deployment":'
  .. cjson.encode(ARGV[2]) .. ',"fields":' .. fields .. '}')
return fields
"""

# KEYS[1] a hash; ARGV: field, value (the link's writes are scripts)
_HSET = "return redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])"

# KEYS[1] a deployment's probe claim; ARGV[1] the replica that holds it
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

log = logging.getLogger("fleetgate.state")

INFLIGHT_INTERVAL = 0.5  # seconds between in-flight publications
CALIBRATION_INTERVAL = 2.0  # seconds between publications of calibration samples
INFLIGHT_STALE = 5.0  # a replica silent this long no longer counts


class RedisState(MemoryState):
    def __init__(self) -> None:
        super().__init__()
        self.link: RedisLink | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        # other replicas' in-flight counts: replica -> (counts by deployment, when heard)
        self._remote: dict[str, tuple[dict[str, int], float]] = {}
        self._published: dict[str, int] = {}

    def attach(self, link: RedisLink) -> None:
        self.link = link
        self._health_script = link.client.register_script(_HEALTH)
        self._hset = link.client.register_script(_HSET)
        self._release = link.client.register_script(_RELEASE)
        link.on("health", self._apply)
        link.on("inflight", self._apply_inflight)
        link.on("calibration", self._apply_calibration)
        link.on("resync", lambda _event: self._load_snapshot())
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._load_snapshot()),
            loop.create_task(self._publish_inflight()),
            loop.create_task(self._publish_calibration()),
        ]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        self.share_calibration()  # the last samples, queued before the link stops

    def _remote_count(self, deployment_id: str) -> int:
        return sum(counts.get(deployment_id, 0) for counts, _ in self._remote.values())

    def local_inflight(self, deployment_id: str) -> int:
        return self.health(deployment_id).inflight - self._remote_count(deployment_id)

    def _set_remote(self, replica: str, counts: dict[str, int] | None, now: float) -> None:
        old = self._remote.pop(replica, ({}, 0.0))[0]
        if counts is not None:
            self._remote[replica] = (counts, now)
        for dep_id in set(old) | set(counts or {}):
            # the mirror's count is local + remote, so shift it by the remote change
            self.health(dep_id).inflight += (counts or {}).get(dep_id, 0) - old.get(dep_id, 0)

    def _apply_inflight(self, event: dict[str, Any]) -> None:
        counts = {str(k): int(v) for k, v in event.get("counts", {}).items()}
        self._set_remote(str(event["origin"]), counts, time.monotonic())

    async def _publish_inflight(self) -> None:
        while True:
            await asyncio.sleep(INFLIGHT_INTERVAL)
            now = time.monotonic()
            for replica, (_, heard) in list(self._remote.items()):
                if now - heard > INFLIGHT_STALE:
                    self._set_remote(replica, None, now)
            if self.link is None:
                continue
            local = {d: n for d in self._health if (n := self.local_inflight(d))}
            if local or self._published:
                self.link.announce({"type": "inflight", "counts": local})
            self._published = local

    async def _load_snapshot(self) -> None:
        assert self.link is not None
        for dep_id, fields in (await self.link.read_hash("health")).items():
            self._apply({"deployment": dep_id, "fields": fields})
        for dep_id, data in (await self.link.read_hash("calibration")).items():
            self.calibration.put(dep_id, data)  # adopted when newer than ours

    def _apply_calibration(self, event: dict[str, Any]) -> None:
        for dep_id, samples in event.get("samples", {}).items():
            for ratio, when in samples:
                self.calibration.observe(str(dep_id), float(ratio), float(when), shared=True)
        answers = event.get("answers")
        if answers and self.calibration.observe_shared_answers(answers, event.get("layout")):
            self.calibration.refit()  # a replica without traffic of its own learns too

    def share_calibration(self) -> None:
        """Publish the samples observed here, and store the books they changed."""
        book = self.calibration
        samples = book.take_samples()
        answers = book.take_answers()  # tallies and prompt tokens: each tokenizer's fit
        if self.link is None:
            return
        if samples or answers:
            event = {"type": "calibration", "samples": samples, "answers": answers}
            self.link.announce({**event, "layout": LAYOUT})
        link = self.link
        for dep_id, data in book.take_changed().items():
            link.run_script(self._hset, [link.key("calibration")], [dep_id, orjson.dumps(data)])

    async def _publish_calibration(self) -> None:
        while True:
            await asyncio.sleep(CALIBRATION_INTERVAL)
            self.share_calibration()

    def _apply(self, event: dict[str, Any]) -> None:
        dep_id = str(event["deployment"])
        h = self.health(dep_id)
        now = time.time()
        was_open = h.open_until > now and h.open_reason == CIRCUIT_OPEN
        was_failing = bool(h.consecutive_failures or h.open_until)
        for name, value in event["fields"].items():
            if name in _SHARED:
                setattr(h, name, value)
        if h.open_until and h.open_until > now:
            h.probing = False
        # a change this replica did not make itself (its own are logged as it makes them)
        if not was_open and h.open_until > now and h.open_reason == CIRCUIT_OPEN:
            log.warning(
                "circuit open: %s (%s; counted across replicas); out for %gs",
                dep_id,
                h.open_cause or "failures",
                round(h.open_until - now, 1),
                extra=log_fields(
                    event="circuit_open",
                    deployment=dep_id,
                    reason=h.open_cause or "failures",
                    origin="replica",
                ),
            )
        elif was_failing and not (h.consecutive_failures or h.open_until):
            log.info(
                "circuit closed: %s (by another replica)",
                dep_id,
                extra=log_fields(event="circuit_closed", deployment=dep_id, origin="replica"),
            )

    def _share(self, deployment_id: str, op: str, now: float, *args: Any) -> None:
        """Merge a change into the cluster's entry for the deployment (see `_HEALTH`)."""
        if self.link is None:
            return
        link = self.link
        argv = [link.channel, deployment_id, op, now, *args]
        link.run_script(self._health_script, [link.key("health")], argv)

    async def claim_probe(self, deployment_id: str, hold_seconds: float) -> bool:
        """One half-open probe for the whole cluster: the replica that sets the claim
        first sends it; the others route around the deployment until its result is shared.
        While Redis is down, each replica probes on its own (local state is the truth)."""
        return await self._claim("probe", deployment_id, min(hold_seconds, MAX_PROBE_HOLD))

    def _end_probe(self, deployment_id: str) -> None:
        """The probe's result is in: free the claim (the next probe, after the next
        cooldown, may be anyone's)."""
        if self.link is not None and self.health(deployment_id).probing:
            link = self.link
            link.run_script(self._release, [link.key("probe", deployment_id)], [link.replica])

    def settle_probe(self, deployment_id: str) -> None:
        self._end_probe(deployment_id)
        super().settle_probe(deployment_id)

    def record_success(
        self, deployment_id: str, ttft: float | None, latency: float, tokens: int | None
    ) -> None:
        self._end_probe(deployment_id)
        super().record_success(deployment_id, ttft, latency, tokens)
        h = self.health(deployment_id)
        fields = orjson.dumps({name: getattr(h, name) for name in _SHARED})
        self._share(deployment_id, "success", time.time(), fields)

    def record_failure(
        self,
        deployment_id: str,
        now: float,
        circuit: CircuitConfig,
        severe: bool = False,
        cause: str = "",
    ) -> None:
        probing = self.health(deployment_id).probing
        self._end_probe(deployment_id)
        super().record_failure(deployment_id, now, circuit, severe, cause)
        limit = threshold(circuit, severe)
        flag = "1" if probing else "0"
        cooldown = circuit.cooldown_seconds
        self._share(
            deployment_id, "failure", now, limit, cooldown, flag, CIRCUIT_OPEN, cause or "failures"
        )

    def keep_out(self, deployment_id: str, until: float, cause: str) -> None:
        before = self.health(deployment_id).open_until
        super().keep_out(deployment_id, until, cause)
        if self.health(deployment_id).open_until != before:
            self._share(deployment_id, "cooldown", time.time(), until, CIRCUIT_OPEN)

    async def claim_check(self, provider_id: str, hold_seconds: float) -> bool:
        """One replica checks a provider per interval: whichever sets the claim first
        (while Redis is down, each replica checks on its own)."""
        return await self._claim("check", provider_id, hold_seconds)

    async def _claim(self, kind: str, name: str, hold_seconds: float) -> bool:
        """Whether this replica set the cluster-wide claim `kind` on `name` first (held
        `hold_seconds`); True while Redis is down: each replica acts on its own then."""
        link = self.link
        if link is None or not link.healthy:
            return True
        hold = max(1, int(hold_seconds * 1000))
        try:
            claimed = await link.client.set(link.key(kind, name), link.replica, nx=True, px=hold)
        except (RedisError, OSError) as exc:
            link.fail(exc)
            return True
        return bool(claimed)

    def recover(self, deployment_id: str, how: str) -> bool:
        """Close the circuit here and for every replica (see `MemoryState.recover`)."""
        self._end_probe(deployment_id)
        if not super().recover(deployment_id, how):
            return False
        h = self.health(deployment_id)
        fields_ = orjson.dumps({name: getattr(h, name) for name in _SHARED})
        self._share(deployment_id, "success", time.time(), fields_)
        return True

    def record_rate_limit(
        self,
        deployment_id: str,
        now: float,
        retry_after: float | None,
        circuit: CircuitConfig,
        reason: str = RATE_LIMITED,
    ) -> float:
        self._end_probe(deployment_id)
        until = super().record_rate_limit(deployment_id, now, retry_after, circuit, reason)
        h = self.health(deployment_id)
        self._share(deployment_id, "cooldown", now, until, h.open_reason)
        return until
