"""Chat bodies and the engine's own prompt count, shared by the exact-count tests on the real
llama.cpp engine (tests/context/test_real_engine_counts.py, test_local_tokenizer.py)."""

from __future__ import annotations

from typing import Any

import httpx

from fleetgate.testing.llama import LlamaServer

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city, today or on a given day.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "day": {"type": "string"}},
            "required": ["city"],
        },
    },
}


# one shape (a system line, a user turn, the weather tool), texts of every kind; none with
# whitespace at either end
SHAPED = [
    "Weather in Lyon, 2024-05-01? Digits: 31415926535",
    "東京の天気は 明日は雨ですか。",
    "def add(a, b):\n    return a + b  # 12.5 °C\n\n\nprint(add(1, 2))",
    "Привет, как дела? Ελληνικά κείμενα. مرحبا",
    '{"city": "Lyon", "days": [1, 2, 3], "unit": "°C"}',
    "x",
]


def shaped(system: str, text: str) -> dict[str, Any]:
    return {
        "model": "tiny",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": text}],
        "tools": [WEATHER],
    }


def prompt_tokens(engine: LlamaServer, endpoint: str, body: dict[str, Any]) -> int:
    """The prompt tokens the engine reports it read for `body` (one token generated)."""
    path = "/v1/chat/completions" if endpoint == "chat.completions" else "/v1/completions"
    answer = httpx.post(engine.root + path, json={**body, "max_tokens": 1}, timeout=60)
    assert answer.status_code == 200, answer.text
    return int(answer.json()["usage"]["prompt_tokens"])
