"""The dashboard at /ui in headless Chromium: sign-in, fleet, requests (live, attempts,
fallback), explain, keys, charts; and /admin/docs without internet."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
import pytest
from playwright.sync_api import Page, expect

from fleetgate.testing import Fault
from tests.admin.helpers import ADMIN_KEY, admin, options, two_tier_fleet
from tests.harness import Stack, wait_until
from tests.ui.browser import screenshot

MSG = [{"role": "user", "content": "hello there"}]


def _fleet(stack: Stack) -> dict[str, Any]:
    config = two_tier_fleet(stack)
    config["virtual_models"] = [
        {
            "name": "support-bot",
            "routes": [
                {"deployment": "pa", "params": {"temperature": 0.2}},
                {"model": "m"},
            ],
        }
    ]
    return config


def _start(stack: Stack, sqlite_url: str) -> None:
    stack.start_gateway(_fleet(stack), options(sqlite_url))


def _sign_in(page: Page, stack: Stack, where: str = "fleet") -> None:
    page.goto(f"{stack.url}/ui#/{where}")
    page.fill("#login-key", ADMIN_KEY)
    page.click("#login button[type=submit]")
    expect(page.locator(f"#page-{where}[data-ready=true]")).to_be_attached()


def _client(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.url + "/v1", api_key="x", max_retries=0, timeout=10)


def test_sign_in_keeps_the_key_in_the_session_only(
    stack: Stack, sqlite_url: str, page: Page
) -> None:
    _start(stack, sqlite_url)
    page.goto(stack.url + "/ui")
    page.fill("#login-key", "wrong")
    page.click("#login button[type=submit]")
    expect(page.locator("#login-error")).to_have_text("That admin key is wrong.")
    page.fill("#login-key", ADMIN_KEY)
    page.click("#login button[type=submit]")
    expect(page.locator("#page-fleet[data-ready=true]")).to_be_attached()
    assert ADMIN_KEY not in page.url
    assert page.evaluate("sessionStorage.getItem('fleetgate.adminKey')") == ADMIN_KEY
    assert page.evaluate("document.cookie") == ""
    page.click("#logout")
    expect(page.locator("#login-key")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('fleetgate.adminKey')") is None


def test_fleet_page_lists_deployments_with_windows_health_and_routes(
    stack: Stack, sqlite_url: str, page: Page
) -> None:
    _start(stack, sqlite_url)
    _sign_in(page, stack)
    pa = page.locator("tr[data-deployment=pa]")
    pb = page.locator("tr[data-deployment=pb]")
    expect(pa.locator("td.window")).to_contain_text("4,096 config")
    expect(pb.locator("td.window")).to_contain_text("100,000 config")
    expect(pa.locator("td.health")).to_contain_text("closed")
    expect(pb).to_contain_text("vllm")
    chain = page.locator(".virtual[data-name=support-bot] ol.chain li")
    expect(chain).to_have_count(2)
    expect(chain.nth(0)).to_contain_text("deployment:pa")
    expect(chain.nth(0)).to_contain_text('{"temperature":0.2}')
    expect(chain.nth(1)).to_contain_text("model:m → pa, pb")

    # three failures open pa's circuit; the page shows it, with its cooldown, on its own
    client = _client(stack)
    stack.engines["a"].set_fault(Fault("status", status=503))
    for _ in range(3):
        client.chat.completions.create(model="m", messages=MSG)
    expect(pa.locator("td.health")).to_contain_text("open")
    expect(pa.locator("td.health")).to_contain_text("cooldown")
    expect(page.locator(".summary")).to_contain_text("1 unavailable")
    screenshot(page, "fleet-with-open-circuit")


def test_requests_appear_live_and_open_to_their_attempts(
    stack: Stack, sqlite_url: str, page: Page
) -> None:
    _start(stack, sqlite_url)
    _sign_in(page, stack, "requests")
    client = _client(stack)
    client.chat.completions.create(model="m", messages=MSG, extra_headers={"x-request-id": "ok-1"})
    sent = time.monotonic()
    row = page.locator("tr.request[data-id=ok-1]")
    row.wait_for(timeout=2_000)  # the page polls the log: within 2 s of the answer
    seen = time.monotonic() - sent
    assert seen < 2.0, seen
    expect(row).to_contain_text("pa")
    row.click()
    detail = page.locator("tr.detail-row[data-for=ok-1]")
    expect(detail.locator("table.attempts tbody tr")).to_have_count(1)
    expect(detail).to_contain_text("capacity tier: default")
    expect(detail).to_contain_text("prompt tokens: 3 (upstream usage)")
    expect(detail.locator("table.attempts .wire")).to_have_text("native")

    # an Ollama client on these vLLM deployments: the attempt says it was translated
    body = {"model": "m", "messages": MSG, "stream": False}
    resp = httpx.post(f"{stack.url}/api/chat", json=body, headers={"x-request-id": "tr-1"})
    assert resp.status_code == 200
    translated = page.locator("tr.request[data-id=tr-1]")
    translated.wait_for(timeout=2_000)
    translated.click()
    wire = page.locator("tr.detail-row[data-for=tr-1] table.attempts .wire")
    expect(wire).to_have_text("translated ollama.chat→chat.completions")

    # a fallback: both attempts, the failed one first
    stack.engines["a"].fail_next(Fault("status", status=503))
    client.chat.completions.create(model="m", messages=MSG, extra_headers={"x-request-id": "fb-1"})
    fallback = page.locator("tr.request[data-id=fb-1]")
    fallback.wait_for(timeout=2_000)
    expect(fallback.locator("td").nth(8)).to_have_text("1")
    fallback.click()
    attempts = page.locator("tr.detail-row[data-for=fb-1] table.attempts tbody tr")
    expect(attempts).to_have_count(2)
    expect(attempts.nth(0)).to_contain_text("pa")
    expect(attempts.nth(0)).to_contain_text("503")
    expect(attempts.nth(0)).to_contain_text("server_error")
    expect(attempts.nth(1)).to_contain_text("pb")
    expect(attempts.nth(1)).to_contain_text("200")
    # the open row stays open while newer requests arrive
    client.chat.completions.create(model="m", messages=MSG, extra_headers={"x-request-id": "ok-2"})
    page.locator("tr.request[data-id=ok-2]").wait_for(timeout=2_000)
    expect(attempts).to_have_count(2)
    screenshot(page, "requests-fallback-open")

    # filters: only the fallback answered by pb
    page.select_option("#f-deployment", "pb")
    expect(page.locator("tr.request")).to_have_count(1)
    expect(page.locator("tr.request")).to_have_attribute("data-id", "fb-1")

    # what clients send is shown as text, never run as markup
    hostile = "<img src=x onerror=window.hacked=1>"
    page.select_option("#f-deployment", "")
    with pytest.raises(openai.NotFoundError):  # an unknown model: refused, and logged
        client.chat.completions.create(model=hostile, messages=MSG)
    expect(page.locator("tr.request").first).to_contain_text(hostile)
    assert page.evaluate("window.hacked") is None


def test_explain_shows_a_dropped_candidate_and_its_reason(
    stack: Stack, sqlite_url: str, page: Page
) -> None:
    _start(stack, sqlite_url)
    _sign_in(page, stack, "explain")
    body = '{"model": "m", "messages": [{"role": "user", "content": "hi"}], ' + (
        '"provider": {"ignore": ["pa"]}}'
    )
    page.fill("#explain-body", body)
    page.click("#explain-form button[type=submit]")
    dropped = page.locator("#plan table.dropped tbody tr")
    expect(dropped).to_have_count(1)
    expect(dropped).to_contain_text("pa")
    expect(dropped).to_contain_text("provider_prefs")
    expect(dropped).to_contain_text("in provider.ignore")
    expect(page.locator("#plan table.candidates tbody tr")).to_have_count(1)
    expect(page.locator("#plan table.candidates")).to_contain_text("pb")
    screenshot(page, "explain-dropped")


def test_creating_a_key_shows_its_secret_once(stack: Stack, sqlite_url: str, page: Page) -> None:
    _start(stack, sqlite_url)
    _sign_in(page, stack, "keys")
    page.fill("#key-form input[name=name]", "web app")
    page.fill("#key-form input[name=budget]", "5")
    page.click("#key-form button[type=submit]")
    secret = page.locator(".secret-value").inner_text()
    assert secret.startswith("fg-")
    listed = admin(stack).get("/admin/keys").json()["data"]
    assert [(k["name"], k["budget"]) for k in listed] == [("web app", 5.0)]
    row = page.locator(f"tr[data-key={listed[0]['id']}]")
    expect(row).to_contain_text(secret[:10] + "…")
    expect(row).to_contain_text("0 of 5 (0%)")
    screenshot(page, "keys-secret-once")

    # once: after leaving the page, the secret is nowhere in it
    page.goto(f"{stack.url}/ui#/fleet")
    page.goto(f"{stack.url}/ui#/keys")
    expect(page.locator("#page-keys[data-ready=true]")).to_be_attached()
    expect(row).to_be_visible()
    assert secret not in page.content()

    row.locator("button.toggle").click()
    expect(row).to_contain_text("disabled")
    assert admin(stack).get(f"/admin/keys/{listed[0]['id']}").json()["disabled"] is True


def test_a_chart_has_data_points(stack: Stack, sqlite_url: str, page: Page) -> None:
    _start(stack, sqlite_url)
    client = _client(stack)
    for _ in range(3):
        client.chat.completions.create(model="m", messages=MSG)
    stack.engines["a"].fail_next(Fault("status", status=503))
    client.chat.completions.create(model="m", messages=MSG)
    api = admin(stack)
    wait_until(
        lambda: api.get("/admin/stats?window=600").json()["totals"]["requests"] >= 4,
        5,
        "four requests logged",
    )
    _sign_in(page, stack, "charts")
    requests = page.locator('[data-chart="Requests, errors and fallbacks"]')
    expect(requests.locator("canvas")).to_have_count(1)
    assert int(requests.get_attribute("data-points") or 0) >= 2  # requests and a fallback
    per_deployment = page.locator('[data-chart="Requests sent to each deployment"]')
    expect(per_deployment).to_contain_text("pa")
    expect(per_deployment).to_contain_text("pb")
    errors = page.locator('[data-chart="Errors per deployment"]')
    assert int(errors.get_attribute("data-points") or 0) == 1  # pa's one 503
    ttft = page.locator('[data-chart="TTFT p50 / p99"]')
    assert int(ttft.get_attribute("data-points") or 0) >= 1
    expect(page.locator("#chart-totals")).to_contain_text("4 requests · 0 errors · 1 with a")
    screenshot(page, "charts")


def test_admin_docs_render_without_internet(stack: Stack, sqlite_url: str, page: Page) -> None:
    _start(stack, sqlite_url)
    html = httpx.get(stack.url + "/admin/docs").text
    assert "cdn." not in html and "/admin/docs/assets/swagger-ui-bundle.js" in html
    page.goto(stack.url + "/admin/docs")  # the page fixture refuses every off-host request
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("fleetgate admin API")
    expect(page.locator(".opblock-summary-path", has_text="/admin/explain")).to_have_count(1)


def test_a_request_links_to_its_trace(stack: Stack, sqlite_url: str, page: Page) -> None:
    from tests.telemetry.receivers import GrpcReceiver

    receiver = GrpcReceiver()
    try:
        config = _fleet(stack)
        config["telemetry"] = {
            "otlp": {"endpoint": receiver.endpoint, "protocol": "grpc"},
            "trace_url": "https://traces.example/trace/{trace_id}",
        }
        stack.start_gateway(config, options(sqlite_url))
        trace = "4bf92f3577b34da6a3ce929d0e0e4736"
        headers = {"x-request-id": "tr-9", "traceparent": f"00-{trace}-00f067aa0ba902b7-01"}
        _client(stack).chat.completions.create(model="m", messages=MSG, extra_headers=headers)
        with admin(stack) as api:
            wait_until(lambda: api.get("/admin/requests/tr-9").status_code == 200, 5, "logged")
            row = api.get("/admin/requests/tr-9").json()
        assert row["trace_id"] == trace
        assert row["trace_url"] == f"https://traces.example/trace/{trace}"
        _sign_in(page, stack, "requests")
        request = page.locator("tr.request[data-id=tr-9]")
        request.click()
        link = page.locator("tr.detail-row[data-for=tr-9] a.trace-id")
        expect(link).to_have_text(trace)
        expect(link).to_have_attribute("href", f"https://traces.example/trace/{trace}")
    finally:
        stack.stop_gateway()
        receiver.close()
