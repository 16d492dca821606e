"""Fit the tokenizer families' parameters (src/fleetgate/context/families.py) to real counts.

Qwen2: the true count of each corpus request is the real llama.cpp engine's templated prompt
(`/apply-template` with the request's messages and tools) tokenized by the real Qwen2
`tokenizer.json`. Llama 3: pass `--llama3 PATH` with a Llama 3 `tokenizer.json`; its chat
template (Llama 3.1 layout, tools in a system block) is rendered here, since the file has
none. The fit is non-negative least squares on the ratio estimate / true count over a
training corpus (seed 11), checked on a held-out one (seed 12); the printed parameters are
scaled so that the held-out median ratio is `--center`.

Run: python3 scripts/fit_estimate.py [--n 1800] [--llama3 tokenizer.json]
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

from fleetgate.context.tally import FIELDS, tally_body
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


def fit(x: np.ndarray, y: np.ndarray, per_message: float) -> np.ndarray:
    """Non-negative weights minimising the squared relative error; each message costs at
    least the template's own scaffolding (`per_message`), which the fit cannot take away."""
    messages = FIELDS.index("messages")
    fixed = x[:, messages] * per_message
    scaled = x / y[:, None]
    used = scaled.any(axis=0)
    weights = np.zeros(x.shape[1])
    weights[used], _ = nnls(scaled[:, used], 1 - fixed / y)
    weights[messages] += per_message
    return weights


def report(name: str, weights: np.ndarray, x: np.ndarray, y: np.ndarray, kinds: list[str]) -> None:
    ratio = (x @ weights) / y
    q = np.quantile(ratio, [0.01, 0.025, 0.05, 0.5, 0.95, 0.975, 0.99])
    inside = float(np.mean((ratio >= 0.85) & (ratio <= 1.25)))
    print(f"{name}: held-out ratio quantiles 1/2.5/5/50/95/97.5/99 % = {np.round(q, 3)}")
    print(f"  within [0.85, 1.25]: {inside:.1%}")
    for kind in sorted(set(kinds)):
        r = ratio[[i for i, k in enumerate(kinds) if k == kind]]
        print(f"  {kind:12s} {np.round(np.quantile(r, [0.0, 0.05, 0.5, 0.95, 1.0]), 3)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1800)
    parser.add_argument("--llama3", help="a Llama 3 tokenizer.json")
    parser.add_argument("--center", type=float, default=1.04)
    args = parser.parse_args()
    train = list(corpus(11, args.n))
    test = list(corpus(12, args.n // 2))
    # the templates' scaffolding per message: Qwen2.5 `<|im_start|>role\n … <|im_end|>\n`,
    # Llama 3 `<|start_header_id|>role<|end_header_id|>\n\n … <|eot_id|>`
    families = {"qwen2": (qwen_counts, 5.0)}
    if args.llama3:
        path = args.llama3
        families["llama3"] = (lambda bodies: llama3_counts(path, bodies), 5.0)
    x_train = np.array([tally_body(s.body, "chat.completions").counts for s in train], float)
    x_test = np.array([tally_body(s.body, "chat.completions").counts for s in test], float)
    kinds = [s.kind for s in test]
    for name, (counts, per_message) in families.items():
        y_train = np.array(counts([s.body for s in train]), float)
        y_test = np.array(counts([s.body for s in test]), float)
        weights = fit(x_train, y_train, per_message)
        weights *= args.center / np.median((x_test @ weights) / y_test)
        report(name, weights, x_test, y_test, kinds)
        print(
            "  "
            + name
            + " = {"
            + ", ".join(f'"{f}": {w:.4f}' for f, w in zip(FIELDS, weights, strict=True) if w)
            + "}"
        )


if __name__ == "__main__":
    main()
