"""Fingerprint each engine's tokenizer: the probe set (`context/probes.py`) counted by it.

For a deployment whose placement the estimate decides (its model has two or more known
windows, or its guard refuses), on an engine with a tokenize endpoint, in the background:

* its **identity**, from what the engine reports: llama.cpp `GET /props` (`model_path`)
  and `GET /v1/models` (the vocabulary size, `meta.n_vocab`); vLLM and SGLang
  `GET /v1/models` (the model's `root`); plus the kind and the upstream model name;
* unless that identity was fingerprinted before (this replica, or the store: another
  replica or a former run, `FingerprintCache`), the **counts** of the probe set:
  - llama.cpp: one `POST /tokenize` of every probe text and mix (as one list, each text
    tokenized alone, a marker of token ids between them, so the answer splits per text)
    and of every probe chat rendered by `POST /apply-template` (one call each): 15 calls.
    A chat the template refuses (a client error: Llama 3.1's raises for two tool calls in
    one turn) is left out, and the other probes stand. A rendered chat leaves out the
    special tokens the engine adds to a prompt it serves (a BOS token on most
    SentencePiece vocabularies), which its usage counts: the list is
    tokenized with `add_special`, which llama.cpp applies to its first string only, and
    that string is empty, so its tokens are those specials, added to each chat's count;
  - vLLM: `POST /tokenize` with `prompt` per text and with `messages` (and `tools`) per
    chat, then per mix as far as `MAX_CALLS` goes, four at a time; a chat its template
    refuses (a client error) is left out, as on llama.cpp;
  - SGLang: `POST /tokenize` per text (its template's part is left to the answers).
  Texts are tokenized without special tokens (`add_special_tokens: false` on vLLM and
  SGLang, whose default adds them): a text is a part of a prompt, not a prompt;
* the counts go to the deployment's fit (`context/fit.py`) as its fingerprint.

A round is bounded (`BUDGET` seconds, `MAX_CALLS` calls); a failure leaves the deployment
on its prior and answers, and is tried again at the next round (`INTERVAL`). Identity
calls repeat every round, so a changed model on the engine is fingerprinted again. A model
with one window and no guard asks nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from fleetgate.context.calibration import CalibrationBook
from fleetgate.context.families import FAMILIES
from fleetgate.context.placement import WindowOf, effective_window
from fleetgate.context.probes import CHATS, MIXES, TEXTS, VERSION, chat_tally, text_tally
from fleetgate.context.tally import Tally
from fleetgate.discovery.background import BackgroundPoller
from fleetgate.discovery.probes import ProbeCache
from fleetgate.fleet import Deployment, Fleet, FleetHolder

log = logging.getLogger("fleetgate.discovery")

KINDS = frozenset({"llamacpp", "vllm", "sglang"})
BUDGET = 20.0  # seconds for one deployment's probe counts
MAX_CALLS = 96  # the probe texts and chats (69 today), and mixes as far as it goes
INTERVAL = 300.0  # seconds between identity checks
_MARK = (0, 0, 0, 0, 0, 0, 0)  # token ids between texts in llama.cpp's list tokenize

Probes = list[tuple[tuple[int, ...], int]]  # (tally counts, tokens)


class FingerprintCache:
    """Fingerprints by identity: this replica's, and the store's (`on_new` saves one)."""

    def __init__(self) -> None:
        self.by_identity: dict[str, Probes] = {}
        self.on_new: Callable[[str, Probes], None] | None = None

    def load(self, stored: dict[str, Any]) -> None:
        """The stored fingerprints of this probe set and tally (`VERSION`); one of another
        is counted again."""
        for identity, data in stored.items():
            if not isinstance(data, dict) or data.get("version") != VERSION:
                continue
            probes = data.get("probes")
            if isinstance(probes, list):
                with contextlib.suppress(TypeError, ValueError):
                    self.by_identity[identity] = [(tuple(c), int(t)) for c, t in probes]

    def put(self, identity: str, probes: Probes) -> None:
        self.by_identity[identity] = probes
        if self.on_new is not None:
            self.on_new(identity, probes)


def wants_fingerprint(
    fleet: Fleet, dep: Deployment, window_of: WindowOf = effective_window
) -> bool:
    """Whether the estimate decides this deployment's placement, on an engine that counts:
    its model's windows, declared or read from the engines (`window_of`), are two or more,
    or its guard refuses."""
    context = fleet.config.routing.context
    if dep.provider.kind not in KINDS or not (context.fingerprint and context.refine.enabled):
        return False
    model = fleet.models.get(dep.model)
    if model is None:
        return False
    windows = {w for d in model.deployments if (w := window_of(d)) is not None}
    if len(windows) >= 2:
        return True
    guard = model.context_guard or fleet.config.routing.context.guard
    return guard == "reject" and bool(windows)


class FingerprintService(BackgroundPoller):
    timeout = (10.0, 2.0)

    def __init__(
        self,
        holder: FleetHolder,
        book: CalibrationBook,
        cache: FingerprintCache,
        window_of: WindowOf = effective_window,
    ):
        super().__init__()
        self.holder = holder
        self.book = book
        self.cache = cache
        self.window_of = window_of
        self.rounds = 0  # completed rounds (tests wait on it)
        self.calls = 0  # engine calls made for probe counts, in all
        self._wake = asyncio.Event()

    def wake(self) -> None:
        self._wake.set()

    async def _run(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception:  # never takes the gateway down
                log.exception("tokenizer fingerprint round failed")
            self._first_round.set()
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=INTERVAL)

    async def refresh(self) -> None:
        fleet = self.holder.fleet
        of = self.window_of
        deps = [d for d in fleet.deployments.values() if wants_fingerprint(fleet, d, of)]
        if deps:
            cache = ProbeCache(self.session())
            await asyncio.gather(*(self._one(cache, d) for d in deps))
        self.rounds += 1

    async def _one(self, cache: ProbeCache, dep: Deployment) -> None:
        prior = FAMILIES[dep.tokenizer_family].weights
        fit = self.book.fit(dep.id, prior)
        try:
            identity = await _identity(cache, dep)
            if identity is None or identity == fit.fingerprint:
                return
            probes = self.cache.by_identity.get(identity)
            if probes is None:
                async with asyncio.timeout(BUDGET):
                    probes = await self._count(cache, dep)
                self.cache.put(identity, probes)
            fit.set_fingerprint(identity, probes)
            log.info("tokenizer fingerprint of %s: %d probes (%s)", dep.id, len(probes), identity)
        except (TimeoutError, OSError, ValueError, KeyError, TypeError) as exc:
            log.info("tokenizer fingerprint of %s failed: %s", dep.id, type(exc).__name__)

    async def _count(self, cache: ProbeCache, dep: Deployment) -> Probes:
        kind = dep.provider.kind
        if kind == "llamacpp":
            return await self._llamacpp(cache, dep)
        return await self._per_call(cache, dep)

    async def _ask(self, cache: ProbeCache, dep: Deployment, path: str, body: Any) -> Any:
        if self.calls >= MAX_CALLS * 64:  # a runaway fleet: the budget of many rounds
            raise ValueError("fingerprint call budget spent")
        self.calls += 1
        return await cache.get(dep.provider, path, body)

    async def _llamacpp(self, cache: ProbeCache, dep: Deployment) -> Probes:
        rendered, chats = [], []
        for chat in CHATS:
            try:
                answer = await self._ask(cache, dep, "/apply-template", chat)
            except Exception as exc:
                if not _refused(exc):
                    raise
                continue  # a chat the template refuses to render: the others tell its cost
            rendered.append(str(answer["prompt"]))
            chats.append(chat)
        content: list[Any] = []
        # first an empty string: the only one `add_special` applies to (see the module doc)
        for text in ("", *TEXTS, *MIXES, *rendered):
            content.append(text)
            content.extend(_MARK)
        body = {"content": content, "add_special": True}
        answer = await self._ask(cache, dep, "/tokenize", body)
        special, *counts = _split(answer["tokens"], 1 + len(TEXTS) + len(MIXES) + len(rendered))
        texts = len(TEXTS) + len(MIXES)
        counts[texts:] = [n + special for n in counts[texts:]]
        tallies = [text_tally(t) for t in (*TEXTS, *MIXES)] + [chat_tally(c) for c in chats]
        return _pairs(tallies, counts)

    async def _per_call(self, cache: ProbeCache, dep: Deployment) -> Probes:
        kind, model = dep.provider.kind, dep.upstream_model
        asks: list[tuple[Tally, str, dict[str, Any]]] = []
        for text in TEXTS:
            asks.append((text_tally(text), "/tokenize", _text_body(model, text)))
        if kind == "vllm":
            for chat in CHATS:
                body = {"model": model, **chat, "add_generation_prompt": True}
                asks.append((chat_tally(chat), "/tokenize", body))
        for text in MIXES[: max(MAX_CALLS - len(asks), 0)]:  # what the budget leaves
            asks.append((text_tally(text), "/tokenize", _text_body(model, text)))
        gate = asyncio.Semaphore(4)

        async def one(path: str, body: dict[str, Any]) -> int | None:
            async with gate:
                try:
                    answer = await self._ask(cache, dep, path, body)
                except Exception as exc:
                    if "messages" in body and _refused(exc):
                        return None  # a chat its template refuses: the others tell its cost
                    raise
            return _count(answer)

        asks = asks[:MAX_CALLS]
        counts = await asyncio.gather(*(one(path, body) for _, path, body in asks))
        answered = [(t, n) for (t, _, _), n in zip(asks, counts, strict=True) if n is not None]
        return _pairs([t for t, _ in answered], [n for _, n in answered])


def _refused(exc: Exception) -> bool:
    """Whether an engine answered a request with a client error (4xx): a chat template that
    raises for what it does not support (Llama 3.1's: more than one tool call in a turn)."""
    status = getattr(exc, "status", None)
    return isinstance(status, int) and 400 <= status < 500


def _text_body(model: str, text: str) -> dict[str, Any]:
    """A text probe for vLLM's or SGLang's `/tokenize`: both add the special tokens of a
    prompt (a BOS token) unless told not to, and a text is no prompt."""
    return {"model": model, "prompt": text, "add_special_tokens": False}


async def _identity(cache: ProbeCache, dep: Deployment) -> str | None:
    """What the engine says it serves, with the kind and upstream model; None: unknown."""
    kind, model = dep.provider.kind, dep.upstream_model
    models = await cache.get(dep.provider, "/v1/models")
    entries = models.get("data") if isinstance(models, dict) else None
    entries = [e for e in entries or () if isinstance(e, dict)]
    chosen = [e for e in entries if e.get("id") == model] or entries[:1]
    entry = chosen[0] if chosen else {}
    if kind == "llamacpp":
        props = await cache.get(dep.provider, "/props")
        path = props.get("model_path") if isinstance(props, dict) else None
        meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
        vocab = meta.get("n_vocab")
        if not path and vocab is None:
            return None
        return f"llamacpp|{model}|{path}|{vocab}"
    root = entry.get("root")  # the model's path or hub id
    if not root:
        return None
    return f"{kind}|{model}|{root}"


def _split(tokens: list[Any], n: int) -> list[int]:
    """The token counts of `n` texts tokenized as one list with `_MARK` after each."""
    ids = [t if isinstance(t, int) else t.get("id") for t in tokens]
    counts: list[int] = []
    start, run, mark = 0, 0, len(_MARK)
    for i, t in enumerate(ids):
        run = run + 1 if t == _MARK[0] else 0
        if run >= mark and (i + 1 == len(ids) or ids[i + 1] != _MARK[0]):
            counts.append(i + 1 - mark - start)
            start, run = i + 1, 0
    if len(counts) != n:
        raise ValueError(f"{len(counts)} texts in the tokenize answer, not {n}")
    return counts


def _count(answer: Any) -> int:
    if isinstance(answer, dict):
        count = answer.get("count")
        if type(count) is int:
            return count
        tokens = answer.get("tokens")
        if isinstance(tokens, list):
            return len(tokens)
    raise ValueError("no count in the tokenize answer")


def _pairs(tallies: list[Tally], counts: list[int]) -> Probes:
    return [(t.counts, c) for t, c in zip(tallies, counts, strict=True) if c > 0]


def encode(probes: Probes) -> list[list[Any]]:
    """A fingerprint as JSON (kept in the store by identity)."""
    return [[list(c), t] for c, t in probes]
