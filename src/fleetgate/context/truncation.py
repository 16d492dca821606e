"""Answers a window cut: one judge for every engine, from the usage the executor parsed.

Two kinds of evidence, both judged on the answering attempt's reported counts (the
executor reads them from the body or the stream's end anyway; nothing is parsed again):

* **cut short**: a 200 whose output stopped on its length (`finish_reason: length`,
  Anthropic `stop_reason: max_tokens`, Responses `incomplete`, Ollama `done_reason:
  length`; or no stop reason at all, as llama.cpp's Responses answers) before the client's
  own output limit, with `prompt + completion` at the deployment's window, was cut by the
  window. On an engine (llama.cpp, vLLM, SGLang) a length stop before the client's limit
  is a window cut even where the window was thought larger: `prompt + completion` is the
  window, and it is learned (unless the reported prompt is below the prompt's lower bound,
  below: such a count teaches nothing).
* **prompt cut** (suspected silent truncation, Ollama): the worker reports fewer prompt
  tokens than the gateway's lower bound for the prompt (one token per 8 bytes of its text,
  whitespace not counted and a run of one repeated character, `====` or blank lines, as
  one character, since tokenizers merge it; real tokenizers give more, English about 4
  bytes a token). Ollama
  keeps a too-long prompt's end and answers 200. Prompts under 32 bound tokens are not
  judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fleetgate.context.estimate import output_reserve
from fleetgate.context.tally import collapse_runs
from fleetgate.execute.usage import LENGTH

CUT_SHORT_HEADER = "X-Fleetgate-Truncated"
CUT_SHORT_NOTE = "context_cut_short"
TRUNCATION_HEADER = "X-Fleetgate-Truncation-Suspected"
TRUNCATION_NOTE = "truncation_suspected"
BYTES_PER_TOKEN_BOUND = 8
MIN_BOUND = 32
# endpoints whose answers generate text (and report a stop reason)
CHECKED_ENDPOINTS = frozenset(
    {"ollama.chat", "ollama.generate", "chat.completions", "completions", "messages", "responses"}
)
# engines whose only reason to stop short of the client's limit on length is the window
WINDOW_STOPS = frozenset({"llamacpp", "vllm", "sglang"})


@dataclass(frozen=True, slots=True)
class Cut:
    """An answer a window cut: what to show (header, note) and the window it teaches."""

    header: str
    note: str
    detail: dict[str, int]
    window: int | None = None  # the window the answer shows (learned when it differs)

    def header_value(self) -> str:
        return "; ".join(f"{k}={v}" for k, v in self.detail.items())


def cut_short(
    prompt: int | None,
    completion: int | None,
    stop: str | None,
    window: int | None,
    requested: int | None,
    kind: str,
) -> Cut | None:
    """A window cut the answer short (see the module docstring); None otherwise."""
    if prompt is None or completion is None or (stop is not None and stop != LENGTH):
        return None
    if requested is not None and completion >= requested:
        return None  # the client's own limit stopped it
    used = prompt + completion
    at_window = window is not None and used >= window
    if not at_window and not (stop == LENGTH and requested is not None and kind in WINDOW_STOPS):
        return None
    detail = {"prompt": prompt, "completion": completion, "window": window or used}
    return Cut(CUT_SHORT_HEADER, CUT_SHORT_NOTE, detail, used)


def _text_bytes(value: Any, collapse: bool) -> int:
    """Bytes of text, whitespace left out (tokenizers merge long runs of it); with
    `collapse`, a run of one repeated character counts as one."""
    if isinstance(value, str):
        if collapse:
            value = collapse_runs(value)
        size = len(value.encode("utf-8")) if not value.isascii() else len(value)
        return size - value.count(" ") - value.count("\n") - value.count("\t")
    if isinstance(value, list):
        return sum(_text_bytes(v, collapse) for v in value)
    if isinstance(value, dict):
        return _text_bytes(value.get("text"), collapse) + _text_bytes(
            value.get("content"), collapse
        )
    return 0


def prompt_lower_bound(body: dict[str, Any], collapse: bool = True) -> int:
    """Fewest tokens the prompt text can be (one per 8 bytes; `collapse=False`: runs of a
    repeated character counted in full, a cheaper first look that only bounds it above)."""
    size = sum(
        _text_bytes(body.get(key), collapse)
        for key in ("messages", "prompt", "system", "instructions", "input", "suffix")
    )
    return size // BYTES_PER_TOKEN_BOUND


def prompt_cut(body: dict[str, Any], reported: int | None) -> Cut | None:
    """The worker read less of the prompt than it can be (suspected silent truncation)."""
    if reported is None:
        return None
    # the text as it is first (no regex walk on every answer); runs only when in question
    bound = prompt_lower_bound(body, collapse=False)
    if bound < MIN_BOUND or reported >= bound:
        return None
    bound = prompt_lower_bound(body)
    if bound < MIN_BOUND or reported >= bound:
        return None
    return Cut(TRUNCATION_HEADER, TRUNCATION_NOTE, {"reported": reported, "lower_bound": bound})


def judge(
    body: dict[str, Any],
    endpoint: str,
    kind: str,
    window: int | None,
    prompt: int | None,
    completion: int | None,
    stop: str | None,
) -> Cut | None:
    """Whether a window cut a successful answer (a cut output first, then a cut prompt)."""
    if endpoint not in CHECKED_ENDPOINTS:
        return None
    if prompt is not None and completion is not None and stop in (LENGTH, None):
        requested = output_reserve(body, endpoint, 0) or None
        found = cut_short(prompt, completion, stop, window, requested, kind)
        if found is not None and found.window != window and prompt < prompt_lower_bound(body):
            found = None  # a window learned from a prompt count that cannot be right: none
        if found is not None:
            return found
    if kind == "ollama":  # only Ollama keeps a prompt's end and answers 200
        return prompt_cut(body, prompt)
    return None
