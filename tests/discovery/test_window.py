"""The evidence chain and its clamps, as pure functions."""

from __future__ import annotations

from fleetgate.config.schema import ModelCapabilitiesConfig
from fleetgate.discovery.evidence import Evidence
from fleetgate.discovery.store import WindowStore
from fleetgate.discovery.window import match_limit, resolve_window
from fleetgate.fleet import build_fleet
from tests.harness import fleet_config

CAPS = ModelCapabilitiesConfig.model_validate({"context": {"default_worker_tokens": 2048}})


def dep(kind: str = "ollama", window: int | None = None, **provider: object):
    config = fleet_config(
        {
            "providers": [{"id": "p", "kind": kind, "base_url": "http://h:1", **provider}],
            "deployments": [
                {
                    "id": "d",
                    "model": "m",
                    "provider": "p",
                    "upstream_model": "large-q4",
                    "context_window": window,
                }
            ],
        }
    )
    return build_fleet(config).deployments["d"]


def test_each_evidence_level_wins_in_turn() -> None:
    d = dep(default_context_tokens=6000)
    full = Evidence(loaded_context=16000, num_ctx=12000, loaded=True)
    assert resolve_window(d, full, None, CAPS).source == "api_ps"
    assert resolve_window(d, full, None, CAPS).tokens == 16000
    show_only = Evidence(num_ctx=12000)
    assert (resolve_window(d, show_only, None, CAPS).tokens, "api_show") == (12000, "api_show")
    view = resolve_window(d, Evidence(), None, CAPS)
    assert (view.tokens, view.source) == (6000, "config")
    view = resolve_window(dep(), None, None, CAPS)
    assert (view.tokens, view.source) == (2048, "default")
    view = resolve_window(d, full, 3000, CAPS)
    assert (view.tokens, view.source) == (3000, "parsed_from_error")


def test_clamped_by_model_maximum_and_most_specific_glob() -> None:
    d = dep(context_limits={"*": 32768, "large-*": 9000, "large-q4": 20000, "l*": 5000})
    view = resolve_window(d, Evidence(loaded_context=65536, model_max=40960), None, CAPS)
    # the exact name beats every glob; the model maximum is larger than it
    assert (view.tokens, view.clamped_by, view.limit_pattern) == (
        20000,
        "context_limits",
        "large-q4",
    )
    view = resolve_window(d, Evidence(loaded_context=65536, model_max=16384), None, CAPS)
    assert (view.tokens, view.clamped_by, view.source) == (16384, "model_max", "api_ps")
    limits = (("*", 32768), ("l*", 5000), ("large-*", 9000))
    assert match_limit(limits, "large-q8") == ("large-*", 9000)
    assert match_limit(limits, "lite") == ("l*", 5000)
    assert match_limit(limits, "small") == ("*", 32768)
    assert match_limit((), "small") is None


def test_declared_window_is_config_evidence_and_a_clamp() -> None:
    d = dep(kind="vllm", window=8192)
    assert resolve_window(d, None, None, CAPS).source == "config"
    view = resolve_window(d, Evidence(engine_window=32768, engine_source="api_models"), None, CAPS)
    assert (view.tokens, view.source, view.clamped_by) == (8192, "api_models", "context_window")
    unknown = resolve_window(dep(kind="vllm"), None, None, CAPS)
    assert (unknown.tokens, unknown.source) == (None, "unknown")


def test_store_parsed_limit_expires_after_one_cache_period() -> None:
    d = dep()
    store = WindowStore(CAPS)
    store.record("d", Evidence(loaded_context=8192, loaded=True, fetched_at=100.0))
    assert store.effective_window(d) == (8192, "api_ps")
    store.note_context_error("d", 4096, now=1000.0)
    assert store.view(d, now=1000.0 + 10).tokens == 4096
    assert store.view(d, now=1000.0 + CAPS.cache_ttl + 1).source == "api_ps"
    assert store.is_loaded(d)
