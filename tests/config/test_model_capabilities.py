"""The model_capabilities block and per-worker context settings validate with their paths."""

from __future__ import annotations

from fleetgate.config import validate_config


def problems(data: dict) -> dict[str, str]:
    config, found = validate_config(data)
    assert config is None
    return {p.path: p.message for p in found}


def test_defaults_and_a_valid_block() -> None:
    config, found = validate_config(
        {
            "model_capabilities": {
                "mode": "observe",
                "context_guard": "warn",
                "context": {"max_requested_tokens": -1},
            },
            "providers": [
                {
                    "id": "o",
                    "kind": "ollama",
                    "base_url": "http://h:11434",
                    "context_limits": {"large-*": 16384, "*": 32768},
                    "concurrency_limit": 2,
                    "queue_size": 0,
                }
            ],
        }
    )
    assert config is not None and not found
    assert config.model_capabilities.cache_ttl == 600
    assert config.model_capabilities.context.default_worker_tokens == 4096


def test_bad_values_are_reported_by_path() -> None:
    found = problems(
        {
            "model_capabilities": {
                "mode": "audit",
                "context_guard": "allow",
                "context": {"max_requested_tokens": 0, "extra": 1},
            },
            "providers": [
                {
                    "id": "o",
                    "kind": "ollama",
                    "base_url": "http://h",
                    "context_limits": {"*": 0},
                    "concurrency_limit": 0,
                }
            ],
        }
    )
    assert "model_capabilities.mode" in found
    assert "model_capabilities.context_guard" in found
    assert "-1" in found["model_capabilities.context.max_requested_tokens"]
    assert "unknown field" in found["model_capabilities.context.extra"]
    assert "providers[0].context_limits.*" in found
    assert found["providers[0].concurrency_limit"] == "must be a positive integer"
