"""What an estimate by the engine's own vocabulary would reach, and what it would cost.

The tally's fields (`context/tally.py`) are a linear model of a tokenizer: their best fit
(`estimate_accuracy.py --ceiling`) leaves some vocabularies under 95 % of requests within
10 % of their count. This measures the other way an estimate can learn a tokenizer: from
its vocabulary. llama.cpp hands it out whole: `POST /tokenize` of a list of token ids (which
it passes through) `with_pieces` answers every id's text, a vocabulary of 150,000 pieces in
a few calls. The engine has no merges to give, so the text is counted by longest match:
each run of whitespace and the word after it split into the longest pieces the vocabulary
holds, left to right (`LongestMatch`).

For each model file given (`scripts/llama_engine/make_vocab_model.py` writes tiny models
with other vocabularies; none given: the build's own) it reports:

- the harvest: the pieces, the calls and their wall time;
- the count by longest match alone, against the engine's count of the same text (no
  template), over the held-out corpus and the foreign text of `estimate_accuracy.py`: the
  share within [0.9, 1.1] and the mean ratio;
- the share of held-out requests within [0.9, 1.1] of their true count (template included)
  for four least-squares fits on the same evidence (the probe set and 0, 50 or 300
  answers, each weighing as its error in percent), with a ridge to a prior: the tally's
  fields alone, the same with the longest-match count of the whole text as one more field,
  and with that count taken on a sample of the text (16 pieces cut at whitespace, 1 KB or
  4 KB in all, scaled by characters; a shorter text whole), as the estimate's budget would
  allow;
- the CPU cost of the count per 10 KB of text, whole and on each sample, its cache of
  pieces warm (every word seen before) and cold; and of its cheapest form, the text split
  at whitespace and each word's cost (with a space before it) summed by a C-level map over
  the cache, which leaves whitespace to the tally (its accuracy alone is shown too).

With `--bpe` (needs `pip install tiktoken`), also a byte-level BPE built from the harvest:
the pieces ranked by their ids (a BPE vocabulary's ids follow its merges) and split first by
the pre-tokenizer rules of Qwen2 and Llama 3 (tiktoken's `Encoding`, in Rust): the count
alone against the engine's, and its CPU cost per 10 KB.

    python3 benchmarks/vocabulary_estimate.py [MODEL.gguf ...] [--cache DIR] [--bpe]

`--cache DIR` is `estimate_accuracy.py`'s: the engine's counts are read from there when
kept, and the vocabulary and the counts of each text alone are kept beside them
(`DIR/<model>.pieces.json`), so a second run asks no engine.
"""

from __future__ import annotations

import argparse
import json
import operator
import random
import re
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # as a script, too

from benchmarks.estimate_accuracy import _count_text, _post, _share, cached_counts
from fleetgate.context.families import FAMILIES
from fleetgate.context.fit import (
    PRIOR_SAMPLES,
    PROBE_ANSWERS,
    TEMPLATE_FIELDS,
    TEMPLATE_PULL,
    estimated_part,
)
from fleetgate.context.probes import chat_tally, text_tally
from fleetgate.context.tally import N_FIELDS, _walk_body, tally_body
from fleetgate.testing.llama import LlamaServer

# a run of whitespace and what follows it up to the next: longest match stays inside one
_CHUNK = re.compile(r"\s*\S+|\s+")
_SPACE = re.compile(r"\s")
_LONGEST = 48  # bytes: the longest piece tried (a vocabulary's longest are runs of spaces)
_SAMPLE, _PIECES = 1024, 16
_BATCH = 32768  # token ids a harvest call asks for
Row = tuple[tuple[int, ...], str, int]  # the tally's counts, the text, the true count


def harvest(root: str) -> tuple[list[bytes], int, float]:
    """Every piece of the engine's vocabulary (by id), the calls it took and their seconds."""
    started = time.perf_counter()
    with urllib.request.urlopen(f"{root}/v1/models", timeout=30) as answer:
        models = json.loads(answer.read())
    size = int(models["data"][0]["meta"]["n_vocab"])
    pieces: list[bytes] = []
    calls = 1
    for start in range(0, size, _BATCH):
        ids = list(range(start, min(size, start + _BATCH)))
        tokens = _post(root, "/tokenize", {"content": ids, "with_pieces": True})["tokens"]
        calls += 1
        for token in tokens:
            piece = token["piece"]  # text, or its bytes where they are no UTF-8 alone
            pieces.append(piece.encode() if isinstance(piece, str) else bytes(piece))
    return pieces, calls, time.perf_counter() - started


class LongestMatch:
    """Counts text by the longest pieces of a vocabulary, a chunk at a time (cached)."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.vocabulary = frozenset(p for p in pieces if p)
        self.cache: dict[str, int] = {}
        self.word_costs = _WordCosts(self)

    def chunk(self, chunk: str) -> int:
        data, vocabulary = chunk.encode(), self.vocabulary
        at, n, size = 0, 0, len(data)
        while at < size:
            end = min(size, at + _LONGEST)
            while end > at + 1 and data[at:end] not in vocabulary:
                end -= 1
            at, n = end, n + 1
        return n

    def count(self, text: str) -> int:
        cache, total = self.cache, 0
        for chunk in _CHUNK.findall(text):
            n = cache.get(chunk)
            if n is None:
                n = cache[chunk] = self.chunk(chunk)
            total += n
        return total

    def words(self, text: str) -> int:
        """The cheapest form of `count`: the text split at whitespace (in C), each word
        costed as if a space led it, summed by a C-level map over the cache (its runs of
        whitespace left to the tally's fields)."""
        return sum(map(self.word_costs.__getitem__, text.split()))

    def sampled(self, text: str, size: int = _SAMPLE) -> int:
        """`count` of 16 pieces of the text cut at whitespace, `size` characters in all,
        scaled by characters; a text no longer than that is counted whole."""
        if len(text) <= size:
            return self.count(text)
        step, width = len(text) // _PIECES, size // _PIECES
        pieces = []
        for start in range(step // 2, step * _PIECES, step):
            begin = _space_at(text, start)
            pieces.append(text[begin : _space_at(text, begin + width)])
        taken = sum(map(len, pieces))
        return round(sum(map(self.count, pieces)) * len(text) / max(taken, 1))


class _WordCosts(dict[str, int]):
    """A word's cost with a space before it, counted once (`LongestMatch.words`)."""

    def __init__(self, match: LongestMatch) -> None:
        super().__init__()
        self.match = match

    def __missing__(self, word: str) -> int:
        n = self[word] = self.match.chunk(" " + word)
        return n


def _space_at(text: str, at: int) -> int:
    """The first whitespace character at or after `at` (the text's end when none is)."""
    found = _SPACE.search(text, at)
    return found.start() if found else len(text)


def body_text(body: dict[str, Any]) -> str:
    """The text the tally counts of a chat body: its turns' text, tool calls and schemas."""
    walk = _walk_body(body, "chat.completions")
    return " ".join([" ".join(walk.parts), *(b.decode() for b in walk.blobs)])


def fitted(
    rows: list[tuple[tuple[float, ...], int, float]], prior: tuple[float, ...]
) -> tuple[float, ...]:
    """Weighted least squares of counts on fields, each row weighing its own weight over its
    count squared, with a ridge to `prior` of `PRIOR_SAMPLES` rows (`TEMPLATE_PULL` of that on
    the template's fields, as the gateway's fit): plain Gaussian elimination, with no
    robust weights and no bound at zero (a benchmark's fit, the same for every variant)."""
    n = len(prior)
    a = [[0.0] * n for _ in range(n)]
    b = [0.0] * n
    for x, y, weight in rows:
        w = weight / (y * y)
        nz = [i for i, v in enumerate(x) if v]
        for i in nz:
            for j in nz:
                a[i][j] += w * x[i] * x[j]
            b[i] += w * x[i] * y
    ridge = PRIOR_SAMPLES / max(sum(w for _, _, w in rows), 1.0)
    for i in range(n):
        pull = ridge * (a[i][i] or 1.0) * (TEMPLATE_PULL if i in TEMPLATE_FIELDS else 1.0)
        a[i][i] += pull
        b[i] += pull * prior[i]
    for col in range(n):  # elimination with partial pivoting
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot], b[col], b[pivot] = a[pivot], a[col], b[pivot], b[col]
        head = a[col][col] or 1e-12
        for r in range(col + 1, n):
            f = a[r][col] / head
            if f:
                row, top = a[r], a[col]
                for c in range(col, n):
                    row[c] -= f * top[c]
                b[r] -= f * b[col]
    w = [0.0] * n
    for r in range(n - 1, -1, -1):
        w[r] = (b[r] - sum(a[r][c] * w[c] for c in range(r + 1, n))) / (a[r][r] or 1e-12)
    return tuple(w)


# the pre-tokenizer rules of Qwen2 and Llama 3 (GPT-4's), for `--bpe`
_BPE_RULES = (
    r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*"
    r"|\s*[\r\n]|\s+(?!\S)|\s+"
)


def bpe(pieces: list[bytes], texts: list[str], engine: list[int]) -> dict[str, float]:
    """A BPE of the pieces ranked by id (`--bpe`): its share within [0.9, 1.1] of the
    engine's count of each text, its mean ratio, and its CPU µs per 10 KB."""
    import tiktoken  # only here: the gateway does not need it

    ranks: dict[bytes, int] = {bytes([b]): b for b in range(256)}
    for piece in pieces:
        if piece and piece not in ranks:
            ranks[piece] = len(ranks)
    encoding = tiktoken.Encoding(
        "harvest", pat_str=_BPE_RULES, mergeable_ranks=ranks, special_tokens={}
    )
    counts = [len(encoding.encode_ordinary(t)) for t in texts]
    text = " ".join(texts)[:10_000]
    encoding.encode_ordinary(text)
    started = time.process_time()
    for _ in range(100):
        encoding.encode_ordinary(text)
    cpu = round((time.process_time() - started) / 100 * 1e6)
    return {**against(counts, engine), "µs per 10 KB": cpu}


def against(counts: list[int], engine: list[int]) -> dict[str, float]:
    """The share of `counts` whose engine's count is within [0.9, 1.1] of it, and the mean
    ratio (the engine's over the count)."""
    ratios = [n / max(c, 1) for c, n in zip(counts, engine, strict=True)]
    return {"share": _share(ratios), "mean": round(sum(ratios) / len(ratios), 3)}


def measure(model: Path | None, cache: Path | None, with_bpe: bool = False) -> dict[str, Any]:
    counted = cached_counts(model, cache)
    pieces_file = cache / f"{model.stem if model else 'build-model'}.pieces.json" if cache else None
    texts = {
        name: [body_text(body) for _, body, n in counted[name] if n is not None]
        for name in ("held", "foreign")
    }
    if pieces_file is not None and pieces_file.exists():
        kept = json.loads(pieces_file.read_text())
    else:
        with LlamaServer(n_ctx=512, model=model, alias="unnamed") as engine:
            pieces, calls, seconds = harvest(engine.root)
            alone = {
                name: [_count_text(engine.root, t) for t in rows] for name, rows in texts.items()
            }
        kept = {
            "pieces": [p.hex() for p in pieces],
            "harvest": {"pieces": len(pieces), "calls": calls, "seconds": round(seconds, 2)},
            "alone": alone,
        }
        if pieces_file is not None:
            pieces_file.write_text(json.dumps(kept))
    pieces = [bytes.fromhex(p) for p in kept["pieces"]]
    match = LongestMatch(pieces)
    result: dict[str, Any] = {"harvest": kept["harvest"]}
    # the count alone, against the engine's count of the same text (no template)
    for name, rows in texts.items():
        engine = kept["alone"][name]
        for label, count in (("", match.count), (", split at whitespace", match.words)):
            result[f"longest match alone{label}, {name}"] = against(list(map(count, rows)), engine)
    if with_bpe:
        result["BPE by rank alone, held"] = bpe(pieces, texts["held"], kept["alone"]["held"])

    def rows_of(kind_rows: list[list[Any]]) -> list[Row]:
        out = []
        for _, body, n in kind_rows:
            if n is not None:
                out.append((tally_body(body, "chat.completions").counts, body_text(body), n))
        return out

    train, held, foreign = (rows_of(counted[k]) for k in ("train", "held", "foreign"))
    random.Random(5).shuffle(train)
    # the probe set: texts alone (their tally as a text's, with no template) and chats
    probes: list[Row] = []
    for text, n in counted["texts"]:
        probes.append((text_tally(text).counts, text, n))
    for chat, n in counted["chats"]:
        if n is not None:
            probes.append((chat_tally(chat).counts, body_text(chat), n))

    generic = FAMILIES["generic"].weights
    with_vocab_prior = (
        *(w if i in TEMPLATE_FIELDS else 0.0 for i, w in enumerate(generic)),
        1.0,
    )

    def vector(counts: tuple[int, ...], extra: int | None) -> tuple[float, ...]:
        x = estimated_part(counts)
        return x if extra is None else (*x, extra)

    variants = {
        "fields": (generic, lambda c, t: vector(c, None)),
        "fields + longest match": (with_vocab_prior, lambda c, t: vector(c, match.count(t))),
        "fields + longest match on a 1 KB sample": (
            with_vocab_prior,
            lambda c, t: vector(c, match.sampled(t)),
        ),
        "fields + longest match on a 4 KB sample": (
            with_vocab_prior,
            lambda c, t: vector(c, match.sampled(t, 4 * _SAMPLE)),
        ),
    }
    probe_weight = min(1.0, PROBE_ANSWERS / max(len(probes), 1))
    for label, (prior, x_of) in variants.items():
        shares = {}
        probe_rows = [(x_of(c, t), n, probe_weight) for c, t, n in probes]
        train_rows = [(x_of(c, t), n, 1.0) for c, t, n in train[:300]]
        scored = {
            name: [(x_of(c, t), n) for c, t, n in rows]
            for name, rows in (("corpus", held), ("foreign", foreign))
        }
        for answers in (0, 50, 300):
            w = fitted(probe_rows + train_rows[:answers], prior)
            for name, vectors in scored.items():
                ratios = [n / max(sum(map(operator.mul, w, x)), 1.0) for x, n in vectors]
                shares[f"{name} +{answers}"] = _share(ratios)
        result[label] = shares
    assert len(with_vocab_prior) == N_FIELDS + 1
    result["µs per 10 KB"] = cost(match, [t for _, t, _ in held])
    return result


def cost(match: LongestMatch, texts: list[str]) -> dict[str, float]:
    """CPU µs of the count of 10 KB of the corpus's text: whole and sampled, warm and cold."""
    text = " ".join(texts)[:10_000]
    out: dict[str, float] = {}
    counts = {
        "whole": match.count,
        "1 KB sample": match.sampled,
        "4 KB sample": lambda t: match.sampled(t, 4 * _SAMPLE),
        "whole, split at whitespace": match.words,
    }
    for label, count in counts.items():
        match.cache.clear()
        match.word_costs.clear()
        started = time.process_time()
        count(text)
        out[f"{label} cold"] = round((time.process_time() - started) * 1e6)
        started = time.process_time()
        for _ in range(200):
            count(text)
        out[f"{label} warm"] = round((time.process_time() - started) / 200 * 1e6, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--cache", type=Path, help="estimate_accuracy.py's cache of counts")
    parser.add_argument("--bpe", action="store_true", help="a BPE by rank too (tiktoken)")
    args = parser.parse_args()
    for model in args.models or [None]:
        result = measure(model, args.cache, args.bpe)
        print(f"{model.name if model else 'build model'}:")
        for key, value in result.items():
            print(f"  {key}: {json.dumps(value, ensure_ascii=False)}")


if __name__ == "__main__":
    main()
