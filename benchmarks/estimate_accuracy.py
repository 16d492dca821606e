"""How close the learned estimate comes to a real tokenizer's count, without the gateway.

For each model file given (tiny models carrying other real vocabularies and templates are
written by `scripts/llama_engine/make_vocab_model.py`; none given: the build's own), starts
one `llama-server`, counts with it (`/apply-template`, then `/tokenize`) the probe set
(`context/probes.py`) and chat requests of two kinds of text:

- the generated corpus (`fleetgate.testing.corpus`): seed 11 is the traffic whose answers
  teach the fit, seeds 12 and 21 are held out;
- foreign text, held out and unlike the corpus: chunks of llama.cpp's own docs, C++ and
  Python source, JSON, chat templates and tokenizer test inputs (many scripts), from the
  source tree the engine was built from.

Then reports the share of held-out requests whose estimate lies within [0.9, 1.1] of the
true count: the generic family table (no evidence), the fit on the fingerprint alone, and
after 50 and 300 answers; per kind of corpus text with `--kinds`. With `--bands`, how well
the fit's band and its chance of fitting (`share_within`) tell its own error, at the same
three points: the share of requests whose true count lies under the band (`under`) or over
it (`over`), the band's mean width (its high over its low factor, minus 1: what a window
inside it costs in counts), and the share whose true count the fit gave a chance under 5 %
to be at most (`u<.05`: the fit said "almost surely more") or over 95 % (`u>.95`: "almost
surely fewer"). A band that tells its error holds each of `under` and `over` near 3 % and
each tail near 5 %, on text unlike the answers as on the corpus.

With `--ceiling`, also the share the tally's fields reach at best: the fit taught every
held-out corpus request's own count, then scored on them (`corpus: taught itself`, and per
kind with `--kinds`). A target above it is out of the fit's reach on that vocabulary,
whatever evidence comes.

    python3 benchmarks/estimate_accuracy.py [MODEL.gguf ...] [--kinds] [--bands] [--ceiling]
        [--cache DIR]

With `--cache DIR` the engine's counts are kept (`DIR/<model>.json`, a few MB each) and a
second run reads them instead of starting an engine: the tally and the fit are the code's
of that run, so a change to either is scored in under a second per vocabulary.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from fleetgate.context.families import FAMILIES
from fleetgate.context.fit import TokenizerFit
from fleetgate.context.need import UNMEASURED_HIGH, UNMEASURED_LOW, unmeasured
from fleetgate.context.probes import CHATS, MIXES, TEXTS, chat_tally, text_tally
from fleetgate.context.tally import Tally, tally_body
from fleetgate.testing.corpus import corpus
from fleetgate.testing.llama import LlamaServer, find_llama

TRAIN, HELD_OUT = (11, 400), ((12, 400), (21, 300))
SIZES = (60, 9000)
FOREIGN = {
    "docs": "docs/**/*.md",
    "cpp": "src/*.cpp",
    "python": "gguf-py/gguf/*.py",
    "json": "**/*.json",
    "templates": "models/templates/*.jinja",
    "scripts": "models/*.inp",
}

Counted = tuple[str, Tally, int]  # kind, tally, true count


def _post(root: str, path: str, payload: Any) -> Any:
    request = urllib.request.Request(
        root + path, json.dumps(payload).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as resp:
        return json.loads(resp.read())


def _count(root: str, body: dict[str, Any]) -> int | None:
    """The engine's count of a chat; None when its template refuses the chat (Llama 3.1's
    takes one tool call a turn), as the gateway's fingerprint skips such a probe."""
    try:
        prompt = _post(root, "/apply-template", body)["prompt"]
    except urllib.error.HTTPError as exc:
        if exc.code == 400:
            return None
        raise
    return len(_post(root, "/tokenize", {"content": prompt})["tokens"])


def foreign_bodies(n_each: int = 30) -> list[tuple[str, dict[str, Any]]]:
    source = find_llama().server.parent.parent / "build"
    trees = sorted(source.glob("llama_cpp_python-*/vendor/llama.cpp"))
    if not trees:
        return []
    rng = random.Random(4)
    out = []
    for kind, pattern in FOREIGN.items():
        files = [f for f in sorted(trees[-1].glob(pattern)) if f.stat().st_size > 300]
        for _ in range(n_each if files else 0):
            text = rng.choice(files).read_text(errors="replace").replace("__ggml_vocab_test__", "")
            size = rng.randint(200, 6000)
            start = rng.randrange(max(1, len(text) - size))
            messages = [{"role": "user", "content": text[start : start + size]}]
            if rng.random() < 0.3:
                messages.insert(0, {"role": "system", "content": "Review this carefully."})
            out.append((kind, {"messages": messages}))
    return out


def engine_counts(model: Path | None) -> dict[str, Any]:
    """The engine's counts of the probe set and of every request, next to what it counted
    (JSON: texts, chats and request bodies), so that a tally or fit changed later can be
    scored on them again without an engine (`--cache`)."""
    with LlamaServer(n_ctx=512, model=model, alias="unnamed") as engine:
        root = engine.root

        def counted(rows: list[tuple[str, dict[str, Any]]]) -> list[list[Any]]:
            return [[kind, body, _count(root, body)] for kind, body in rows]

        held = [(s.kind, s.body) for seed, n in HELD_OUT for s in corpus(seed, n, SIZES)]
        return {
            "texts": [[t, _count_text(root, t)] for t in (*TEXTS, *MIXES)],
            "chats": [[c, _count(root, c)] for c in CHATS],
            "train": counted([(s.kind, s.body) for s in corpus(*TRAIN, SIZES)]),
            "held": counted(held),
            "foreign": counted(foreign_bodies()),
        }


def cached_counts(model: Path | None, cache: Path | None) -> dict[str, Any]:
    """`engine_counts`, kept in `cache` (a directory) under the model file's name: a second
    run of the same model asks no engine. A cache holds the texts it counted, so a probe
    set or corpus changed since is scored as it was counted; delete the file to count
    again."""
    if cache is None:
        return engine_counts(model)
    path = cache / f"{model.stem if model else 'build-model'}.json"
    if path.exists():
        return cast(dict[str, Any], json.loads(path.read_text()))
    counts = engine_counts(model)
    cache.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(counts))
    return counts


def _probes(counted: dict[str, Any]) -> list[tuple[tuple[int, ...], int]]:
    """The probe set's tallies and counts: the fingerprint."""
    probes = [(text_tally(t).counts, n) for t, n in counted["texts"]]
    probes += [(chat_tally(c).counts, n) for c, n in counted["chats"] if n is not None]
    return probes


def _tallied(rows: list[list[Any]]) -> list[Counted]:
    """Counted requests' kinds, tallies and counts (a chat the template refused left out)."""
    return [
        (kind, tally_body(body, "chat.completions"), n) for kind, body, n in rows if n is not None
    ]


def measure(counted: dict[str, Any]) -> dict[str, Any]:
    """The share within [0.9, 1.1]: the generic table, the fit on the fingerprint, and after
    50 and 300 answers; every tally taken now, from what was counted."""
    probes = _probes(counted)
    train = _tallied(counted["train"])
    held = _tallied(counted["held"])
    foreign = _tallied(counted["foreign"])
    random.Random(5).shuffle(train)
    sets = {"corpus": held, "foreign": foreign}
    generic = FAMILIES["generic"]
    result: dict[str, Any] = {
        f"{name}: generic table": _share([n / max(generic.tokens(t.counts), 1) for _, t, n in rows])
        for name, rows in sets.items()
    }
    bands: dict[str, dict[str, float]] = {}
    fit = TokenizerFit(generic.weights)
    fit.set_fingerprint("probes", probes)
    kinds: dict[str, dict[str, float]] = {}
    taught = 0
    for answers in (0, 50, 300):
        for _, tally, tokens in train[taught:answers]:
            fit.add(tally.counts, tokens)
        taught = max(taught, answers)
        fit.refit()
        label = "fingerprint" if not answers else f"fingerprint + {answers} answers"
        for name, rows in sets.items():
            ratios = [(kind, n / max(fit.tokens(t.counts), 1)) for kind, t, n in rows]
            result[f"{name}: {label}"] = _share([r for _, r in ratios])
            bands[f"{name}: {label}"] = band_check(fit, rows)
            if name == "corpus":
                by_kind = collections.defaultdict(list)
                for kind, r in ratios:
                    by_kind[kind].append(r)
                kinds[label] = {k: _share(v) for k, v in sorted(by_kind.items())}
    result["kinds"] = kinds
    result["bands"] = bands
    result["requests"] = {"train": len(train), "corpus": len(held), "foreign": len(foreign)}
    return result


def ceiling(counted: dict[str, Any]) -> dict[str, Any]:
    """What the tally's fields can reach at best: the fit on the fingerprint taught the
    count of every held-out corpus request (in a shuffled order), then scored on those same
    requests. Answers of other text teach it no better for them, so a share under a target
    here means the fields, not the fit or its evidence, fall short of it."""
    held = _tallied(counted["held"])
    fit = TokenizerFit(FAMILIES["generic"].weights)
    fit.set_fingerprint("probes", _probes(counted))
    taught = list(held)
    random.Random(5).shuffle(taught)
    for _, tally, tokens in taught:
        fit.add(tally.counts, tokens)
    fit.refit()
    by_kind: dict[str, list[float]] = collections.defaultdict(list)
    for kind, tally, n in held:
        by_kind[kind].append(n / max(fit.tokens(tally.counts), 1))
    ratios = [r for rs in by_kind.values() for r in rs]
    return {
        "corpus: taught itself": _share(ratios),
        "kinds": {k: _share(v) for k, v in sorted(by_kind.items())},
    }


def band_check(fit: TokenizerFit, rows: list[Counted]) -> dict[str, float]:
    """How the fit's band and chance of fitting bear out on `rows` (see the module doc): the
    band as placement takes it (`need.bounds_function`: text the residuals say nothing of
    gets the wide unmeasured band)."""
    assert fit.weights is not None
    under = over = low_tail = high_tail = 0
    width = 0.0
    for _, tally, n in rows:
        guessed = max(fit.tokens(tally.counts), 1)
        low, high = fit.factors(tally.counts)
        if unmeasured(tally, fit.weights, guessed):
            low, high = min(low, UNMEASURED_LOW), max(high, UNMEASURED_HIGH)
        factor = n / guessed
        under += factor < low
        over += factor > high
        width += high / low - 1
        chance = fit.share_within(tally.counts, factor)
        low_tail += chance < 0.05
        high_tail += chance > 0.95
    k = max(len(rows), 1)
    return {
        "under": round(under / k, 3),
        "over": round(over / k, 3),
        "width": round(width / k, 3),
        "u<.05": round(low_tail / k, 3),
        "u>.95": round(high_tail / k, 3),
    }


def _count_text(root: str, text: str) -> int:
    return len(_post(root, "/tokenize", {"content": text})["tokens"])


def _share(ratios: list[float]) -> float:
    return round(sum(0.9 <= r <= 1.1 for r in ratios) / len(ratios), 3) if ratios else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--kinds", action="store_true", help="per kind of corpus text too")
    parser.add_argument("--bands", action="store_true", help="how the band tells its error")
    parser.add_argument(
        "--ceiling",
        action="store_true",
        help="the fit taught the held-out corpus itself: what the tally's fields reach at best",
    )
    parser.add_argument(
        "--cache", type=Path, help="keep the engine's counts here; a second run asks no engine"
    )
    args = parser.parse_args()
    for model in args.models or [None]:
        counted = cached_counts(model, args.cache)
        result = measure(counted)
        kinds = result.pop("kinds")
        bands = result.pop("bands")
        if args.ceiling:
            best = ceiling(counted)
            kinds["taught itself"] = best.pop("kinds")
            result.update(best)
        print(f"{model.name if model else 'build model'}: {json.dumps(result)}")
        if args.bands:
            for label, check in bands.items():
                print(f"  {label}: " + " ".join(f"{k} {v:.3f}" for k, v in check.items()))
        if args.kinds:
            for label, shares in kinds.items():
                print(f"  {label}: " + " ".join(f"{k} {v:.2f}" for k, v in shares.items()))


if __name__ == "__main__":
    main()
