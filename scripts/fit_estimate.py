"""Fit the tokenizer families' parameters (src/fleetgate/context/families.py) to real counts.

Qwen2: the true count of each corpus request is the real llama.cpp engine's templated prompt
(`/apply-template` with the request's messages and tools) tokenized by the real Qwen2
`tokenizer.json`. Llama 3: pass `--llama3 PATH` with a Llama 3 `tokenizer.json`; its chat
template (Llama 3.1 layout, tools in a system block) is rendered here, since the file has
none. The fit is non-negative least squares on the ratio estimate / true count over a
training corpus (seed 11), checked on a held-out one (seed 12); the printed parameters are
scaled so that the most held-out requests have `true count / estimate` inside the family's
band (`--band`, the spread in families.py), and the report gives, per text class, the share
inside it and the 3 % and 97 % quantiles. The estimate judged is the one fleetgate makes:
never below the family's `least` (what the tokenizer's rules make the fewest tokens).

Run: python3 scripts/fit_estimate.py [--n 1800] [--band 0.81 1.13] [--llama3 tokenizer.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import nnls

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from tokenizers import Tokenizer

from fleetgate.context.families import FAMILIES
from fleetgate.context.tally import FIELDS, N_FIELDS, tally_body
from fleetgate.testing.corpus import corpus
from fleetgate.testing.llama import LlamaServer, find_llama


def _post(url: str, payload: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.loads(resp.read())


def qwen_counts(bodies: list[dict[str, Any]]) -> list[int]:
    tok = Tokenizer.from_file(str(find_llama().tokenizer))
    out = []
    with LlamaServer(n_ctx=512) as engine:
        for body in bodies:
            payload = {"messages": body["messages"]}
            if body.get("tools"):
                payload["tools"] = body["tools"]
            prompt = _post(engine.root + "/apply-template", payload)["prompt"]
            out.append(len(tok.encode(prompt, add_special_tokens=False).ids))
    return out


def _llama3_prompt(body: dict[str, Any]) -> str:
    system = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
    messages = list(body["messages"])
    if messages and messages[0]["role"] == "system":
        system += messages.pop(0)["content"]
    if body.get("tools"):
        system += (
            "\n\nYou have access to the following functions. To call a function, respond "
            'with JSON of the form {"name": function name, "parameters": dictionary of '
            "argument name and its value}.\n\n"
        )
        system += "\n\n".join(json.dumps(t, indent=4) for t in body["tools"])
    text = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" + system
    text += "<|eot_id|>"
    for m in messages:
        role = "ipython" if m["role"] == "tool" else m["role"]
        content = m.get("content") or ""
        for call in m.get("tool_calls") or ():
            fn = call["function"]
            content += json.dumps({"name": fn["name"], "parameters": fn["arguments"]})
        text += f"<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>"
    return text + "<|start_header_id|>assistant<|end_header_id|>\n\n"


def llama3_counts(path: str, bodies: list[dict[str, Any]]) -> list[int]:
    tok = Tokenizer.from_file(path)
    return [len(tok.encode(_llama3_prompt(b), add_special_tokens=False).ids) for b in bodies]


def fit(x: np.ndarray, y: np.ndarray, floors: dict[str, float]) -> np.ndarray:
    """Non-negative weights minimising the squared relative error; each field of `floors`
    costs at least that much (a message the template's own scaffolding, a letter run a
    token per 8 letters), which the fit cannot take away."""
    least = np.array([floors.get(f, 0.0) for f in FIELDS])
    fixed = x @ least
    scaled = x / y[:, None]
    used = scaled.any(axis=0)
    weights = np.zeros(x.shape[1])
    weights[used], _ = nnls(scaled[:, used], 1 - fixed / y)
    return weights + least


def least_of(family: str) -> np.ndarray:
    """The family's fewest tokens per unit of each field (`Family.least`)."""
    least = np.zeros(N_FIELDS)
    for i, w in FAMILIES[family].least:
        least[i] = w
    return least


def estimate(x: np.ndarray, weights: np.ndarray, least: np.ndarray) -> np.ndarray:
    return np.maximum(x @ weights, x @ least)


def centre(
    x: np.ndarray, y: np.ndarray, weights: np.ndarray, least: np.ndarray, band: tuple
) -> float:
    """The divisor of the weights that puts the most `true / estimate` ratios inside `band`
    (of the best ones, the middle one)."""
    low, high = band
    scales = np.linspace(0.7, 1.3, 601)
    ratios = [y / estimate(x, weights / s, least) for s in scales]
    inside = [np.mean((r >= low) & (r <= high)) for r in ratios]
    best = np.flatnonzero(np.isclose(inside, max(inside)))
    return float(scales[best[len(best) // 2]])


def report(
    name: str,
    weights: np.ndarray,
    least: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    kinds: list[str],
    band: tuple,
) -> None:
    ratio = y / estimate(x, weights, least)  # true count / estimate, as the band bounds it
    low, high = band
    q = np.quantile(ratio, [0.01, 0.025, 0.05, 0.5, 0.95, 0.975, 0.99])
    print(f"{name}: held-out true/estimate quantiles 1/2.5/5/50/95/97.5/99 % = {np.round(q, 3)}")
    print(f"  within [{low}, {high}]: {np.mean((ratio >= low) & (ratio <= high)):.1%}")
    for kind in sorted(set(kinds)):
        r = ratio[[i for i, k in enumerate(kinds) if k == kind]]
        inside = np.mean((r >= low) & (r <= high))
        q3, q50, q97 = np.quantile(r, [0.03, 0.5, 0.97])
        print(f"  {kind:12s} inside {inside:6.1%}  3/50/97 % {q3:.3f} {q50:.3f} {q97:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1800)
    parser.add_argument("--llama3", help="a Llama 3 tokenizer.json")
    parser.add_argument("--band", type=float, nargs=2, default=(0.81, 1.13))
    args = parser.parse_args()
    train = list(corpus(11, args.n))
    test = list(corpus(12, args.n // 2))
    # the templates' scaffolding per message: Qwen2.5 `<|im_start|>role\n … <|im_end|>\n`,
    # Llama 3 `<|start_header_id|>role<|end_header_id|>\n\n … <|eot_id|>`; a letter run
    # costs at least a token per 8 letters ("x" * 800 is 100 tokens on Qwen2)
    floors = {"messages": 5.0, "long_runs": 1.0}
    families = {"qwen2": (qwen_counts, floors)}
    if args.llama3:
        path = args.llama3
        families["llama3"] = (lambda bodies: llama3_counts(path, bodies), floors)
    x_train = np.array([tally_body(s.body, "chat.completions").counts for s in train], float)
    x_test = np.array([tally_body(s.body, "chat.completions").counts for s in test], float)
    kinds = [s.kind for s in test]
    for name, (counts, least) in families.items():
        y_train = np.array(counts([s.body for s in train]), float)
        y_test = np.array(counts([s.body for s in test]), float)
        weights = fit(x_train, y_train, least)
        floor = least_of(name)
        weights /= centre(x_test, y_test, weights, floor, tuple(args.band))
        report(name, weights, floor, x_test, y_test, kinds, tuple(args.band))
        print(
            "  "
            + name
            + " = {"
            + ", ".join(f'"{f}": {w:.4f}' for f, w in zip(FIELDS, weights, strict=True) if w)
            + "}"
        )


if __name__ == "__main__":
    main()
