"""Tokenizer families: how many tokens a tally (see `tally.py`) comes to on each.

Each family is a weight per tally field plus the spread of its fit: the 2.5 % and 97.5 %
quantiles of `true count / estimate` over a held-out corpus, which bound the true count
until usage has calibrated a deployment (see `calibration.py`). How each was set:

* `qwen2` (Qwen2, Qwen2.5, Qwen3, QwQ): fitted by `scripts/fit_estimate.py` against the real
  Qwen2 tokenizer and the real Qwen2.5 chat template (llama.cpp `/apply-template`), on a
  generated corpus of every text class (seed 11: JSON of several layouts, tab-indented
  code, punctuation runs, base64 and hex, repeated words, emoji, Thai, markdown tables,
  space-aligned columns, logs, repeated JSON records, space-separated numbers, minified
  code among them), checked on another (seed 12): 97.4 % of held-out requests have
  `true / estimate` within the band 0.81..1.13 (the 2.5 % quantile 0.84, the 97.5 % 1.09).
  The run fields (`tally.py`) carry what characters could not: before them, padded
  tables, aligned columns, JSON's `": 1`, numbers set apart by spaces and C byte arrays
  were 5-25 % under their count, repeated words up to half. What is left above the band
  is repeated words (a word the vocabulary splits, or one said between commas, costs more
  than prose's words do), a few unpadded tables and emoji. A chat without a system turn
  costs `default_system` more: the template then writes its own system prompt. Its spread
  is kept from the first fit and the weights are scaled to put the most held-out requests
  inside it. No estimate is below `least`: what the pre-tokenizer's rules make the fewest
  tokens of such a text (a word is a token at least, so `go go go` is never under one a
  word, as the fit's weights alone would have it).
* `llama3` (Llama 3.x): fitted the same way against the real Llama 3.2 `tokenizer.json`
  (the template's layout rendered by the script, since that file carries none): 99.9 %.
  That file is not on this machine, so the fields added later (`tabs`, and the emoji
  `symbols` and `fullwidth` refitted) take Qwen2's weights, the larger where both were
  known: conservative, not measured. The run fields it has none of (its weights spread
  their cost over the characters, so its estimates are as they were, padded tables and
  aligned columns under their count included, until a Llama 3 tokenizer refits it). Its
  template has no default system prompt.
* `o200k` (GPT-4o, GPT-4.1, o-series, gpt-oss): not measured here (no o200k vocabulary on
  this machine). It shares Llama 3's pre-tokenizer rules (digits in groups of up to three,
  the same word and punctuation splits); its larger vocabulary makes non-Latin text
  cheaper, so Llama 3's text weights over-estimate there. Template costs are OpenAI's
  documented chat framing (about 4 tokens a message, 3 to prime the reply); tool costs are
  Llama 3's. Its spread is set wider than the measured families'.
* `generic` (everything else): the larger of the two measured families' weights for every
  field, so it is the conservative choice for an unknown tokenizer, with the widest spread
  (with Qwen2's run fields on top of Llama 3's character weights it comes to about 9 %
  more than before on prose, 20 % on code).

A deployment names its family with `tokenizer_family`, else it is inferred from the upstream
model name (`fleetgate/family_names.py`).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field

from fleetgate.context.tally import FIELDS, N_FIELDS


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    weights: tuple[float, ...]  # one per tally field
    spread: tuple[float, float]  # bounds of true / estimate before any calibration
    # (field, tokens) the fewest tokens a unit of a field can cost here, whatever the text
    least: tuple[tuple[int, float], ...] = ()
    _least_of: Callable[[tuple[int, ...]], tuple[int, ...]] = field(
        init=False, repr=False, compare=False
    )
    _least_weights: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        fields = [i for i, _ in self.least] or [0]
        object.__setattr__(self, "_least_of", _pick(fields))
        object.__setattr__(self, "_least_weights", tuple(w for _, w in self.least) or (0.0,))

    def tokens(self, counts: tuple[int, ...]) -> int:
        """The estimated token count of a tally: a dot product, and never below what the
        tokenizer's rules make the least such a text can cost (`least`)."""
        tokens = sum(map(operator.mul, self.weights, counts))
        least = sum(map(operator.mul, self._least_weights, self._least_of(counts)))
        return math.ceil(max(tokens, least))


def _pick(fields: list[int]) -> Callable[[tuple[int, ...]], tuple[int, ...]]:
    """A function giving the counts of `fields` of a tally, as a tuple."""
    if len(fields) == 1:
        (only,) = fields
        return lambda counts: (counts[only],)
    return operator.itemgetter(*fields)


def _vector(weights: dict[str, float]) -> tuple[float, ...]:
    unknown = set(weights) - set(FIELDS)
    assert not unknown, unknown
    return tuple(float(weights.get(f, 0.0)) for f in FIELDS)


_QWEN2 = {
    "chars": 0.0002,
    "upper": 0.2226,
    "words": 0.8910,
    "long_runs": 1.0627,  # fitted with a floor of 1: "x" * 800 is 100 tokens
    "digits": 1.1309,
    "punct": 0.1923,
    "newlines": 0.6712,
    "greek": 0.8788,
    "cyrillic": 0.1689,
    "hebrew": 0.2921,
    "arabic": 0.2748,
    "indic": 1.3291,
    "thai": 0.5478,
    "symbols": 0.4726,  # with the emoji joiner U+200D
    "kana": 0.7793,
    "han": 0.5560,
    "hangul": 0.9165,
    "fullwidth": 1.8258,  # with the emoji variation selector U+FE0F
    "four_byte": 1.7939,
    "tabs": 0.3641,
    "space_runs": 0.9319,
    "punct_runs": 0.5818,
    "space_digits": 1.0039,
    "case_changes": 1.9285,
    "messages": 5.3240,
    "tools": 22.7860,
    "tool_blocks": 91.9165,
    "default_system": 21.7959,  # "You are Qwen, created by Alibaba Cloud. ..."
    "requests": 3.7639,
    # set by hand: U+1000-1FFF but Vietnamese letters (counted as latin_ext) is Myanmar,
    # Georgian, Ethiopic, Jamo: 1.2-1.6 tokens a character on the real tokenizer
    "other3": 1.6,
    "token_ids": 1.0,
}
_LLAMA3 = {
    "chars": 0.0225,
    "upper": 0.6938,
    "words": 0.8430,
    "digits": 0.6635,
    "punct": 0.3607,
    "newlines": 1.9618,
    "latin_ext": 0.4973,
    "greek": 0.2913,
    "cyrillic": 0.1911,
    "hebrew": 1.0697,
    "arabic": 0.2459,
    "indic": 0.6639,
    "thai": 0.4695,
    "kana": 0.6560,
    "han": 0.7661,
    "hangul": 0.7345,
    "messages": 5.2196,
    "tools": 77.1886,
    "tool_blocks": 30.4034,
    "requests": 30.6611,
    "other3": 1.0,
    "four_byte": 2.0,
    "token_ids": 1.0,
    "long_runs": 1.0,
    # not measured (no Llama 3 tokenizer here since the tab and emoji classes were added):
    # Qwen2's fitted costs, the larger where both are known
    "tabs": 0.2758,
    "symbols": 1.3616,
    "fullwidth": 1.5471,
    # nor since the run fields were added: its weights were fitted without them, which
    # spread their cost over the characters; Qwen2's costs on top would count it twice
    # (prose 12 %, code 27 % over the estimate before), so Llama 3 and o200k have none
    # the Llama 3.1 template has no default system prompt: its date block is in `requests`
    "default_system": 0.0,
}
_O200K = {**_LLAMA3, "messages": 4.0, "requests": 3.0}


def _with_schemas(weights: dict[str, float], scale: float) -> dict[str, float]:
    """`weights` with the tool schemas' fields (`tally.py`: their JSON's characters, words,
    punctuation and its runs, apart from the text): the text's weights of the same, scaled
    so that the corpus' tool schemas cost what they did when their JSON was tallied as
    text (the fields left out, capitals and digits, are in the scale)."""
    parts = ("chars", "words", "punct", "punct_runs")
    return {**weights, **{f"schema_{p}": scale * weights.get(p, 0.0) for p in parts}}


_QWEN2 = _with_schemas(_QWEN2, 1.26)
_LLAMA3 = _with_schemas(_LLAMA3, 1.22)
_O200K = _with_schemas(_O200K, 1.22)
_GENERIC = {f: max(_QWEN2.get(f, 0.0), _LLAMA3.get(f, 0.0)) for f in FIELDS}

# The fewest tokens a unit costs, by the byte-level BPE pre-tokenizers' rules: a run of
# letters is at least a token (a word never shares one with another word or a number), a
# digit is one on Qwen2 and a group of up to three one on Llama 3 and o200k, a space before
# a digit one, so is a run of spaces (with the line break after it, if any), and so is the
# chat template's own scaffolding (Qwen2.5: `<|im_start|>user\n` and `<|im_end|>\n` about
# a message, `<|im_start|>assistant\n`, 21 for its default system prompt). The fit's
# weights alone cost a short word said again and again (`go go go`) under a token a word;
# the estimate is never below this.
_LEAST_QWEN2 = {
    "words": 1.0,
    "digits": 1.0,
    "space_digits": 1.0,
    "space_runs": 1.0,
    "messages": 5.0,
    "default_system": 20.0,
    "requests": 3.0,
}
_LEAST_LLAMA3 = {**_LEAST_QWEN2, "digits": 1 / 3, "default_system": 0.0}
_LEAST_O200K = {**_LEAST_LLAMA3, "messages": 3.0}
_LEAST_GENERIC = {"words": 1.0, "messages": 3.0}


def _least(least: dict[str, float]) -> tuple[tuple[int, float], ...]:
    return tuple((FIELDS.index(f), w) for f, w in least.items() if w)


FAMILIES: dict[str, Family] = {
    "qwen2": Family("qwen2", _vector(_QWEN2), (0.81, 1.13), _least(_LEAST_QWEN2)),
    "llama3": Family("llama3", _vector(_LLAMA3), (0.87, 1.07), _least(_LEAST_LLAMA3)),
    "o200k": Family("o200k", _vector(_O200K), (0.7, 1.15), _least(_LEAST_O200K)),
    "generic": Family("generic", _vector(_GENERIC), (0.6, 1.15), _least(_LEAST_GENERIC)),
}
assert all(len(f.weights) == N_FIELDS for f in FAMILIES.values())
