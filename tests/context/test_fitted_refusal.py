"""A refusal without a count on the deployment's own fitted evidence, with room to spare.

`context_guard: reject` refuses a request that fits nowhere without counting it only when
every deployment's own fit (a fingerprint or enough answers, never a family's table) puts
even its lowest residual for this kind of text, a fifth lower still, beyond the window; for
text its evidence covers and that does not say the same thing again and again. Pure tests
of that floor, and through the gateway on real llama.cpp engines.
"""

from __future__ import annotations

import random
from typing import Any

import openai
import pytest

from fleetgate.config.schema import ContextConfig
from fleetgate.context.calibration import CalibrationBook
from fleetgate.context.families import FAMILIES
from fleetgate.context.fit import MIN_ANSWERS, SPARE, TokenizerFit, dot, kind_of
from fleetgate.context.need import VARIED, estimate_need
from fleetgate.context.probes import MIXES, TEXTS, text_tally
from fleetgate.context.tally import tally_body, variety
from fleetgate.fleet import Deployment, build_fleet
from fleetgate.testing.corpus import text_of
from tests.context.test_learned_estimate import LARGE, UNKNOWN, _fleet, _true_prompt
from tests.engines import LlamaFactory
from tests.harness import Stack, fleet_config, wait_for_own_fits
from tests.tiers import words

SETTINGS = ContextConfig(default_output_reserve=16)


def _deployments() -> list[Deployment]:
    providers = [
        {"id": p, "kind": "vllm", "base_url": f"http://127.0.0.1:9/{p}/v1"}
        for p in ("small", "large")
    ]
    deployments = [
        {"id": "small", "model": "m", "provider": "small", "upstream_model": UNKNOWN}
        | {"context_window": 1000},
        {"id": "large", "model": "m", "provider": "large", "upstream_model": UNKNOWN}
        | {"context_window": 4000},
    ]
    fleet = build_fleet(fleet_config({"providers": providers, "deployments": deployments}))
    return list(fleet.models["m"].deployments)


def _chat(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], "max_tokens": 16}


def _book(
    deps: list[Deployment], answers: int = MIN_ANSWERS * 2, emoji: int = 0
) -> CalibrationBook:
    """A book whose deployments saw `answers` prose answers, each costing a token per four
    characters (and one per message) on the engine; with `emoji`, each answer's text ends
    with that many emoji, three tokens each."""
    book = CalibrationBook()
    rng = random.Random(5)
    for _ in range(answers):
        prose = text_of("prose", rng, rng.randint(400, 6000))
        body = _chat(prose + " " + "🙂" * emoji if emoji else prose)
        counts = tally_body(body, "chat.completions").counts
        true = len(prose) // 4 + 5 + 3 * emoji
        for dep in deps:
            book.observe_answer(dep.id, FAMILIES[dep.tokenizer_family].weights, counts, true)
    book.refit(now=1e9)
    return book


def _floor(book: CalibrationBook | None, dep: Deployment, body: dict[str, Any]) -> int | None:
    estimate, _ = estimate_need(body, "chat.completions", SETTINGS, [dep], book)
    return estimate.fitted_floor(dep)


def test_a_fit_of_the_deployments_own_bounds_varied_text_from_below_with_room_to_spare() -> None:
    deps = _deployments()
    book = _book(deps)
    dep = deps[1]
    fit = book.own_fit(dep.id)
    assert fit is not None
    body = _chat(text_of("prose", random.Random(9), 16000))
    true = len(body["messages"][0]["content"]) // 4 + 5 + 16
    floor = _floor(book, dep, body)
    assert floor is not None
    # below the true need by the room to spare at least, and not far below it
    assert floor <= true * SPARE * 1.02
    assert floor >= true * SPARE * 0.85


def test_no_fit_of_the_deployments_own_no_fitted_floor() -> None:
    deps = _deployments()
    body = _chat(text_of("prose", random.Random(9), 16000))
    assert _floor(None, deps[1], body) is None  # the family's table alone
    assert _floor(_book(deps, answers=MIN_ANSWERS - 4), deps[1], body) is None  # too few


def test_a_text_said_again_and_again_has_no_fitted_floor() -> None:
    """One long word said again and again costs what that word costs, which the fit's
    residuals over varied prose do not bound (on Qwen2 it is two tokens, estimated near
    four): such a request is counted before it is refused."""
    deps = _deployments()
    book = _book(deps)
    body = _chat(words(3000, "internationalization"))
    assert variety(body, "chat.completions") < VARIED
    assert _floor(book, deps[1], body) is None
    # the same length of varied prose has one
    varied = _chat(text_of("prose", random.Random(9), len(body["messages"][0]["content"])))
    assert variety(varied, "chat.completions") > VARIED
    assert _floor(book, deps[1], varied) is not None


def test_text_the_evidence_never_showed_has_no_fitted_floor() -> None:
    # the fit saw prose only: Korean text is costed by the prior's weights, a guess
    deps = _deployments()
    book = _book(deps)
    korean = "게이트웨이는 각 요청을 그것을 담을 수 있는 배포로 보냅니다 " * 300
    body = _chat(korean + text_of("prose", random.Random(4), 3000))
    assert _floor(book, deps[1], body) is None


def _fingerprinted(answers: int, fingerprint: bool = True) -> TokenizerFit:
    """A fit fingerprinted on an engine that costs every field as the generic table does
    (the probes' counts are that engine's; none without `fingerprint`), then `answers`
    prose answers on it."""
    truth = FAMILIES["generic"].weights
    fit = TokenizerFit(truth)
    if fingerprint:
        texts = (*TEXTS, *MIXES)
        probes = [(c, round(dot(truth, c))) for c in (text_tally(t).counts for t in texts)]
        fit.set_fingerprint("engine", probes)
    rng = random.Random(5)
    for _ in range(answers):
        counts = tally_body(
            _chat(text_of("prose", rng, rng.randint(400, 6000))), "chat.completions"
        ).counts
        fit.add(counts, round(dot(truth, counts)))
    fit.refit(now=1e9)
    return fit


def test_a_kind_the_answers_have_too_few_of_is_bounded_by_the_fingerprint() -> None:
    """Once the answers are many enough to make the residuals alone, a kind of text they
    hold too few of (here numbers, among prose answers) has the fingerprint's probes of
    that kind for its lowest residual: the engine counted those. Replayed on sixteen real
    vocabularies (30 to 300 answers, three orders, the held-out corpus and text unlike it),
    no request's true count lay under such a floor; the least was 1.20 times it."""
    numbers = text_tally(text_of("numbers", random.Random(3), 8000)).counts
    fit = _fingerprinted(MIN_ANSWERS * 2)
    assert kind_of(numbers, fit.weights) == "digits"
    assert "digits" not in fit.residuals  # the answers hold no numbers
    lowest = fit.lowest(numbers)
    assert lowest is not None
    assert lowest <= fit.probe_residuals["digits"][0] * SPARE
    # before the answers make the residuals alone, the probes are among them already
    early = _fingerprinted(MIN_ANSWERS // 2)
    assert early.probe_residuals == {}
    # no fingerprint: only the answers' evidence, which does not cover numbers
    assert _fingerprinted(MIN_ANSWERS * 2, fingerprint=False).lowest(numbers) is None


# -- through the gateway, on real engines -----------------------------------------------


def _refused(client: Any, messages: list[dict[str, Any]]) -> str:
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="m", messages=messages, max_tokens=16)
    assert refused.value.code == "context_too_large"
    return str(refused.value.message)


def test_a_fingerprinted_fleet_refuses_what_is_far_beyond_its_windows_without_a_count(
    stack: Stack, client_for, llama: LlamaFactory
) -> None:
    small, large = llama(n_ctx=512, alias=UNKNOWN), llama(n_ctx=LARGE, alias=UNKNOWN)
    gateway = stack.start_gateway(_fleet(small, large, guard="reject"))
    wait_for_own_fits(gateway, ("small", "large"), 20)
    client = client_for(stack, timeout=60)
    far = [{"role": "user", "content": text_of("prose", random.Random(11), 20000)}]
    assert _true_prompt(large, far) > 1.6 * LARGE
    # refused on the fit's evidence: estimated, not counted
    assert "(estimated: " in _refused(client, far)
    # just beyond the window: the fit's floor is not, so the count decides
    near = [{"role": "user", "content": text_of("prose", random.Random(12), 9400)}]
    true = _true_prompt(large, near)
    assert LARGE < true + 16 < 1.2 * LARGE
    assert "(counted exactly: " in _refused(client, near)
    # a long word said again and again, estimated far beyond the window, fits it: counted
    # and served, never refused on the fit
    again = [{"role": "user", "content": "internationalization " * 900}]
    assert _true_prompt(large, again) + 16 <= LARGE
    resp = client.chat.completions.with_raw_response.create(
        model="m", messages=again, max_tokens=16
    )
    assert resp.headers["x-fleetgate-route"] == "large"
    assert resp.headers["x-fleetgate-context-estimate"].endswith("; exact")


def test_a_chat_with_tools_or_tool_calls_is_bounded_by_its_user_turns_alone() -> None:
    """A template renders tool schemas, tool calls and their results its own way or drops
    them (on Phi-3.5's, a chat with tool calls cost 0.79 of a floor that counted them); it
    renders every user turn's text as it is, so that alone bounds such a chat from below."""
    deps = _deployments()
    book = _book(deps)
    text = text_of("prose", random.Random(9), 16000)
    plain = _floor(book, deps[1], _chat(text))
    assert plain is not None
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    turns = [
        {"role": "user", "content": text},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": text_of("code", random.Random(3), 9000)},
    ]
    assert _floor(book, deps[1], {"messages": turns, "max_tokens": 16}) == plain
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    assert _floor(book, deps[1], {**_chat(text), "tools": [tool]}) == plain
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    parts = [{"role": "user", "content": [image, {"type": "text", "text": text}]}]
    assert _floor(book, deps[1], {"messages": parts, "max_tokens": 16}) == plain
    # no user turn of text: nothing every template renders as it is
    reasoning = [{"role": "assistant", "content": "ok", "reasoning_content": text}]
    assert _floor(book, deps[1], {"messages": reasoning, "max_tokens": 16}) is None


def test_the_user_turns_bound_a_chat_by_their_text_not_by_a_template_default() -> None:
    """A template that writes a long system prompt into a chat without one (SmolLM3's, 217
    tokens) costs a plain user turn that much more, and the fit learns it. The user turns
    taken from a chat with a system turn and tools are no such chat: their floor is their
    text's, without that prompt (it made such a chat's floor 1.76 times its true count)."""
    deps = _deployments()
    book = CalibrationBook()
    rng = random.Random(5)
    system = {"role": "system", "content": "Answer briefly."}
    for i in range(MIN_ANSWERS * 2):
        prose = text_of("prose", rng, rng.randint(400, 6000))
        body = _chat(prose)
        true = len(prose) // 4 + 5
        if i % 2:
            body["messages"].insert(0, system)
            true += 9
        else:
            true += 300  # the template's own system prompt
        counts = tally_body(body, "chat.completions").counts
        for dep in deps:
            book.observe_answer(dep.id, FAMILIES[dep.tokenizer_family].weights, counts, true)
    book.refit(now=1e9)
    text = text_of("prose", random.Random(9), 12000)
    plain = _floor(book, deps[1], _chat(text))
    assert plain is not None
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    body = {"messages": [system, {"role": "user", "content": text}], "tools": [tool]}
    with_tools = _floor(book, deps[1], {**body, "max_tokens": 16})
    assert with_tools is not None
    # the plain chat's floor holds the default prompt (300 tokens, 0.8 x its lowest
    # residual at least); the user text taken from the chat with tools does not
    assert with_tools < plain - 200
    assert with_tools <= (len(text) // 4 + 16) * 1.05


def test_emoji_add_nothing_to_the_fitted_floor() -> None:
    """An emoji costs one token to eight (joined sequences, skin tones, flags): on Qwen2 a
    text of them cost 0.56 of its fitted estimate, so the floor leaves them out."""
    deps = _deployments()
    book = _book(deps, emoji=40)  # the fit has seen emoji: three tokens each
    # short enough for the words of both to be counted whole, not each on a sample of its own
    text = text_of("prose", random.Random(9), 3000)
    plain = _floor(book, deps[1], _chat(text))
    assert plain is not None
    with_emoji = _floor(book, deps[1], _chat(text + " " + "👩‍💻🇫🇷👍🏽" * 8))
    assert with_emoji is not None
    # 24 emoji the fit costs 3 tokens each (58 with the room to spare): none in the floor,
    # only their other characters (the joiners, one character each)
    assert with_emoji <= plain + 24
