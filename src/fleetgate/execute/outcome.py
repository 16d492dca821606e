"""What one upstream attempt came to, and how the chain reacts to it."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

# error classes, recorded per attempt
CONNECT = "connect"  # refused, unresolvable, or the connect timeout
TIMEOUT = "timeout"  # no first byte in time, or the answer stalled before it was whole
RESET = "reset"  # the connection broke before a whole answer arrived
INVALID_RESPONSE = "invalid_response"  # a 200 whose body or first events are not JSON
RATE_LIMITED = "rate_limited"
SERVER_ERROR = "server_error"
CLIENT_ERROR = "client_error"
STREAM_BROKEN = "stream_broken"  # after output had reached the client
SKIPPED = "skipped"
# an upstream's context-length 400: moves on only to a strictly larger window; no cooldown
CONTEXT_EXCEEDED = "context_exceeded"
# a whole 200 a window cut short, set aside for a strictly larger window (no cooldown)
CUT_SHORT = "cut_short"
# a 3xx: never followed (it would take the credentials along); a failure of the deployment
REDIRECTED = "redirected"

RETRYABLE = frozenset(
    {CONNECT, TIMEOUT, RESET, INVALID_RESPONSE, RATE_LIMITED, SERVER_ERROR, REDIRECTED}
)


@dataclass(slots=True)
class Attempt:
    """One row of the request log: what happened when one candidate was tried."""

    index: int
    deployment_id: str
    provider_id: str
    upstream_model: str
    scope: str
    status: int | None = None
    error_class: str | None = None
    latency: float = 0.0  # seconds until the response (or the stream) ended
    ttft: float | None = None  # seconds until the first byte of the answer
    # seconds waited in the gateway for the provider's worker slot and pooled connection
    pool_wait: float = 0.0
    retry_after: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish: str | None = None  # the answer's stop reason (`length` for every length stop)
    params: dict[str, Any] | None = None  # the overrides of this attempt's own scope
    key_label: str | None = None
    virtual_model: str | None = None
    tier: str | None = None
    quantization: str | None = None
    dropped_params: list[str] | None = None  # unsupported knobs removed from the body sent
    preferences: dict[str, Any] | None = None  # the provider preferences in force
    wire: str | None = None  # "native", or the translation: "messages→chat.completions"
    began: float = 0.0  # perf_counter when it started
    # with tracing on: its CLIENT span's id (the upstream's `traceparent` names it); while
    # sampled, what the answer said of itself and how long its translation took
    span_id: bytes | None = None  # 8 bytes, as the span carries it
    response_id: str | None = None
    response_model: str | None = None
    cache_read_tokens: int | None = None
    translated: float | None = None  # seconds spent translating the request body
    # a continuation of an answer cut mid-way (`execute/resume.py`): why it was cut
    # ("interrupted" | "window"), and the output tokens it took over from the attempts before
    continuation: str | None = None
    inherited_tokens: int | None = None
    # what failed, in a few words: `connect refused`, `connect timeout`, `timeout`, `reset`,
    # or the status (`503`); None when the attempt worked
    failure: str | None = None
    # kept for the client's error message only; never logged
    message: str = field(default="", repr=False)
    upstream_body: bytes | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.error_class is None

    @property
    def retryable(self) -> bool:
        return self.error_class in RETRYABLE


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait, from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:  # delta-seconds are digits: not inf, nan or a negative (an HTTP date may be past)
        return seconds if 0.0 <= seconds < math.inf else None
    import email.utils  # an HTTP date is rare: the email package (~1 MB) only then

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def failure_of(attempt: Attempt) -> str | None:
    """What failed in `attempt`, in a few words (its `failure`, else its status or class)."""
    if attempt.error_class is None:
        return None
    if attempt.failure:
        return attempt.failure
    if attempt.status is not None and attempt.status >= 300:
        return str(attempt.status)
    return attempt.error_class.replace("_", " ")


def classify_status(status: int) -> str | None:
    if status < 300:
        return None
    if status < 400:
        return REDIRECTED
    if status == 429:
        return RATE_LIMITED
    if status >= 500 or status == 408:
        return SERVER_ERROR
    return CLIENT_ERROR


def redirect_message(location: str | None) -> str:
    """What a redirect answer is said to be: where it pointed (scheme and host only)."""
    where = "elsewhere"
    if location:
        try:
            url = urlsplit(location)
            host = url.hostname
        except ValueError:  # an upstream's header need not be a URL (an unclosed IPv6 host)
            pass
        else:
            scheme = f"{url.scheme}:" if url.scheme else ""  # `//host/…`: the request's own
            where = f"{scheme}//{host}" if host else "another path"
    return (
        f"redirected to {where}; fleetgate never follows an upstream's redirects "
        "(check the provider's base_url)"
    )


def error_message(body: bytes, limit: int = 500) -> str:
    """The human message of an upstream error body, whatever its shape."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body[:limit].decode("utf-8", "replace").strip()
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or err.get("msg")
            if isinstance(msg, str):
                return msg[:limit]
        elif isinstance(err, str):
            return err[:limit]
        detail = data.get("detail")
        if isinstance(detail, str):
            return detail[:limit]
    return body[:limit].decode("utf-8", "replace").strip()
