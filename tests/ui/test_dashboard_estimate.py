"""The fleet page shows each deployment's context estimate: a fitted tokenizer (its source
and evidence, its weights and spread on hover) or the family table it still runs on."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.admin.helpers import ADMIN_KEY, options
from tests.engines import LlamaFactory, llama_provider
from tests.harness import Stack, deployment, wait_until

UNKNOWN = "orchard-7b-support"  # a model name no family pattern matches


def test_the_fleet_page_shows_a_fingerprinted_tokenizer_fit(
    stack: Stack, sqlite_url: str, page: Page, llama: LlamaFactory
) -> None:
    small, large = llama(n_ctx=512, alias=UNKNOWN), llama(n_ctx=2048, alias=UNKNOWN)
    fleet = {
        "providers": [llama_provider("small", small), llama_provider("large", large)],
        "deployments": [
            deployment("m", "small", upstream_model=UNKNOWN, context_window=512),
            deployment("m", "large", upstream_model=UNKNOWN, context_window=2048),
            # one window alone: its estimate decides nothing, so it is not fingerprinted
            deployment("solo", "large", id="solo", upstream_model=UNKNOWN, context_window=2048),
        ],
    }
    gateway = stack.start_gateway(fleet, options(sqlite_url))
    book = gateway.pipeline.state.calibration
    wait_until(lambda: book.own_fit("small") is not None, 20, "the small engine fingerprinted")
    probes = book.public_fit("small")["probes"]
    page.goto(f"{stack.url}/ui#/fleet")
    page.fill("#login-key", ADMIN_KEY)
    page.click("#login button[type=submit]")
    expect(page.locator("#page-fleet[data-ready=true]")).to_be_attached()
    line = page.locator("tr[data-deployment=small] .estimate")
    expect(line).to_contain_text("fitted (fingerprint)")
    expect(line).to_contain_text(f"{probes} probes, 0 answers")
    title = line.get_attribute("title") or ""
    assert "fingerprint: llamacpp|" + UNKNOWN in title
    assert "weights:" in title and "  words: " in title
    # the single-window deployment runs on the family table, and says so
    solo = page.locator("tr[data-deployment=solo] .estimate")
    expect(solo).to_contain_text("generic table")
