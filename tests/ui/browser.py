"""Headless Chromium for the dashboard's tests: Debian's /usr/bin/chromium driven by
Playwright (never a browser download), with requests to anything off loopback refused."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlparse

from playwright.sync_api import Page, Route

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"


def loopback_only(page: Page, outside: list[str]) -> None:
    """Refuse (and note) every request that would leave the machine: no CDN, no fonts."""

    def guard(route: Route) -> None:
        host = urlparse(route.request.url).hostname
        if host in ("127.0.0.1", "localhost") or route.request.url.startswith("data:"):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", guard)


def screenshot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / (re.sub(r"[^\w.-]+", "_", name) + ".png")
    page.screenshot(path=str(path), full_page=True)
    return path
