"""The tokenizer fingerprint's probe counts, against stand-ins that tokenize as the engines
do: a vocabulary with a BOS token, which the engine adds to a prompt it serves (and its
usage counts), and which a text probe must not carry."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web

from fleetgate.context.calibration import CalibrationBook
from fleetgate.context.probes import CHATS, MIXES, TEXTS, chat_tally, text_tally
from fleetgate.discovery.fingerprint import MAX_CALLS, FingerprintCache, FingerprintService
from fleetgate.fleet import FleetHolder, build_fleet
from tests.harness import fleet_config

BOS = 1
WORD = 5  # every word is one token of this id (no marker id: those are 0)


def _words(text: str) -> list[int]:
    return [WORD] * len(text.split())


def _rendered(chat: dict[str, Any]) -> str:
    """The stand-in's template: each message's role and content, the tools' names."""
    parts = [f"<|{m['role']}|> {m.get('content') or ''}" for m in chat["messages"]]
    parts.extend(t["function"]["name"] for t in chat.get("tools") or ())
    return " ".join(parts) + " <|assistant|>"


Engine = tuple[str, list[tuple[str, Any]]]


async def _serve(routes: dict[str, Callable[[Any], Any]]) -> AsyncIterator[Engine]:
    seen: list[tuple[str, Any]] = []

    def handler(answer: Callable[[Any], Any]) -> Any:
        async def handle(request: web.Request) -> web.Response:
            body = await request.json() if request.method == "POST" else None
            seen.append((request.path, body))
            answered = answer(body)
            if isinstance(answered, web.Response):
                return answered
            return web.json_response(answered)

        return handle

    app = web.Application()
    for route, answer in routes.items():
        method, path = route.split(" ")
        app.router.add_route(method, path, handler(answer))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}", seen
    await runner.cleanup()


def _llamacpp_tokenize(body: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's /tokenize: a list's strings each tokenized alone, its ids kept; the
    special tokens (a BOS) only with `add_special`, and only before its first string."""
    content = body["content"]
    items = content if isinstance(content, list) else [content]
    tokens: list[int] = []
    first = True
    for item in items:
        if isinstance(item, str):
            if first and body.get("add_special", False):
                tokens.append(BOS)
            tokens.extend(_words(item))
        else:
            tokens.append(item)
        first = False
    return {"tokens": tokens}


@pytest.fixture
async def llamacpp() -> AsyncIterator[Engine]:
    async for served in _serve(
        {
            "GET /v1/models": lambda _: {"data": [{"id": "tiny", "meta": {"n_vocab": 32064}}]},
            "GET /props": lambda _: {"model_path": "/models/tiny.gguf"},
            "POST /apply-template": lambda body: {"prompt": _rendered(body)},
            "POST /tokenize": _llamacpp_tokenize,
        }
    ):
        yield served


def _refused(chat: dict[str, Any]) -> bool:
    """Whether the strict engines' template raises on a chat: more than one tool call in a
    turn, as Llama 3.1's does."""
    return any(len(m.get("tool_calls") or ()) > 1 for m in chat["messages"])


def _text_probe(text: str) -> tuple[tuple[int, ...], int]:
    """The probe a text gives: its tally, and its count (the stand-ins count words)."""
    return text_tally(text).counts, len(text.split())


def _chat_probe(chat: dict[str, Any]) -> tuple[tuple[int, ...], int]:
    """The probe a served chat gives: its tally, and its rendered template's count plus the
    BOS the engine puts before it."""
    return chat_tally(chat).counts, len(_rendered(chat).split()) + 1


def _refusal(body: dict[str, Any]) -> web.Response | None:
    """What an engine answers for a chat its template raises on (llama.cpp and vLLM answer
    400); None for any other chat."""
    if _refused(body):
        return web.json_response({"error": {"code": 400, "message": "template"}}, status=400)
    return None


def _strict_template(body: dict[str, Any]) -> Any:
    """llama.cpp's /apply-template with that template."""
    return _refusal(body) or {"prompt": _rendered(body)}


@pytest.fixture
async def strict_llamacpp() -> AsyncIterator[Engine]:
    async for served in _serve(
        {
            "GET /v1/models": lambda _: {"data": [{"id": "tiny", "meta": {"n_vocab": 128256}}]},
            "GET /props": lambda _: {"model_path": "/models/strict.gguf"},
            "POST /apply-template": _strict_template,
            "POST /tokenize": _llamacpp_tokenize,
        }
    ):
        yield served


def _openai_tokenize(body: dict[str, Any]) -> dict[str, Any]:
    """vLLM's and SGLang's /tokenize of a prompt: its special tokens unless told not to."""
    tokens = _words(body["prompt"])
    if body.get("add_special_tokens", True):
        tokens.insert(0, BOS)
    return {"tokens": tokens, "count": len(tokens), "max_model_len": 4096}


def _openai_engine(root: str, tokenize: Any) -> AsyncIterator[Engine]:
    """A vLLM- or SGLang-like engine: its model list and its /tokenize."""
    return _serve(
        {
            "GET /v1/models": lambda _: {"data": [{"id": "tiny", "root": root}]},
            "POST /tokenize": tokenize,
        }
    )


@pytest.fixture
async def sglang() -> AsyncIterator[Engine]:
    async for served in _openai_engine("/models/tiny", _openai_tokenize):
        yield served


def _strict_vllm_tokenize(body: dict[str, Any]) -> Any:
    """vLLM's /tokenize with the template above: a chat rendered (or refused), a text as
    SGLang's."""
    if "messages" not in body:
        return _openai_tokenize(body)
    tokens = [BOS, *_words(_rendered(body))]
    return _refusal(body) or {"tokens": tokens, "count": len(tokens), "max_model_len": 4096}


@pytest.fixture
async def strict_vllm() -> AsyncIterator[Engine]:
    async for served in _openai_engine("/models/strict", _strict_vllm_tokenize):
        yield served


async def _fingerprint(kind: str, url: str) -> list[tuple[tuple[int, ...], int]]:
    """The probe counts a fingerprint round takes from a two-window model on `url`."""
    fleet = build_fleet(
        fleet_config(
            {
                "providers": [{"id": "p", "kind": kind, "base_url": url + "/v1"}],
                "deployments": [
                    {"id": n, "model": "m", "provider": "p", "upstream_model": "tiny"}
                    | {"context_window": w}
                    for n, w in (("small", 512), ("large", 2048))
                ],
            }
        )
    )
    cache = FingerprintCache()
    service = FingerprintService(FleetHolder(fleet), CalibrationBook(), cache)
    try:
        await service.refresh()
    finally:
        await service.stop()
    (probes,) = cache.by_identity.values()
    return probes


async def test_llamacpp_chat_probes_count_the_bos_the_engine_adds_and_texts_do_not(
    llamacpp: Engine,
) -> None:
    url, seen = llamacpp
    probes = await _fingerprint("llamacpp", url)
    texts = [_text_probe(t) for t in (*TEXTS, *MIXES)]
    # a served chat is its rendered template plus the BOS the engine puts before it
    chats = [_chat_probe(c) for c in CHATS]
    assert probes == texts + chats
    # still one call (a deployment) for every text and chat, the specials asked for the
    # first string alone, an empty one
    tokenized = [body for path, body in seen if path == "/tokenize"]
    assert tokenized and all(b["add_special"] and b["content"][0] == "" for b in tokenized)


async def test_a_chat_the_template_refuses_is_left_out_and_the_rest_stand(
    strict_llamacpp: Engine,
) -> None:
    url, _ = strict_llamacpp
    probes = await _fingerprint("llamacpp", url)
    texts = [_text_probe(t) for t in (*TEXTS, *MIXES)]
    rendered = [c for c in CHATS if not _refused(c)]
    assert 0 < len(rendered) < len(CHATS)
    # before, one refused chat failed the whole fingerprint: no probes at all
    assert probes == texts + [_chat_probe(c) for c in rendered]


async def test_sglang_text_probes_carry_no_special_tokens(sglang: Engine) -> None:
    url, seen = sglang
    probes = await _fingerprint("sglang", url)
    texts = (*TEXTS, *MIXES)[:MAX_CALLS]  # as far as a round's calls go
    assert probes == [_text_probe(t) for t in texts]
    asked = [body for path, body in seen if path == "/tokenize"]
    assert asked and all(body["add_special_tokens"] is False for body in asked)


async def test_vllm_leaves_out_a_chat_the_template_refuses_and_keeps_the_rest(
    strict_vllm: Engine,
) -> None:
    url, _ = strict_vllm
    probes = await _fingerprint("vllm", url)
    chats = [c for c in CHATS if not _refused(c)]
    assert 0 < len(chats) < len(CHATS)
    # before, one refused chat failed the whole round: no probes at all
    texts = [_text_probe(t) for t in TEXTS]
    served = [_chat_probe(c) for c in chats]
    mixes = [_text_probe(t) for t in MIXES]
    # the round's calls: every text and chat, then mixes as far as the budget goes
    assert probes == texts + served + mixes[: MAX_CALLS - len(TEXTS) - len(CHATS)]
