"""The request log's rows as the database driver writes them, and the batches they go in
when the serving process writes them (`RequestLog`, on its event loop).

Nothing here imports SQLAlchemy; the statements are `log_statements.py`'s, the batching
`row_queue.py`'s, which the writer process (`writer_child.py`) shares without this module's
records and event loop.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import orjson

from fleetgate.execute.outcome import Attempt
from fleetgate.outage import Outage
from fleetgate.record.recorder import BatchSink, RequestRecord
from fleetgate.store.row_queue import RowQueue, next_batch

if TYPE_CHECKING:
    from fleetgate.store.log_statements import Row

log = logging.getLogger("fleetgate.record")


def _attempt(a: Attempt) -> dict[str, Any]:
    """One attempt as stored: everything but the upstream's message and body."""
    return {
        "idx": a.index,
        "deployment_id": a.deployment_id,
        "provider_id": a.provider_id,
        "upstream_model": a.upstream_model,
        "scope": a.scope,
        "status": a.status,
        "error_class": a.error_class,
        "latency": a.latency,
        "ttft": a.ttft,
        "pool_wait": a.pool_wait,
        "retry_after": a.retry_after,
        "prompt_tokens": a.prompt_tokens,
        "completion_tokens": a.completion_tokens,
        "params": a.params,
        "key_label": a.key_label,
        "virtual_model": a.virtual_model,
        "tier": a.tier,
        "quantization": a.quantization,
        "dropped_params": a.dropped_params,
        "preferences": a.preferences,
        "wire": a.wire,
        "finish": a.finish,
        "failure": a.failure,
        "continuation": a.continuation,
        "inherited_tokens": a.inherited_tokens,
    }


def row_of(r: RequestRecord) -> tuple[Any, ...]:
    """The request's row, in `COLUMNS` order, JSON columns encoded (drivers take text)."""
    last = r.attempts[-1] if r.attempts else None
    final = last if last is not None and r.deployment_id == last.deployment_id else None
    notes = r.notes
    resolution = notes.get("resolution")
    if not isinstance(resolution, dict):
        resolution = {}
    context_estimate = notes.get("context_estimate")
    prompt = final.prompt_tokens if final else None
    estimated = False
    if prompt is None and isinstance(context_estimate, int):
        prompt, estimated = context_estimate, True
    return (
        r.request_id,
        r.time,
        r.client_key_id,
        r.endpoint,
        r.requested_model,
        r.resolution,
        r.virtual_model,
        resolution.get("tier"),
        notes.get("context_tier"),
        r.deployment_id,
        r.provider_id,
        final.upstream_model if final else None,
        r.stream,
        r.status,
        r.error_code,
        last.error_class if last else None,
        r.latency,
        final.ttft if final else None,
        r.overhead,
        prompt,
        final.completion_tokens if final else None,
        estimated,
        context_estimate,
        notes.get("context_exact"),
        max(len(r.attempts) - 1, 0),
        orjson.dumps(r.dropped).decode() if r.dropped else None,
        orjson.dumps([_attempt(a) for a in r.attempts]).decode(),
        r.trace_id,
        orjson.dumps(notes, default=str).decode() if notes else None,
    )


class RowBatches(RowQueue, BatchSink):
    """A `RowQueue` flushed on the event loop: `_write` (by the subclass) awaits each
    transaction."""

    def __init__(self, capacity: int, outage: Outage | None, yield_every: int) -> None:
        super().__init__(capacity, outage, yield_every, log)
        # one flush at a time: a second one begun while the first waits on the database
        # would write the same rows again, then take them off `_pending` a second time
        self._flushing = asyncio.Lock()

    async def _write(self, rows: list[Row]) -> None:
        """Write `rows` in one transaction (committed, or nothing written)."""
        raise NotImplementedError

    async def flush(self) -> None:
        """Write every pending row in one transaction (kept pending when that fails)."""
        if not self._pending:
            return
        async with self._flushing:
            batches = self.batches()
            batch = next_batch(batches.send, None)
            while batch is not None:
                try:
                    await self._write(batch)
                except BaseException as exc:
                    batch = next_batch(batches.throw, exc)
                else:
                    batch = next_batch(batches.send, None)
