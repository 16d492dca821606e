"""What a chat template adds to a prompt beyond its text, learned from counts and usage.

A template restarts at every message boundary, so what it adds around a message depends on
the roles, not on the text. Two uses:

* **growing conversations** (llama.cpp, a local tokenizer): a request whose earlier
  messages were counted before costs that cached count, plus its new messages' text (one
  short `/tokenize` call), plus what the template adds around them, keyed by the role
  before them and their roles. It is learned from the first full count of such a step,
  then checked against every answer's `usage.prompt_tokens` (a different figure replaces
  it).
* **a request shape's whole scaffolding** (its roles and tool schemas): for text-only
  counters (a local tokenizer, SGLang) learned from the answers' usage, the family's
  estimate standing in until then; for plain-text chats on llama.cpp learned from the
  shape's first whole count (rendering the template is most of what a count costs there),
  then checked against usage like the rest.

Keys carry the template's identity (provider kind, upstream model, local tokenizer), so
deployments serving one model share what was learned. Plain synchronous dict work.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

import orjson

from fleetgate.fleet import Deployment

Key = tuple[str, ...]
_SIZE = 4096

STEP = "step"  # a growing conversation's new messages
WHOLE = "whole"  # a whole request's scaffolding (text-only counters)


def template_of(dep: Deployment) -> tuple[str, str, str]:
    """What decides a deployment's template: its engine kind, model and local tokenizer."""
    return (dep.provider.kind, dep.upstream_model, dep.tokenizer or "")


def role_of(message: Any) -> str:
    return str(message.get("role")) if isinstance(message, dict) else "?"


def step_key(dep: Deployment, before: Any, new: list[Any]) -> Key:
    return (STEP, *template_of(dep), role_of(before), *(role_of(m) for m in new))


def whole_key(dep: Deployment, body: dict[str, Any]) -> Key:
    tools = orjson.dumps([body.get("tools"), body.get("tool_choice")])
    digest = hashlib.blake2b(tools, digest_size=8).hexdigest()
    roles = (role_of(m) for m in body.get("messages") or ())
    return (WHOLE, *template_of(dep), digest, *roles)


class TemplateCosts:
    """Learned template tokens per key (bounded; the least recently used go first)."""

    def __init__(self) -> None:
        self._tokens: OrderedDict[Key, int] = OrderedDict()
        self.learned = 0  # times a figure was set or corrected (tests and benchmarks)

    def get(self, key: Key) -> int | None:
        tokens = self._tokens.get(key)
        if tokens is not None:
            self._tokens.move_to_end(key)
        return tokens

    def learn(self, key: Key, tokens: int) -> None:
        if tokens < 0 or self._tokens.get(key) == tokens:
            return
        self._tokens[key] = tokens
        self._tokens.move_to_end(key)
        self.learned += 1
        if len(self._tokens) > _SIZE:
            self._tokens.popitem(last=False)
