"""The access log (`server.access_log`): one line per request, written by a recorder sink.

A line holds the request's id (`request_id`, as everywhere), endpoint, model, the
deployment that answered, status and error code, the deployments tried (with what failed
on each) and the timings: ids and numbers, never prompt text, completions or secrets.
`take` builds the line's fields in the loop turn after the request ended; `flush` writes
them with the recorder's other work, so the request itself never waits on the log's output.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

from fleetgate.execute.outcome import failure_of
from fleetgate.logs import fields
from fleetgate.record.recorder import BatchSink, RequestRecord

log = logging.getLogger("fleetgate.access")

MAX_PENDING = 10_000  # lines held between two flushes; beyond, the oldest are dropped


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def access_fields(record: RequestRecord) -> dict[str, Any]:
    """The named fields of a request's access-log line."""
    served = next((a for a in reversed(record.attempts) if a.ok), None)
    return {
        "event": "request",
        "request_id": record.request_id,
        "endpoint": record.endpoint,
        "model": record.requested_model,
        "deployment": record.deployment_id,
        "status": record.status,
        "error_code": record.error_code,
        "attempts": len(record.attempts),
        "tried": [
            f"{a.deployment_id}:{failure_of(a) or a.status}".replace(" ", "_")
            for a in record.attempts
        ],
        "stream": record.stream,
        "latency_ms": _ms(record.latency),
        "ttft_ms": _ms(served.ttft) if served is not None else None,
        "overhead_ms": _ms(record.overhead),
        "key": record.client_key_id,
    }


def access_line(values: dict[str, Any]) -> str:
    """The text of the line: `key=value` pairs, the unset ones left out."""
    parts = []
    for key, value in values.items():
        if key == "event" or value is None or value == []:
            continue
        if isinstance(value, list):
            value = ",".join(value)
        elif isinstance(value, bool):
            value = str(value).lower()
        parts.append(f"{key}={value}")
    return "request " + " ".join(parts)


class AccessLog(BatchSink):
    """A recorder sink that logs one line per request (logger `fleetgate.access`)."""

    def __init__(self) -> None:
        self._pending: deque[dict[str, Any]] = deque(maxlen=MAX_PENDING)
        log.setLevel(logging.INFO)  # asked for: written whatever the level of the rest

    def take(self, record: RequestRecord) -> None:
        self._pending.append(access_fields(record))

    async def flush(self) -> None:
        pending = self._pending
        while pending:
            values = pending.popleft()
            log.info(access_line(values), extra=fields(**values))
