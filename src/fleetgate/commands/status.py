"""`fleetgate status --url URL`: the live fleet of a running gateway, one line per
deployment (its state, window and source, in-flight requests, last error, EMAs), read
from `GET /admin/fleet` with the admin key from FLEETGATE_ADMIN_KEY."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from typing import Any

ADMIN_KEY_ENV = "FLEETGATE_ADMIN_KEY"


def fetch_fleet(url: str, key: str, timeout: float = 10.0) -> dict[str, Any]:
    request = urllib.request.Request(
        url.rstrip("/") + "/admin/fleet", headers={"Authorization": f"Bearer {key}"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        return dict(json.loads(resp.read()))


def _secs(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.1f}s"


def _state(d: dict[str, Any], now: float) -> str:
    h = d["health"]
    if not d.get("enabled", True):
        return "disabled"
    if h["available"]:
        return "up" if h["circuit"] == "closed" else h["circuit"]
    until = h.get("cooldown_until")
    left = f" {until - now:.0f}s" if until else ""
    cause = h.get("open_cause")
    return f"{h['circuit']}{left}" + (f" ({cause})" if cause else "")


def _last_error(h: dict[str, Any], now: float) -> str:
    if not h.get("last_error"):
        return "-"
    return f"{h['last_error']} {now - h['last_error_at']:.0f}s ago"


def render(fleet: dict[str, Any], now: float | None = None) -> str:
    now = time.time() if now is None else now
    head = ("deployment", "model", "state", "window (source)", "in flight", "last error", "ttft")
    rows = []
    for d in fleet["deployments"]:
        w = d["context_window"]
        window = f"{w['effective']} ({w['source']})" if w.get("effective") else w["source"]
        ema = d["ema"]
        tps = ema.get("tokens_per_second")
        rows.append(
            (
                d["id"],
                d["model"],
                _state(d, now),
                window,
                str(d["inflight"]),
                _last_error(d["health"], now),
                _secs(ema.get("ttft_seconds")) + (f" {tps:.0f} tok/s" if tps else ""),
            )
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    lines = [
        "  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)).rstrip()
        for r in (head, *rows)
    ]
    down = sum(1 for d in fleet["deployments"] if not d["health"]["available"])
    lines.append(
        f"config version {fleet['version']}: {len(fleet['deployments'])} deployment(s), {down} out"
    )
    return "\n".join(lines)


def run(url: str) -> int:
    key = os.environ.get(ADMIN_KEY_ENV)
    if not key:
        print(f"set {ADMIN_KEY_ENV} to the gateway's admin key", file=sys.stderr)
        return 2
    try:
        fleet = fetch_fleet(url, key)
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read())["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = exc.reason
        print(f"{url}: HTTP {exc.code}: {message}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        print(f"{url}: cannot reach the gateway: {reason}", file=sys.stderr)
        return 1
    print(render(fleet))
    return 0
