"""The dashboard shows the gateway's version, and says when the admin API is off."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from fleetgate import __version__
from fleetgate.control.plane import ControlOptions
from tests.admin.helpers import ADMIN_KEY, options
from tests.harness import Stack, deployment, provider


def _fleet(stack: Stack) -> dict:
    engine = stack.engines.get("a") or stack.engine("a")
    return {"providers": [provider("pa", engine)], "deployments": [deployment("m", "pa")]}


def test_the_header_shows_the_version_once_signed_in(
    stack: Stack, sqlite_url: str, page: Page
) -> None:
    stack.start_gateway(_fleet(stack), options(sqlite_url))
    page.goto(stack.url + "/ui")
    page.fill("#login-key", ADMIN_KEY)
    page.click("#login button[type=submit]")
    expect(page.locator("#page-fleet[data-ready=true]")).to_be_attached()
    expect(page.locator("#version")).to_have_text(__version__)


def test_with_no_admin_key_the_sign_in_says_how_to_set_one(
    stack: Stack, sqlite_url: str, page: Page, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FLEETGATE_ADMIN_KEY", raising=False)
    stack.start_gateway(_fleet(stack), ControlOptions(database_url=sqlite_url))
    page.goto(stack.url + "/ui")
    expect(page.locator("#login-error")).to_contain_text("FLEETGATE_ADMIN_KEY")
    expect(page.locator("#login button[type=submit]")).to_be_disabled()
