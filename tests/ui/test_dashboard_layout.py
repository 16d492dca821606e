"""The dashboard's fleet page in headless Chromium at common window widths: the table fits
the page, an open circuit says why, throughput says what it needs, and no file is missing."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from playwright.sync_api import Page, expect

from tests.admin.helpers import ADMIN_KEY, admin, options
from tests.harness import Stack, deployment, provider, wait_until
from tests.ui.browser import screenshot

MSG = [{"role": "user", "content": "hello there"}]


def _fleet(stack: Stack) -> dict[str, Any]:
    """Ids, names and capability lists as long as real fleets have them."""
    a, b, c = stack.engine("a"), stack.engine("b"), stack.engine("c")
    tools = ["tools", "tool_choice", "response_format", "structured_outputs", "logprobs"]
    params = [*tools, "top_logprobs", "temperature", "top_p", "seed", "stop", "max_tokens"]
    return {
        "providers": [
            provider("gpu-node-a.rack-12.example.internal", a),
            provider("gpu-node-b.rack-12.example.internal", b),
            provider("openrouter-fallback-eu-west", c, kind="openai"),
        ],
        "deployments": [
            deployment(
                "qwen3-coder-30b-a3b-instruct",
                "gpu-node-a.rack-12.example.internal",
                upstream_model="Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8",
                context_window=262_144,
                supported_parameters=params,
                modalities=["text", "image"],
            ),
            deployment(
                "qwen3-coder-30b-a3b-instruct",
                "gpu-node-b.rack-12.example.internal",
                upstream_model="Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8",
                context_window=262_144,
                supported_parameters=params,
            ),
            deployment(
                "qwen3-coder-30b-a3b-instruct",
                "openrouter-fallback-eu-west",
                upstream_model="qwen/qwen3-coder-30b-a3b-instruct",
                context_window=1_000_000,
                priority=1,
                price={"input": 0.052, "output": 0.207},
                enabled=False,
            ),
        ],
    }


def _sign_in(page: Page, stack: Stack) -> None:
    page.goto(f"{stack.url}/ui#/fleet")
    page.fill("#login-key", ADMIN_KEY)
    page.click("#login button[type=submit]")
    expect(page.locator("#page-fleet[data-ready=true]")).to_be_attached()


def _widths(page: Page) -> dict[str, float]:
    return page.evaluate(
        """() => {
          const right = (sel) => Math.max(...[...document.querySelectorAll(sel)]
            .map((n) => n.getBoundingClientRect().right));
          return {
            window: window.innerWidth,
            document: document.documentElement.scrollWidth,
            header: document.querySelector("header").getBoundingClientRect().right,
            tables: right("table.fleet"),
            main: document.querySelector("main").getBoundingClientRect().right,
          };
        }"""
    )


@pytest.mark.parametrize("width", [1280, 1920])
def test_the_fleet_table_fits_the_window(
    stack: Stack, sqlite_url: str, page: Page, width: int
) -> None:
    stack.start_gateway(_fleet(stack), options(sqlite_url))
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="x", max_retries=0, timeout=10)
    stack.lt.run(stack.engines["a"].stop())  # an open circuit, and its reason, in the table
    client.chat.completions.create(model="qwen3-coder-30b-a3b-instruct", messages=MSG)
    page.set_viewport_size({"width": width, "height": 900})
    _sign_in(page, stack)
    row = page.locator("tr[data-deployment='gpu-node-a.rack-12.example.internal']")
    expect(row.locator("td.health")).to_contain_text("opened by connect refused")
    screenshot(page, f"fleet-at-{width}")
    widths = _widths(page)
    assert widths["document"] <= widths["window"], widths  # no horizontal scroll
    assert widths["tables"] <= widths["main"] + 0.5, widths  # the table within the page
    assert widths["header"] >= widths["tables"], widths  # and under the header bar


def test_circuit_cause_throughput_hint_and_disabled(
    stack: Stack, sqlite_url: str, page: Page
) -> None:
    stack.start_gateway(_fleet(stack), options(sqlite_url))
    _sign_in(page, stack)
    b = page.locator("tr[data-deployment='gpu-node-b.rack-12.example.internal']")
    expect(b.locator("td.ema .tps")).to_contain_text("tok/s (needs streamed traffic)")
    assert "streamed answers" in (b.locator("td.ema .tps").get_attribute("title") or "")
    fallback = page.locator("tr[data-deployment='openrouter-fallback-eu-west']")
    expect(fallback).to_have_class("disabled")
    expect(fallback.locator("td.health")).to_contain_text("disabled")
    # a streamed answer measures it: the hint goes, a figure comes
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="x", max_retries=0, timeout=10)
    for _ in client.chat.completions.create(
        model="gpu-node-b.rack-12.example.internal", messages=MSG, stream=True
    ):
        pass
    wait_until(
        lambda: (
            stack.gateway.pipeline.state.health("gpu-node-b.rack-12.example.internal").tps_ema
            is not None
        ),
        5,
        "measured",
    )
    expect(b.locator("td.ema .tps")).not_to_contain_text("needs streamed traffic")
    expect(b.locator("td.ema .tps")).to_contain_text("tok/s")


def test_no_request_of_the_page_is_a_404(stack: Stack, sqlite_url: str, page: Page) -> None:
    stack.start_gateway(_fleet(stack), options(sqlite_url))
    missing: list[str] = []
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    _sign_in(page, stack)
    icon = httpx.get(stack.url + "/favicon.ico")  # what a browser asks of any page here
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
    assert missing == []


def test_disable_enable_and_reset_from_the_fleet_page(
    stack: Stack, sqlite_url: str, page: Page
) -> None:
    fleet = _fleet(stack)
    fleet["providers"][0]["health_check"] = {"enabled": False}  # open until reset
    stack.start_gateway(fleet, options(sqlite_url))
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="x", max_retries=0, timeout=10)
    _sign_in(page, stack)
    b_id = "gpu-node-b.rack-12.example.internal"
    b = page.locator(f"tr[data-deployment='{b_id}']")
    b.locator("button.toggle").click()
    expect(b).to_have_class("disabled")
    expect(b.locator("button.toggle")).to_have_text("Enable")
    assert api_deployment(stack, b_id)["enabled"] is False
    b.locator("button.toggle").click()
    expect(b).not_to_have_class("disabled")
    assert api_deployment(stack, b_id)["enabled"] is True

    a_id = "gpu-node-a.rack-12.example.internal"
    engine = stack.engines["a"]
    stack.lt.run(engine.stop())
    client.chat.completions.create(model="qwen3-coder-30b-a3b-instruct", messages=MSG)
    stack.lt.run(engine.start())
    a = page.locator(f"tr[data-deployment='{a_id}']")
    expect(a.locator("button.reset")).to_be_visible()  # shown while it is out
    a.locator("button.reset").click()
    expect(a.locator("td.health")).to_contain_text("closed")
    expect(a.locator("button.reset")).to_have_count(0)
    assert stack.gateway.pipeline.state.health(a_id).circuit == "closed"


def api_deployment(stack: Stack, deployment_id: str) -> dict[str, Any]:
    return dict(admin(stack).get(f"/admin/deployments/{deployment_id}").json())


def test_an_attempt_says_what_failed_and_how_an_answer_ended(
    stack: Stack, sqlite_url: str, page: Page
) -> None:
    stack.start_gateway(_fleet(stack), options(sqlite_url))
    stack.lt.run(stack.engines["a"].stop())
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="x", max_retries=0, timeout=10)
    client.chat.completions.create(
        model="qwen3-coder-30b-a3b-instruct", messages=MSG, extra_headers={"x-request-id": "r-1"}
    )
    page.goto(f"{stack.url}/ui#/requests")
    page.fill("#login-key", ADMIN_KEY)
    page.click("#login button[type=submit]")
    row = page.locator("tr.request[data-id=r-1]")
    row.wait_for()
    row.click()
    attempts = page.locator("tr.detail-row[data-for=r-1] table.attempts tbody tr")
    expect(attempts).to_have_count(2)
    expect(attempts.nth(0).locator(".failure")).to_have_text("connect refused")
    expect(attempts.nth(1).locator(".finish")).to_have_text("finish: stop")
