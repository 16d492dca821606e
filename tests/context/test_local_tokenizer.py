"""Exact counts with a local `tokenizer:` (the real Qwen2 tokenizer.json): no engine call,
the template's scaffolding learned from usage, and no refusal resting on a guessed part."""

from __future__ import annotations

import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from fleetgate.config.schema import ContextConfig
from fleetgate.context import counts
from fleetgate.context.counts import ExactCounter, TokenizeError, count_prompt
from fleetgate.context.refine import ContextRefiner
from fleetgate.errors import GatewayError
from fleetgate.execute.upstream import UpstreamPool
from fleetgate.fleet import build_fleet
from fleetgate.ingress.openai import parse_openai
from fleetgate.routing.filters.context_fit import GUARD_PENDING
from fleetgate.routing.planner import build_plan
from fleetgate.state.runtime import MemoryState
from fleetgate.testing.llama import ALIAS, find_llama
from tests.context.chats import SHAPED, WEATHER, prompt_tokens, shaped
from tests.engines import LlamaFactory, llama_provider
from tests.harness import Stack, deployment, fleet_config, provider, wait_until
from tests.tiers import words

TOKENIZER = str(find_llama().tokenizer)
NOWHERE = "http://127.0.0.1:9/v1"  # a local tokenizer never calls its engine


async def test_a_local_count_calls_no_engine_and_usage_makes_it_exact(
    llama: LlamaFactory,
) -> None:
    engine = llama(n_ctx=2048)
    fleet = build_fleet(
        fleet_config(
            {
                "providers": [llama_provider("cpp", engine)],
                "deployments": [
                    {
                        "id": "cpp",
                        "model": "tiny",
                        "provider": "cpp",
                        "upstream_model": ALIAS,
                        "tokenizer": TOKENIZER,
                    }
                ],
            }
        )
    )
    dep = fleet.deployments["cpp"]
    pool = UpstreamPool()
    counter = ExactCounter(pool)
    try:
        for i, text in enumerate(SHAPED):
            body = shaped(f"You answer in one line, {i}.", text)
            profile = parse_openai("chat.completions", orjson.dumps(body))
            counted = await count_prompt(counter, dep, profile, ContextConfig())
            truth = prompt_tokens(engine, "chat.completions", body)
            assert counted.calls == 0 and counter.calls == 0
            if i == 0:  # the shape's scaffolding is the family's guess until usage teaches it
                assert counted.estimated > 0
            else:
                assert (counted.tokens, counted.estimated) == (truth, 0), text
            assert counted.basis is not None
            key, counted_text = counted.basis
            counter.template.learn(key, truth - counted_text)  # what the calibration sink does
    finally:
        await pool.close()


def _guarded(big: int, base_url: str = NOWHERE, kind: str = "sglang") -> Any:
    """Model `m` on two deployments with the local tokenizer, windows 64 and `big`, the
    guard `reject` (an SGLang engine counts text only: no whole count to settle a guess)."""
    return build_fleet(
        fleet_config(
            {
                "routing": {"context": {"guard": "reject"}},
                "providers": [
                    {"id": p, "kind": kind, "base_url": base_url} for p in ("small", "big")
                ],
                "deployments": [
                    {
                        "id": "small",
                        "model": "m",
                        "provider": "small",
                        "context_window": 64,
                        "upstream_model": ALIAS,
                        "tokenizer": TOKENIZER,
                    },
                    {
                        "id": "big",
                        "model": "m",
                        "provider": "big",
                        "context_window": big,
                        "upstream_model": ALIAS,
                        "tokenizer": TOKENIZER,
                    },
                ],
            }
        )
    )


TOOLED = {
    "model": "m",
    "messages": [{"role": "user", "content": "Weather in Lyon? " + "Digits 31415926535. " * 20}],
    "tools": [WEATHER] * 6,
    "max_tokens": 10,
}


async def _guarded_refine(
    fleet: Any, body: dict[str, Any] = TOOLED, refiner: ContextRefiner | None = None
) -> Any:
    profile = parse_openai("chat.completions", orjson.dumps(body))
    plan = build_plan(profile, fleet, MemoryState())
    assert plan.notes.get(GUARD_PENDING)  # the estimate alone could not decide
    pool = UpstreamPool()
    try:
        await (refiner or ContextRefiner(pool)).refine(plan, profile, fleet)
    finally:
        await pool.close()
    return plan, profile


async def test_reject_does_not_refuse_on_a_guessed_scaffolding() -> None:
    probe = _guarded(100_000)
    big = probe.deployments["big"]
    profile = parse_openai("chat.completions", orjson.dumps(TOOLED))
    build_plan(profile, probe, MemoryState())
    low = profile.context.low(big)  # the estimate's lower bound
    pool = UpstreamPool()
    counted = await ExactCounter(pool).count(big, profile, ContextConfig())
    await pool.close()
    text = counted.tokens - counted.estimated + 10  # the need by what the tokenizer counted
    assert counted.estimated > 20
    # a window over the estimate's lower bound and the counted text, under the text with
    # the guessed scaffolding on top: no evidence that it does not fit, so served, noted
    window = (max(low, text) + counted.tokens + 10) // 2
    assert max(low, text) < window < counted.tokens + 10
    plan, _ = await _guarded_refine(_guarded(window))
    assert plan.notes["context_guard"] == "scaffolding_estimated"
    assert plan.candidates[0].deployment.id == "big"
    # even the counted text does not fit: that is evidence, refused
    with pytest.raises(GatewayError) as refused:
        await _guarded_refine(_guarded(text - 1))
    assert refused.value.code == "context_too_large"


async def test_a_guess_in_doubt_is_settled_by_the_engines_whole_count(
    llama: LlamaFactory,
) -> None:
    engine = llama(n_ctx=2048)
    truth = prompt_tokens(engine, "chat.completions", TOOLED)
    # the need fits the big window exactly; the local count's guessed scaffolding cannot tell
    fleet = _guarded(truth + 10, engine.base_url, "llamacpp")
    pool = UpstreamPool()
    refiner = ContextRefiner(pool)
    try:
        plan, profile = await _guarded_refine(fleet, TOOLED, refiner)
        assert plan.notes["context_count_calls"] == 1  # the engine's count, after the local
        assert profile.context.exact and profile.context.prompt_tokens == truth
        assert "context_guard" not in plan.notes  # not refused: the count fits
        assert plan.candidates[0].deployment.id == "big"
        # the shape's scaffolding was learned: another request of it is counted locally
        other = {**TOOLED, "messages": [{"role": "user", "content": "Paris? " * 50 + "Lyon?"}]}
        profile = parse_openai("chat.completions", orjson.dumps(other))
        counted = await refiner.counter.count(fleet.deployments["big"], profile, ContextConfig())
        assert (counted.calls, counted.estimated) == (0, 0)
        assert counted.tokens == prompt_tokens(engine, "chat.completions", other)
    finally:
        await pool.close()


def _two_windows(stack: Stack, tokenizer: Path) -> None:
    small = stack.engine("small", context_window=1000)
    big = stack.engine("big", context_window=10000)
    stack.start_gateway(
        {
            "providers": [provider("small", small), provider("big", big)],
            "deployments": [
                deployment("m", name, context_window=window, tokenizer=str(tokenizer))
                for name, window in (("small", 1000), ("big", 10000))
            ],
        }
    )


def test_a_gateway_loads_its_local_tokenizers_before_any_request(
    stack: Stack, tmp_path: Path
) -> None:
    path = tmp_path / "tokenizer.json"  # a path no other test loaded
    shutil.copy(TOKENIZER, path)
    _two_windows(stack, path)
    wait_until(lambda: str(path) in counts._TOKENIZERS, 30, "the tokenizer loaded at start-up")


def test_a_tokenizer_that_does_not_load_leaves_the_estimate(
    stack: Stack, client_for: Any, tmp_path: Path
) -> None:
    broken = tmp_path / "tokenizer.json"
    broken.write_text('{"not": "a tokenizer"}')
    _two_windows(stack, broken)
    # 80 ten-digit numbers: a band that straddles the 1k window, so a count is wanted
    resp = client_for(stack).chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": words(80, "1234567890")}], max_tokens=10
    )
    assert resp.http_response.status_code == 200
    assert resp.headers["x-fleetgate-context-estimate"].endswith("; estimate")


async def test_a_local_tokenizer_without_the_library_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tokenizer.json"  # not loaded before
    shutil.copy(TOKENIZER, path)
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if the extra were not installed
    dep = _guarded(4096).deployments["big"]
    dep = replace(dep, tokenizer=str(path))
    profile = parse_openai("chat.completions", orjson.dumps(TOOLED))
    pool = UpstreamPool()
    try:
        with pytest.raises(TokenizeError, match=r"pip install 'fleetgate\[tokenizers\]'"):
            await ExactCounter(pool).count(dep, profile, ContextConfig())
    finally:
        await pool.close()


async def test_tokenizers_the_fleet_no_longer_names_are_let_go(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    shutil.copy(TOKENIZER, path)
    named = _guarded(4096)
    named = replace(
        named,
        deployments={k: replace(d, tokenizer=str(path)) for k, d in named.deployments.items()},
    )
    await counts.load_tokenizers(named)
    assert str(path) in counts._TOKENIZERS
    await counts.load_tokenizers(_guarded(4096))  # the same fleet, now on the shared file
    assert str(path) not in counts._TOKENIZERS
    assert TOKENIZER in counts._TOKENIZERS
