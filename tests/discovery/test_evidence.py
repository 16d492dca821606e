"""Parsing what engines say about their windows, against recorded response shapes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fleetgate.discovery.evidence import (
    ollama_name,
    parse_llamacpp_props,
    parse_ollama_ps,
    parse_ollama_show,
    parse_openai_models,
    parse_sglang_model_info,
)

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def test_vllm_models_max_model_len_by_id() -> None:
    body = load("vllm_models.json")
    assert parse_openai_models(body, "meta-llama/Llama-3.1-8B-Instruct") == 32768
    assert parse_openai_models(body, "sql-lora") is None  # an adapter states no length
    assert parse_openai_models(body, "not-served") is None  # two entries: no guessing


def test_sglang_models_and_model_info() -> None:
    assert parse_openai_models(load("sglang_models.json"), "anything-else") == 32768
    assert parse_openai_models(load("sglang_models_old.json"), "Qwen/Qwen2.5-7B-Instruct") is None
    assert parse_sglang_model_info(load("sglang_model_info.json")) is None
    assert parse_sglang_model_info({"model_path": "m", "context_length": 65536}) == 65536


def test_llamacpp_props_divides_by_slots_unless_unified() -> None:
    body = load("llamacpp_props.json")
    assert parse_llamacpp_props(body, unified_kv=False) == 4096
    assert parse_llamacpp_props(body, unified_kv=True) == 16384
    assert parse_llamacpp_props({"n_ctx": 8192}, unified_kv=False) == 8192
    assert parse_llamacpp_props({"total_slots": 2}, unified_kv=False) is None


def test_ollama_ps_matches_names_with_implicit_latest_tag() -> None:
    body = load("ollama_ps.json")
    assert parse_ollama_ps(body, "qwen3:8b") == (True, 16384)
    assert parse_ollama_ps(body, "llama3.2") == (True, 4096)
    assert parse_ollama_ps(body, "mistral") == (False, None)
    assert ollama_name("library/llama3.2") == "library/llama3.2:latest"
    assert ollama_name("host:5000/ns/model") == "host:5000/ns/model:latest"


def test_ollama_show_num_ctx_and_model_maximum() -> None:
    assert parse_ollama_show(load("ollama_show.json")) == (8192, 40960)
    no_param = {"parameters": 'stop "x"', "model_info": {"llama.context_length": 131072}}
    assert parse_ollama_show(no_param) == (None, 131072)
    assert parse_ollama_show({"parameters": "num_ctx 0"}) == (None, None)
