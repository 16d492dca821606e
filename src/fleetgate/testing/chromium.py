"""Debian's headless Chromium, as the dashboard's tests and benchmark launch it (through
Playwright, with `executable_path`; never a downloaded browser)."""

from __future__ import annotations

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
