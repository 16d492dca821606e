"""The estimate learns each deployment's tokenizer from evidence, not from a family table.

Real llama.cpp engines where counts matter: the build's model has the real Qwen2 vocabulary
and template, served under a name that suggests no family (`generic`, the table's widest
guess). The fake engine counts words, so its usage can be made to disagree with the family's
estimate at will.
"""

from __future__ import annotations

import random
from typing import Any

import httpx

from fleetgate.context.probes import CHATS
from fleetgate.server.app import Gateway
from fleetgate.testing.corpus import text_of
from tests.engines import LlamaFactory, llama_provider
from tests.harness import Stack, deployment, wait_for_own_fits, wait_until
from tests.tiers import chat_calls, tiered_stack, words

UNKNOWN = "orchard-7b-support"  # a model name no family pattern matches
SMALL, LARGE = 512, 2048


def _fleet(small: Any, large: Any, **context: Any) -> dict[str, Any]:
    return {
        "routing": {"context": context},
        "providers": [llama_provider("small", small), llama_provider("large", large)],
        "deployments": [
            deployment("m", "small", upstream_model=UNKNOWN, context_window=SMALL),
            deployment("m", "large", upstream_model=UNKNOWN, context_window=LARGE),
        ],
    }


def _discovered_fleet(small: Any, large: Any) -> dict[str, Any]:
    """The two engines with no window declared: each is read from the engine (`/props`)."""
    providers = [
        llama_provider("small", small, discovery=True),
        llama_provider("large", large, discovery=True),
    ]
    return {
        "providers": providers,
        "deployments": [
            deployment("m", "small", upstream_model=UNKNOWN),
            deployment("m", "large", upstream_model=UNKNOWN),
        ],
    }


def _fingerprinted(stack: Stack, small: Any, large: Any) -> Gateway:
    """A gateway on the two engines, once both deployments have their fingerprint."""
    gateway = stack.start_gateway(_fleet(small, large))
    wait_for_own_fits(gateway, ("small", "large"), 20)
    return gateway


def _true_prompt(engine: Any, messages: list[dict[str, Any]]) -> int:
    """The engine's own count of a chat's prompt (its template, then its tokenizer)."""
    templated = httpx.post(engine.root + "/apply-template", json={"messages": messages}).json()
    tokens = httpx.post(engine.root + "/tokenize", json={"content": templated["prompt"]}).json()
    return len(tokens["tokens"])


def _central(stack: Stack, resp: Any, dep: str) -> int:
    """The central estimate the deployment's own fit made of the request (its record)."""
    url = f"{stack.url}/v1/requests/{resp.headers['x-request-id']}"
    return int(httpx.get(url, timeout=5).json()["notes"]["context_raw"]["@" + dep])


def test_a_fingerprint_places_an_unknown_tokenizer_right_before_any_answer(
    stack: Stack, client_for, llama: LlamaFactory
) -> None:
    small, large = llama(n_ctx=SMALL, alias=UNKNOWN), llama(n_ctx=LARGE, alias=UNKNOWN)
    gateway = _fingerprinted(stack, small, large)
    book = gateway.pipeline.state.calibration
    fit = book.public_fit("small")
    assert fit is not None and fit["source"] == "fingerprint" and fit["answers"] == 0
    assert fit["probes"] > 30 and fit["fingerprint"].startswith("llamacpp|" + UNKNOWN)
    # before any answer, the fitted estimate of Chinese prose is within 10 % of the
    # engine's own count (the generic table's is 25 % over), and it is placed on the
    # small window it fits
    text = "网关把每个请求发送到能够容纳它的部署，短请求留在基础集群上。" * 9  # noqa: RUF001
    messages = [{"role": "user", "content": text}]
    true = _true_prompt(small, messages)
    assert true + 16 <= SMALL
    resp = client_for(stack).chat.completions.with_raw_response.create(
        model="m", messages=messages, max_tokens=16
    )
    assert resp.headers["x-fleetgate-route"] == "small"
    assert resp.headers["x-fleetgate-attempts"] == "1"
    assert 0.9 <= true / _central(stack, resp, "small") <= 1.1
    # the fingerprint's calls were few, and one replica's restart asks nothing again
    # (one template per probe chat, one tokenize of every text)
    assert gateway.pipeline.fingerprints.calls <= 2 * (len(CHATS) + 1)


_NAMES = ("message", "messages", "tools", "content", "system_prompt", "loop", "documents")


def _chat_template(seed: int, lines: int = 24) -> str:
    """A chat template's text, as users paste one to ask about it: marks set apart by
    spaces (`{{ name }}`, `{%- if a %}`, `a | trim`), which the probes' prose and code
    seldom hold."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        a, b = rng.choice(_NAMES), rng.choice(_NAMES)
        out.append(
            rng.choice(
                (
                    f"{{%- if {a} is defined and {b} %}}",
                    f"{{{{- {a}['{b}'] | trim }}}}",
                    f"{{% for item in {a} %}}{{{{ item.name }}}} : {{{{ item.{b} }}}}"
                    "{% endfor %}",
                    "{%- endif %}",
                    f"{{{{ '<|im_start|>' + {a}['role'] + '\\n' }}}}",
                    f"{{%- set {a} = {b} | length > 0 %}}",
                )
            )
        )
    return "\n".join(out)


def test_a_fingerprint_costs_a_templates_spaced_marks_within_ten_percent(
    stack: Stack, client_for, llama: LlamaFactory
) -> None:
    """Before any answer, chat templates' text (marks set apart by spaces) is estimated
    within 10 % of the engine's count (1.01-1.07 of it on the real Qwen2 vocabulary). The
    probes hold punctuation after a space and the same without (`probes._spaced`, and a
    template, code, prose and a table each way); without them the fit held this text
    6-13 % under its count, the side that sends a request to a window too small."""
    small, large = llama(n_ctx=SMALL, alias=UNKNOWN), llama(n_ctx=LARGE, alias=UNKNOWN)
    _fingerprinted(stack, small, large)
    client = client_for(stack)
    for seed in range(3):
        messages = [{"role": "user", "content": _chat_template(seed)}]
        true = _true_prompt(small, messages)
        assert true + 16 <= SMALL
        resp = client.chat.completions.with_raw_response.create(
            model="m", messages=messages, max_tokens=16
        )
        assert resp.headers["x-fleetgate-route"] == "small"
        ratio = true / _central(stack, resp, "small")
        assert 0.9 <= ratio <= 1.1, (seed, ratio)


def _first_request_on_own_fits(stack: Stack, client_for, gateway: Gateway, small: Any) -> None:
    """Right after the start, with no wait: both deployments run on their own fit, and a
    first request is placed on the small window by an estimate within 10 % of its count."""
    book = gateway.pipeline.state.calibration
    assert book.own_fit("small") is not None and book.own_fit("large") is not None
    text = "Route each request to the smallest window that holds it. " * 12
    messages = [{"role": "user", "content": text}]
    resp = client_for(stack).chat.completions.with_raw_response.create(
        model="m", messages=messages, max_tokens=8
    )
    assert resp.headers["x-fleetgate-route"] == "small"
    assert 0.9 <= _true_prompt(small, messages) / _central(stack, resp, "small") <= 1.1


def test_the_first_request_after_the_start_is_placed_on_the_fingerprint(
    stack: Stack, client_for, llama: LlamaFactory
) -> None:
    small, large = llama(n_ctx=SMALL, alias=UNKNOWN), llama(n_ctx=LARGE, alias=UNKNOWN)
    # no wait for the fits: the start itself waits for the first fingerprint round, so a
    # request that comes as soon as the gateway takes requests is estimated on the
    # engines' own counts (it used to meet the generic table's guess)
    gateway = stack.start_gateway(_fleet(small, large))
    _first_request_on_own_fits(stack, client_for, gateway, small)


def test_tiers_whose_windows_the_engines_report_are_fingerprinted_before_the_start_ends(
    stack: Stack, client_for, llama: LlamaFactory
) -> None:
    small, large = llama(n_ctx=SMALL, alias=UNKNOWN), llama(n_ctx=LARGE, alias=UNKNOWN)
    # no `context_window` in the config: the tiers are the windows discovery reads from the
    # engines, and the estimate places requests between them just the same, so their
    # tokenizers are fingerprinted too (they were not: only declared windows counted)
    gateway = stack.start_gateway(_discovered_fleet(small, large))
    windows = httpx.get(f"{stack.url}/v1/fleet/windows", timeout=5).json()
    assert sorted(w["tokens"] for w in windows["data"]) == [SMALL, LARGE]
    _first_request_on_own_fits(stack, client_for, gateway, small)


# a chat template that drops tool schemas (as some models' do): each turn in ChatML
NO_TOOLS_TEMPLATE = """{%- for m in messages -%}
<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}
"""


def _tool(i: int) -> dict[str, Any]:
    text = text_of("prose", random.Random(i), 240)
    return {
        "type": "function",
        "function": {
            "name": f"lookup_{i}",
            "description": text,
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": text[:80]}},
                "required": ["query"],
            },
        },
    }


def test_a_fingerprint_learns_a_template_that_drops_the_tool_schemas(
    stack: Stack, client_for, llama: LlamaFactory, tmp_path: Any
) -> None:
    template = tmp_path / "no-tools.jinja"
    template.write_text(NO_TOOLS_TEMPLATE)
    flags = ("--chat-template-file", str(template))
    small = llama(n_ctx=SMALL, alias=UNKNOWN, extra=flags)
    large = llama(n_ctx=LARGE, alias=UNKNOWN, extra=flags)
    _fingerprinted(stack, small, large)
    # twelve tool schemas of about 1,000 tokens as text, which this template never writes,
    # and a question of about 150: with the schemas costed as text, the estimate was seven
    # times the prompt, beyond the small window
    tools = [_tool(i) for i in range(12)]
    question = text_of("prose", random.Random(3), 700)
    messages = [{"role": "user", "content": question}]
    templated = httpx.post(
        small.root + "/apply-template", json={"messages": messages, "tools": tools}
    ).json()
    true = len(
        httpx.post(small.root + "/tokenize", json={"content": templated["prompt"]}).json()["tokens"]
    )
    resp = client_for(stack).chat.completions.with_raw_response.create(
        model="m", messages=messages, tools=tools, max_tokens=16
    )
    assert resp.headers["x-fleetgate-route"] == "small"
    assert resp.headers["x-fleetgate-context-estimate"].endswith("; estimate")  # uncounted
    assert 0.9 <= true / _central(stack, resp, "small") <= 1.1


def test_a_refusal_waits_for_a_count_where_only_the_family_table_says_too_large(
    stack: Stack, client_for, llama: LlamaFactory
) -> None:
    small, large = llama(n_ctx=SMALL, alias=UNKNOWN), llama(n_ctx=LARGE, alias=UNKNOWN)
    stack.start_gateway(_fleet(small, large, guard="reject", fingerprint=False))
    # a phrase said again and again: the generic table costs it 2.3 times its count, so
    # even half its estimate was over the largest window, and it was refused uncounted
    messages = [{"role": "user", "content": text_of("repeated", random.Random(55), 5200)}]
    assert _true_prompt(large, messages) + 8 <= LARGE
    resp = client_for(stack).chat.completions.with_raw_response.create(
        model="m", messages=messages, max_tokens=8
    )
    assert resp.headers["x-fleetgate-route"] == "large"
    assert resp.headers["x-fleetgate-context-estimate"].endswith("; exact")


def test_answers_teach_the_fit_and_replicas_see_it_in_admin_fleet(
    stack: Stack, client_for, llama: LlamaFactory
) -> None:
    small, large = llama(n_ctx=SMALL, alias=UNKNOWN), llama(n_ctx=LARGE, alias=UNKNOWN)
    gateway = stack.start_gateway(_fleet(small, large, fingerprint=False))
    client = client_for(stack)
    rng = random.Random(7)
    for i in range(30):
        kind = ("prose", "code", "cjk", "json", "scripts")[i % 5]
        text = text_of(kind, rng, rng.randint(100, 1200))
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": text}], max_tokens=4
        )
    book = gateway.pipeline.state.calibration
    wait_until(lambda: book.own_fit("small") is not None, 10, "the answers fitted")
    fit = book.public_fit("small")
    assert fit is not None and fit["source"] == "answers" and fit["answers"] >= 24
    # the fitted estimate of a new request is within 10 % of the engine's own count
    text = text_of("prose", rng, 900)
    messages = [{"role": "user", "content": text}]
    resp = client.chat.completions.with_raw_response.create(
        model="m", messages=messages, max_tokens=4
    )
    true = _true_prompt(small, messages)
    assert 0.9 <= true / _central(stack, resp, "small") <= 1.1


def test_a_usage_calibration_above_the_prior_band_is_used_as_learned(
    stack: Stack, client_for
) -> None:
    # the prior band ends at 0.9; the fake engine's usage says 900 Chinese characters set
    # apart by spaces cost about 1.14 times the generic estimate
    base, _long = tiered_stack(stack, {"refine": {"band_high": 0.9}})
    client = client_for(stack)
    for _ in range(10):
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": words(900, "中")}], max_tokens=10
        )
    book = stack.gateway.pipeline.state.calibration
    wait_until(lambda: book.calibrated("base") is not None, 5, "base calibrated")
    low, high = book.calibrated("base") or (0.0, 0.0)
    assert 1.0 < low <= high
    base.reset_counters()
    # 1,030 words and a message: 1,031 + 10 > the base window of 1,000. Clamped into the
    # prior band, the calibrated band was empty and placement scaled by 0.9 (about 815):
    # the base got it uncounted, and a context 400
    resp = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": words(1030, "中")}], max_tokens=10
    )
    assert resp.headers["x-fleetgate-route"] == "m@long"
    assert resp.headers["x-fleetgate-attempts"] == "1"
    assert chat_calls(base) == 0


def test_token_id_prompts_get_no_text_margin(stack: Stack) -> None:
    tiered_stack(stack, {"margin_percent": 20})
    resp = httpx.post(
        stack.url + "/v1/completions",
        json={"model": "m", "prompt": list(range(500)), "max_tokens": 10},
        timeout=10,
    )
    assert resp.status_code == 200
    total = int(resp.headers["x-fleetgate-context-estimate"].split(";")[0])
    # 500 ids and 10 output tokens are known; only the template's few tokens are estimated
    # (with the margin, up to the band): 500 x 1.2 x the band was 678 before
    assert 510 < total < 560
