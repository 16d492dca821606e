"""What a worker says about its context window, parsed from its own API answers.

Pure functions over decoded JSON bodies, one per engine endpoint, so each can be tested
against a recorded response:

* Ollama `GET /api/ps` → the loaded model's `context_length`;
* Ollama `POST /api/show` → `num_ctx` in the Modelfile `parameters` text, and the model's
  maximum `model_info["<arch>.context_length"]`;
* vLLM / SGLang `GET /v1/models` → `max_model_len`;
* SGLang `GET /get_model_info` → its context length field, where the version has one;
* llama.cpp `GET /props` → `n_ctx` ÷ `total_slots` (each slot gets an equal share of the
  KV cache), unless the server runs with a unified KV cache.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Evidence:
    """One refresh's findings for one deployment; None where the worker said nothing."""

    loaded_context: int | None = None  # Ollama /api/ps: the model is loaded with this
    num_ctx: int | None = None  # Ollama /api/show Modelfile parameter
    model_max: int | None = None  # the model's theoretical maximum
    engine_window: int | None = None  # vLLM / SGLang / llama.cpp serving window
    engine_source: str | None = None  # "api_models" | "model_info" | "props"
    loaded: bool = False  # the model is loaded on the worker right now
    error: str | None = None  # why a probe failed (the evidence it gave is still used)
    fetched_at: float = 0.0


def _positive(value: Any) -> int | None:
    return value if type(value) is int and value > 0 else None


def ollama_name(name: str) -> str:
    """Ollama's canonical form of a model name: `llama3.2` is `llama3.2:latest`."""
    return name if ":" in name.rsplit("/", 1)[-1] else name + ":latest"


def parse_ollama_ps(body: Any, model: str) -> tuple[bool, int | None]:
    """(is the model loaded, the context it is loaded with) from `GET /api/ps`."""
    want = ollama_name(model)
    entries = body.get("models") if isinstance(body, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        names = {ollama_name(str(entry.get(k))) for k in ("name", "model") if entry.get(k)}
        if want in names:
            return True, _positive(entry.get("context_length"))
    return False, None


def parse_ollama_show(body: Any) -> tuple[int | None, int | None]:
    """(Modelfile `num_ctx`, model maximum context) from `POST /api/show`."""
    if not isinstance(body, dict):
        return None, None
    num_ctx = None
    params = body.get("parameters")
    if isinstance(params, str):
        match = _NUM_CTX.search(params)
        if match:
            num_ctx = _positive(int(match.group(1)))
    model_max = None
    info = body.get("model_info")
    if isinstance(info, dict):
        arch = info.get("general.architecture")
        if isinstance(arch, str):
            model_max = _positive(info.get(f"{arch}.context_length"))
        if model_max is None:
            found = [v for k, v in info.items() if k.endswith(".context_length")]
            model_max = _positive(found[0]) if len(found) == 1 else None
    return num_ctx, model_max


def parse_openai_models(body: Any, model: str) -> int | None:
    """`max_model_len` of `model` (or of the only model served) from `GET /v1/models`."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    entries = [e for e in data if isinstance(e, dict)]
    chosen = [e for e in entries if e.get("id") == model]
    if not chosen and len(entries) == 1:
        chosen = entries
    for entry in chosen:
        for key in ("max_model_len", "context_length", "max_context_length"):
            value = _positive(entry.get(key))
            if value is not None:
                return value
    return None


def parse_sglang_model_info(body: Any) -> int | None:
    """The context length SGLang's `GET /get_model_info` reports, when this version has it."""
    if not isinstance(body, dict):
        return None
    for key in ("context_length", "max_context_length", "max_model_len"):
        value = _positive(body.get(key))
        if value is not None:
            return value
    return None


def parse_llamacpp_props(body: Any, unified_kv: bool) -> int | None:
    """The window of one request on a llama.cpp server, from `GET /props`."""
    if not isinstance(body, dict):
        return None
    settings = body.get("default_generation_settings")
    n_ctx = _positive(settings.get("n_ctx")) if isinstance(settings, dict) else None
    if n_ctx is None:
        n_ctx = _positive(body.get("n_ctx"))
    if n_ctx is None:
        return None
    slots = _positive(body.get("total_slots")) or 1
    # fewer tokens than slots leaves each slot nothing: no window, not a window of 0
    return n_ctx if unified_kv else _positive(n_ctx // slots)
