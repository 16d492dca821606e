"""Tokenizer families: how many tokens a tally (see `tally.py`) comes to on each.

Each family is a weight per tally field plus the spread of its fit: the 2.5 % and 97.5 %
quantiles of `true count / estimate` over a held-out corpus, which bound the true count
until usage has calibrated a deployment (see `calibration.py`). How each was set:

* `qwen2` (Qwen2, Qwen2.5, Qwen3, QwQ): fitted by `scripts/fit_estimate.py` against the real
  Qwen2 tokenizer and the real Qwen2.5 chat template (llama.cpp `/apply-template`), on a
  generated corpus of every text class (seed 11: JSON of several layouts, tab-indented
  code, punctuation runs, base64 and hex, repeated words, emoji and Thai among them), checked
  on another (seed 12): 93.8 % of held-out requests have `true / estimate` within the band
  0.81..1.13; above it lie none of JSON, code, punctuation runs, Thai, CJK, prose or tools,
  3 % of emoji, 10 % of base64 and hex, 18 % of repeated words (a long word said again and
  again is one token each, which no character class can see). A chat without a system
  turn costs `default_system` more: the template then writes its own system prompt. Its
  spread is kept from the first fit and the weights are scaled to put the most held-out
  requests inside it (the 2.5 % quantile is now 0.75, the 97.5 % 1.13).
* `llama3` (Llama 3.x): fitted the same way against the real Llama 3.2 `tokenizer.json`
  (the template's layout rendered by the script, since that file carries none): 99.9 %.
  That file is not on this machine, so the fields added later (`tabs`, and the emoji
  `symbols` and `fullwidth` refitted) take Qwen2's weights, the larger where both were
  known: conservative, not measured. Its template has no default system prompt.
* `o200k` (GPT-4o, GPT-4.1, o-series, gpt-oss): not measured here (no o200k vocabulary on
  this machine). It shares Llama 3's pre-tokenizer rules (digits in groups of up to three,
  the same word and punctuation splits); its larger vocabulary makes non-Latin text
  cheaper, so Llama 3's text weights over-estimate there. Template costs are OpenAI's
  documented chat framing (about 4 tokens a message, 3 to prime the reply); tool costs are
  Llama 3's. Its spread is set wider than the measured families'.
* `generic` (everything else): the larger of the two measured families' weights for every
  field, so it is the conservative choice for an unknown tokenizer, with the widest spread.

A deployment names its family with `tokenizer_family`, else it is inferred from the upstream
model name (`infer_family`).
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass

from fleetgate.context.tally import FIELDS, N_FIELDS


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    weights: tuple[float, ...]  # one per tally field
    spread: tuple[float, float]  # bounds of true / estimate before any calibration

    def tokens(self, counts: tuple[int, ...]) -> int:
        """The estimated token count of a tally (a dot product)."""
        return math.ceil(sum(map(operator.mul, self.weights, counts)))


def _vector(weights: dict[str, float]) -> tuple[float, ...]:
    unknown = set(weights) - set(FIELDS)
    assert not unknown, unknown
    return tuple(float(weights.get(f, 0.0)) for f in FIELDS)


_QWEN2 = {
    "chars": 0.0296,
    "upper": 0.6034,
    "words": 0.8202,
    "long_runs": 1.0834,  # fitted with a floor of 1: "x" * 800 is 100 tokens
    "digits": 1.2852,
    "punct": 0.4717,
    "newlines": 0.9239,
    "tabs": 0.2758,
    "latin_ext": 0.4724,
    "greek": 0.8489,
    "cyrillic": 0.1705,
    "hebrew": 0.3055,
    "arabic": 0.2590,
    "indic": 1.2635,
    "thai": 0.5272,
    "symbols": 1.3616,  # with the emoji joiner U+200D
    "kana": 0.7520,
    "han": 0.5439,
    "hangul": 0.9066,
    "fullwidth": 1.5471,  # with the emoji variation selector U+FE0F
    "four_byte": 1.5201,
    "messages": 5.4171,
    "tools": 7.7349,
    "tool_blocks": 92.2263,
    "default_system": 23.3487,  # "You are Qwen, created by Alibaba Cloud. ..."
    "requests": 2.9565,
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
    # the Llama 3.1 template has no default system prompt: its date block is in `requests`
    "default_system": 0.0,
}
_O200K = {**_LLAMA3, "messages": 4.0, "requests": 3.0}
_GENERIC = {f: max(_QWEN2.get(f, 0.0), _LLAMA3.get(f, 0.0)) for f in FIELDS}

FAMILIES: dict[str, Family] = {
    "qwen2": Family("qwen2", _vector(_QWEN2), (0.81, 1.13)),
    "llama3": Family("llama3", _vector(_LLAMA3), (0.87, 1.07)),
    "o200k": Family("o200k", _vector(_O200K), (0.7, 1.15)),
    "generic": Family("generic", _vector(_GENERIC), (0.6, 1.15)),
}
assert all(len(f.weights) == N_FIELDS for f in FAMILIES.values())

_INFER = (
    (re.compile(r"qwen|qwq", re.IGNORECASE), "qwen2"),
    (re.compile(r"llama[-_ ]?3", re.IGNORECASE), "llama3"),
    (re.compile(r"gpt-?4o|gpt-?4\.1|gpt-?5|gpt-oss|(^|/)o[134](-|$)", re.IGNORECASE), "o200k"),
)


def infer_family(model_name: str) -> str:
    """The family a model name suggests; `generic` when it suggests none."""
    for pattern, name in _INFER:
        if pattern.search(model_name):
            return name
    return "generic"
