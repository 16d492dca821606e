"""A whole answer a window cut short is continued on a larger window, on two real llama.cpp
engines (`small`: n_ctx 512 declared as 1024, so the estimate places the request there;
`big`: 2048): the client gets the whole answer, the log shows both attempts, and big is asked
only for what small did not produce."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import ollama
import pytest

from fleetgate.auth.guard import usage
from fleetgate.execute.outcome import Attempt
from fleetgate.fleet import build_fleet
from fleetgate.testing.llama import ALIAS
from tests.context.test_cut_short import LONG, record
from tests.engines import LlamaFactory, llama_provider, misstated_tiers
from tests.harness import Stack, deployment, fleet_config

WANTED = 400  # output tokens asked for: LONG holds 512 with fewer, not with these


@pytest.fixture
def tiers(stack: Stack, llama: LlamaFactory) -> Stack:
    stack.start_gateway(misstated_tiers(llama))
    return stack


def assert_retried(stack: Stack, request_id: str) -> dict[str, Any]:
    """Small's cut answer then big's whole one, in the log; the cut counted on small."""
    logged = record(stack, request_id)
    cut, whole = logged["attempts"]
    assert (cut["deployment_id"], cut["status"], cut["error_class"]) == ("small", 200, "cut_short")
    assert cut["finish"] == "length" and cut["prompt_tokens"] + cut["completion_tokens"] == 512
    assert cut["completion_tokens"] < WANTED
    assert (whole["deployment_id"], whole["status"], whole["error_class"]) == ("big", 200, None)
    # big went on from small's text: the tokens small produced are not paid twice
    assert (whole["continuation"], whole["inherited_tokens"]) == (
        "window",
        cut["completion_tokens"],
    )
    assert whole["completion_tokens"] == WANTED - cut["completion_tokens"]
    assert logged["deployment_id"] == "big" and logged["status"] == 200
    assert "context_cut_short" not in logged["notes"]  # the answer served is whole
    metrics = httpx.get(stack.url + "/metrics", timeout=5).text
    assert 'fleetgate_cut_short_total{deployment="small"} 1.0' in metrics
    windows = httpx.get(stack.url + "/v1/fleet/windows", timeout=5).json()["data"]
    small = next(w for w in windows if w["deployment"] == "small")
    assert (small["tokens"], small["source"]) == (512, "cut_short")  # learned as before
    return logged


def assert_whole_from_big(headers: httpx.Headers) -> None:
    assert headers["x-fleetgate-route"] == "big"
    assert headers["x-fleetgate-attempts"] == "2"
    assert "x-fleetgate-truncated" not in headers


def test_a_chat_answer_cut_by_a_window_is_answered_whole_by_a_larger_one(
    tiers: Stack, client_for: Any
) -> None:
    resp = client_for(tiers, timeout=60).chat.completions.with_raw_response.create(
        model="tiny", messages=[{"role": "user", "content": LONG}], max_tokens=WANTED
    )
    body = resp.parse()
    assert body.usage is not None and body.usage.completion_tokens == WANTED  # its own limit
    assert body.choices[0].finish_reason == "length"
    assert_whole_from_big(resp.headers)
    assert_retried(tiers, resp.headers["x-request-id"])


def test_a_legacy_completion_cut_by_a_window_is_answered_whole(
    tiers: Stack, client_for: Any
) -> None:
    resp = client_for(tiers, timeout=60).completions.with_raw_response.create(
        model="tiny", prompt=LONG, max_tokens=WANTED
    )
    body = resp.parse()
    assert body.usage is not None and body.usage.completion_tokens == WANTED
    assert_whole_from_big(resp.headers)
    assert_retried(tiers, resp.headers["x-request-id"])


def test_an_anthropic_message_cut_by_a_window_is_answered_whole(tiers: Stack) -> None:
    client = anthropic.Anthropic(base_url=tiers.url, api_key="x", max_retries=0, timeout=60)
    resp = client.messages.with_raw_response.create(
        model="tiny", max_tokens=WANTED, messages=[{"role": "user", "content": LONG}]
    )
    message = resp.parse()
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == WANTED
    assert_whole_from_big(resp.headers)
    assert_retried(tiers, resp.headers["x-request-id"])


def test_an_ollama_chat_cut_by_a_window_is_answered_whole(tiers: Stack) -> None:
    request_id = "ollama-cut-retry"
    client = ollama.Client(host=tiers.url, timeout=60, headers={"x-request-id": request_id})
    answer = client.chat(
        model="tiny",
        messages=[{"role": "user", "content": LONG}],
        options={"num_predict": WANTED},
    )
    assert answer.done_reason == "length" and answer.eval_count == WANTED
    assert (answer.prompt_eval_count or 0) + WANTED > 512  # more than the small window holds
    assert_retried(tiers, request_id)


def test_without_a_larger_window_answering_the_cut_answer_is_served_flagged(
    stack: Stack, client_for: Any, llama: LlamaFactory
) -> None:
    fleet = misstated_tiers(llama)
    fleet["providers"][1] = {  # big's address answers nothing
        "id": "big",
        "kind": "llamacpp",
        "base_url": "http://127.0.0.1:1/v1",
        "discovery": False,
    }
    stack.start_gateway(fleet)
    resp = client_for(stack, timeout=60).chat.completions.with_raw_response.create(
        model="tiny", messages=[{"role": "user", "content": LONG}], max_tokens=WANTED
    )
    body = resp.parse()
    assert body.choices[0].finish_reason == "length"
    assert body.usage is not None and body.usage.completion_tokens < WANTED
    assert resp.headers["x-fleetgate-route"] == "small"
    assert resp.headers["x-fleetgate-truncated"].endswith("window=1024")
    logged = record(stack, resp.headers["x-request-id"])
    tried = [(a["deployment_id"], a["status"], a["error_class"]) for a in logged["attempts"]]
    assert tried == [("small", 200, None), ("big", None, "connect")]
    assert logged["deployment_id"] == "small" and logged["notes"]["context_cut_short"]


def test_a_window_that_is_not_larger_than_the_cut_is_passed_over(
    stack: Stack, client_for: Any, llama: LlamaFactory
) -> None:
    fleet = misstated_tiers(llama)
    # plan: small (holds the estimate), mid (window unknown), big (declared 600: too small
    # for the estimate, overflow) — only big's declared window is larger than the cut's 512
    fleet["providers"].append(llama_provider("mid", llama(n_ctx=512), discovery=False))
    fleet["deployments"].append(
        {"id": "mid", "model": "tiny", "provider": "mid", "upstream_model": ALIAS}
    )
    fleet["deployments"][1]["context_window"] = 600
    stack.start_gateway(fleet)
    resp = client_for(stack, timeout=60).chat.completions.with_raw_response.create(
        model="tiny", messages=[{"role": "user", "content": LONG}], max_tokens=WANTED
    )
    assert resp.headers["x-fleetgate-route"] == "big"
    assert "x-fleetgate-truncated" not in resp.headers  # big's real window holds it all
    logged = record(stack, resp.headers["x-request-id"])
    assert [a["deployment_id"] for a in logged["attempts"]] == ["small", "big"]
    assert {"deployment": "mid", "filter": "execute", "reason": "window not larger than 512"} in (
        logged["dropped"]
    )


def test_a_cut_answer_served_after_later_failures_is_what_is_billed() -> None:
    fleet = build_fleet(
        fleet_config(
            {
                "providers": [
                    {"id": p, "kind": "llamacpp", "base_url": "http://127.0.0.1:1/v1"}
                    for p in ("small", "big")
                ],
                "deployments": [
                    deployment("tiny", p, price={"input": 1.0, "output": 2.0})
                    for p in ("small", "big")
                ],
            }
        )
    )
    served = Attempt(0, "small", "small", ALIAS, "model", 200)
    served.prompt_tokens, served.completion_tokens = 330, 182
    failed = Attempt(1, "big", "big", ALIAS, "model", None, error_class="connect")
    assert usage([served, failed], "small", {}, fleet) == (512, (330 + 2 * 182) / 1e6)
