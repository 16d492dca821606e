"""The request log in the store: one row per request and one per attempt, written in batches.

`RequestLog` is a `RecordSink` for the `Recorder`, which already batches records off the
hot path and counts the ones it drops. Rows hold numbers and ids, never prompt or
completion text, never secrets.
"""

from __future__ import annotations

import base64
import itertools
import logging
import random
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

import orjson
from sqlalchemy import JSON, Table, and_, delete, or_, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from fleetgate.record.recorder import RequestRecord
from fleetgate.store.tables import attempts, requests

log = logging.getLogger("fleetgate.record")


def _request_row(uid: str, r: RequestRecord) -> dict[str, Any]:
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
    return {
        "uid": uid,
        "request_id": r.request_id,
        "time": r.time,
        "client_key_id": r.client_key_id,
        "endpoint": r.endpoint,
        "requested_model": r.requested_model,
        "resolution": r.resolution,
        "virtual_model": resolution.get("virtual_model"),
        "tier": resolution.get("tier"),
        "context_tier": notes.get("context_tier"),
        "deployment_id": r.deployment_id,
        "provider_id": r.provider_id,
        "upstream_model": final.upstream_model if final else None,
        "stream": r.stream,
        "status": r.status,
        "error_code": r.error_code,
        "error_class": last.error_class if last else None,
        "latency": r.latency,
        "ttft": final.ttft if final else None,
        "overhead": r.overhead,
        "prompt_tokens": prompt,
        "completion_tokens": final.completion_tokens if final else None,
        "tokens_estimated": estimated,
        "context_estimate": context_estimate,
        "context_exact": notes.get("context_exact"),
        "fallback_count": max(len(r.attempts) - 1, 0),
        "dropped": r.dropped or None,
    }


def _attempt_rows(uid: str, r: RequestRecord) -> list[dict[str, Any]]:
    return [
        {
            "request_uid": uid,
            "idx": a.index,
            "deployment_id": a.deployment_id,
            "provider_id": a.provider_id,
            "upstream_model": a.upstream_model,
            "scope": a.scope,
            "status": a.status,
            "error_class": a.error_class,
            "latency": a.latency,
            "ttft": a.ttft,
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
        }
        for a in r.attempts
    ]


@dataclass(frozen=True, slots=True)
class Page:
    rows: list[dict[str, Any]]
    next_cursor: str | None


def encode_cursor(row_time: float, uid: str) -> str:
    return base64.urlsafe_b64encode(f"{row_time!r}|{uid}".encode()).decode()


def decode_cursor(cursor: str) -> tuple[float, str]:
    """Raises ValueError on a cursor this module did not make."""
    text = base64.urlsafe_b64decode(cursor.encode()).decode()
    when, _, uid = text.partition("|")
    if not uid:
        raise ValueError("bad cursor")
    return float(when), uid


def parse_since(value: str) -> float:
    """Epoch seconds, or an ISO-8601 time (UTC when it names no zone)."""
    try:
        return float(value)
    except ValueError:
        pass
    when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if when.tzinfo is None:
        return when.replace(tzinfo=datetime.now().astimezone().tzinfo).timestamp()
    return when.timestamp()


_uid_counter = itertools.count()


def _time_ordered_uid() -> str:
    """Unique and increasing with time, so rows append to the primary-key index instead of
    landing at random places in it."""
    return f"{time.time_ns():016x}{next(_uid_counter) & 0xFFFF:04x}{random.getrandbits(16):04x}"


class RequestLog:
    """A `RecordSink`. When the database is unreachable, rows wait (up to `capacity`
    requests, the oldest dropped and counted) and go with the next batch."""

    def __init__(self, engine: AsyncEngine, capacity: int = 10_000) -> None:
        self.engine = engine
        self.capacity = capacity
        self.written = 0
        self.dropped = 0  # rows lost because the database stayed unreachable
        self.failures = 0  # batches that could not be written (and were kept)
        self._pending: deque[tuple[dict[str, Any], list[dict[str, Any]]]] = deque()

    async def write(self, records: list[RequestRecord]) -> None:
        for record in records:
            uid = _time_ordered_uid()
            if len(self._pending) >= self.capacity:
                self._pending.popleft()
                self.dropped += 1
            self._pending.append((_request_row(uid, record), _attempt_rows(uid, record)))
        batch = list(self._pending)
        request_rows = [row for row, _ in batch]
        attempt_rows = [a for _, rows in batch for a in rows]
        try:
            async with self.engine.begin() as conn:
                for table, rows in ((requests, request_rows), (attempts, attempt_rows)):
                    if rows:
                        await conn.exec_driver_sql(self._insert_sql(table), _as_tuples(table, rows))
        except (SQLAlchemyError, OSError) as exc:
            self.failures += 1
            log.warning(
                "request log: cannot write %d row(s) (%s); keeping them for the next batch",
                len(batch),
                type(exc).__name__,
            )
            return
        for _ in batch:
            self._pending.popleft()
        self.written += len(request_rows)

    def _insert_sql(self, table: Table) -> str:
        # Plain driver-level executemany: the log is the one bulk writer, and skipping
        # SQLAlchemy's per-row parameter processing halves its CPU cost per row.
        names = [c.name for c in table.columns]
        if self.engine.dialect.paramstyle == "numeric_dollar":
            marks = ", ".join(f"${i + 1}" for i in range(len(names)))
        else:
            marks = ", ".join("?" for _ in names)
        return f"INSERT INTO {table.name} ({', '.join(names)}) VALUES ({marks})"

    async def purge(self, older_than: float, chunk: int = 1000) -> int:
        """Delete rows older than `older_than` (epoch seconds), `chunk` requests per
        transaction so a big backlog never holds long locks. Returns how many went."""
        total = 0
        while True:
            async with self.engine.begin() as conn:
                uids = list(
                    (
                        await conn.execute(
                            select(requests.c.uid).where(requests.c.time < older_than).limit(chunk)
                        )
                    ).scalars()
                )
                if not uids:
                    return total
                await conn.execute(delete(attempts).where(attempts.c.request_uid.in_(uids)))
                await conn.execute(delete(requests).where(requests.c.uid.in_(uids)))
            total += len(uids)
            if len(uids) < chunk:
                return total

    async def page(
        self,
        *,
        model: str | None = None,
        status: str | None = None,
        since: float | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        """Newest first; `cursor` continues after the last row of the previous page."""
        query = select(requests)
        if model is not None:
            query = query.where(requests.c.requested_model == model)
        if status is not None:
            if status == "ok":
                query = query.where(requests.c.status < 400)
            elif status == "error":
                query = query.where(requests.c.status >= 400)
            else:
                query = query.where(requests.c.status == int(status))
        if since is not None:
            query = query.where(requests.c.time >= since)
        if cursor is not None:
            when, uid = decode_cursor(cursor)
            query = query.where(
                or_(requests.c.time < when, and_(requests.c.time == when, requests.c.uid < uid))
            )
        query = query.order_by(requests.c.time.desc(), requests.c.uid.desc()).limit(limit + 1)
        async with self.engine.connect() as conn:
            rows = [dict(r._mapping) for r in await conn.execute(query)]
        more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = encode_cursor(rows[-1]["time"], rows[-1]["uid"]) if more else None
        return Page([_public(r) for r in rows], next_cursor)

    async def get(self, request_id: str) -> dict[str, Any] | None:
        """The newest request with this id, with its attempts in order."""
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(requests)
                    .where(requests.c.request_id == request_id)
                    .order_by(requests.c.time.desc())
                    .limit(1)
                )
            ).first()
            if row is None:
                return None
            found = dict(row._mapping)
            tries = await conn.execute(
                select(attempts)
                .where(attempts.c.request_uid == found["uid"])
                .order_by(attempts.c.idx)
            )
            found["attempts"] = [
                {k: v for k, v in a._mapping.items() if k != "request_uid"} for a in tries
            ]
        return _public(found)


@cache
def _columns(table: Table) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The column names in table order, and the positions of the JSON ones."""
    names = tuple(c.name for c in table.columns)
    json_at = tuple(i for i, c in enumerate(table.columns) if isinstance(c.type, JSON))
    return names, json_at


def _as_tuples(table: Table, rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Rows in column order, JSON columns encoded (the driver gets them as text)."""
    names, json_at = _columns(table)
    out = []
    for row in rows:
        values = [row[name] for name in names]
        for i in json_at:
            if values[i] is not None:
                values[i] = orjson.dumps(values[i]).decode()
        out.append(tuple(values))
    return out


def _public(row: dict[str, Any]) -> dict[str, Any]:
    row.pop("uid", None)
    row["id"] = row.pop("request_id")
    return row


def retention_cutoff(days: float, now: float | None = None) -> float:
    return (time.time() if now is None else now) - days * 86400
