from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, expect, sync_playwright

from fleetgate.testing.chromium import ARGS, CHROMIUM
from tests.ui.browser import loopback_only, screenshot


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    """One Chromium per test module, on a fresh profile directory."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (scripts/test does)")
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=ARGS,
            viewport={"width": 1400, "height": 900},
        )
        # one bound for actions and assertions alike: `expect` has its own (5 s), which a
        # sign-in on a loaded 2-core machine overran once (the page was right, only late)
        context.set_default_timeout(10_000)
        expect.set_options(timeout=10_000)
        yield context
        context.close()


@pytest.fixture
def page(browser: BrowserContext, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A new tab (so a new session storage); its last state is saved as a screenshot."""
    tab = browser.new_page()
    outside: list[str] = []
    errors: list[str] = []
    loopback_only(tab, outside)
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab
    screenshot(tab, request.node.name)
    tab.close()
    assert not outside, f"the page asked for something off this host: {outside}"
    assert not errors, f"the page raised: {errors}"
