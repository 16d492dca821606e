"""A template that drops tool results (Phi-3.5's does): the fit learns what that saves.

The engine here is a stand-in tokenizer that costs text by its pieces (a word 1.3 tokens, a
digit, a punctuation mark or a CJK character one each) and renders every turn but the tool
results. What a result saves is what its text costs, which differs by kind of text: a
count of tool turns, or of their characters, cannot tell a result of prose from one of
digits or Chinese.
"""

from __future__ import annotations

import random
import re
from typing import Any

from fleetgate.context.families import FAMILIES
from fleetgate.context.fit import TokenizerFit
from fleetgate.context.tally import FIELDS, tally_body

PROSE = (
    "The gateway sends each request to the deployment whose window holds it, and the "
    "answer's usage teaches the estimate how this tokenizer counts."
)
KINDS = {
    "prose": lambda rng, n: " ".join([PROSE] * n),
    "digits": lambda rng, n: " ".join(str(rng.randrange(10**6)) for _ in range(12 * n)),
    "cjk": lambda rng, n: "网关把每个请求发送到能够容纳它的部署。" * n,
    "json": lambda rng, n: ", ".join(f'{{"id": {i}, "ok": true}}' for i in range(6 * n)),
}


def _cost(text: str) -> float:
    """The stand-in tokenizer."""
    words = len(re.findall(r"[A-Za-z]+", text))
    return 1.3 * words + len(re.findall(r"[0-9]|[^\w\s]|[^\x00-\x7f]", text))


def _engine_count(chat: dict[str, Any]) -> int:
    """The prompt as the template renders it: every turn but the tool results, 4 tokens
    of scaffolding a turn rendered."""
    rendered = [m for m in chat["messages"] if m["role"] != "tool"]
    return round(sum(_cost(m["content"]) + 4 for m in rendered)) + 3


def _chat(rng: random.Random) -> dict[str, Any]:
    def text(most: int) -> str:
        return KINDS[rng.choice(sorted(KINDS))](rng, rng.randint(1, most))

    messages: list[dict[str, Any]] = [{"role": "user", "content": text(6)}]
    for t in range(rng.randint(1, 2)):
        call = {
            "id": f"call_{t}",
            "type": "function",
            "function": {"name": "lookup", "arguments": '{"q": "x"}'},
        }
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{t}", "content": text(4)})
    messages.append({"role": "user", "content": text(6)})
    return {"messages": messages}


def test_the_tally_counts_the_pieces_of_tool_results_only() -> None:
    index = FIELDS.index("tool_text")
    chat = {
        "messages": [
            {"role": "user", "content": "three plain words"},
            {"role": "tool", "tool_call_id": "c", "content": "two words, 42 网关"},
        ]
    }
    # two words, a comma, two digits and two characters outside ASCII
    assert tally_body(chat, "chat.completions").counts[index] == 7
    assert tally_body({"messages": chat["messages"][:1]}, "chat.completions").counts[index] == 0


def test_a_fit_learns_a_template_that_drops_tool_results_of_any_kind() -> None:
    rng = random.Random(5)
    fit = TokenizerFit(FAMILIES["generic"].weights)
    for _ in range(200):
        chat = _chat(rng)
        fit.add(tally_body(chat, "chat.completions").counts, _engine_count(chat))
    fit.refit()
    ratios = []
    for _ in range(60):
        chat = _chat(rng)
        ratios.append(_engine_count(chat) / fit.tokens(tally_body(chat, "chat.completions").counts))
    # without the field, 9 of 60 were: the fit had only the count of tool turns
    assert sum(0.9 <= r <= 1.1 for r in ratios) >= 0.9 * len(ratios), sorted(ratios)
