"""Engine load read from `/metrics` pages as vLLM, SGLang and llama.cpp write them."""

from __future__ import annotations

import pytest

from fleetgate.discovery.engine_metrics import parse_metrics

MODEL = "Qwen/Qwen2.5-7B-Instruct"


def _gauge(name: str, series: list[tuple[dict[str, str], float]]) -> str:
    lines = [f"# HELP {name} A gauge.", f"# TYPE {name} gauge"]
    for labels, value in series:
        inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
        lines.append(f"{name}{{{inner}}} {value!r}" if inner else f"{name} {value!r}")
    return "\n".join(lines)


def _histogram_noise(prefix: str) -> str:
    """The hundreds of histogram lines around the gauges of a real page."""
    name = f"{prefix}time_to_first_token_seconds"
    lines = [f"# TYPE {name} histogram"]
    lines += [f'{name}_bucket{{le="{b}",model_name="{MODEL}"}} 3.0' for b in (0.01, 0.1, 1.0)]
    return "\n".join([*lines, f'{name}_sum{{model_name="{MODEL}"}} 1.5'])


def test_sglang_ranks_of_one_engine_count_once():
    # two tensor-parallel ranks of one engine report the same scheduler's queue and usage
    ranks = [
        {"model_name": MODEL, "engine_type": "unified", "tp_rank": str(r), "pp_rank": "0"}
        for r in (0, 1)
    ]
    page = "\n".join(
        [
            _histogram_noise("sglang:"),
            _gauge("sglang:num_queue_reqs", [(ranks[0], 7.0), (ranks[1], 7.0)]),
            _gauge("sglang:num_running_reqs", [(ranks[0], 12.0), (ranks[1], 12.0)]),
            _gauge("sglang:token_usage", [(ranks[0], 0.61), (ranks[1], 0.61)]),
        ]
    )
    load = parse_metrics("sglang", page, MODEL, now=5.0)
    assert (load.waiting, load.running, load.kv_cache) == (7.0, 12.0, 0.61)
    assert load.fetched_at == 5.0


def test_sglang_as_its_documentation_shows_it():
    page = "\n".join(
        [
            _gauge("sglang:token_usage", [({"model_name": MODEL}, 0.28)]),
            _gauge("sglang:num_queue_reqs", [({"model_name": MODEL}, 0.0)]),
            _gauge("sglang:num_running_reqs", [({"model_name": MODEL}, 3.0)]),
            _histogram_noise("sglang:"),
        ]
    )
    load = parse_metrics("sglang", page, None)
    assert (load.waiting, load.running, load.kv_cache) == (0.0, 3.0, 0.28)


def test_vllm_data_parallel_engines_add_their_queues_and_report_the_fullest_cache():
    engines = [{"engine": str(e), "model_name": MODEL} for e in (0, 1)]
    page = "\n".join(
        [
            _gauge("vllm:num_requests_waiting", [(engines[0], 2.0), (engines[1], 5.0)]),
            _gauge("vllm:num_requests_running", [(engines[0], 8.0), (engines[1], 8.0)]),
            _gauge("vllm:kv_cache_usage_perc", [(engines[0], 0.75), (engines[1], 0.9)]),
            _histogram_noise("vllm:"),
        ]
    )
    load = parse_metrics("vllm", page, MODEL)
    assert (load.waiting, load.running) == (7.0, 16.0)
    assert load.kv_cache == pytest.approx(0.9)  # a share of one engine's cache, never > 1


def test_vllm_serving_two_models_reads_the_deployments_own():
    page = "\n".join(
        [
            _gauge(
                "vllm:num_requests_waiting",
                [
                    ({"engine": "0", "model_name": MODEL}, 4.0),
                    ({"engine": "0", "model_name": "other"}, 40.0),
                ],
            ),
            # the older name of the cache gauge
            _gauge(
                "vllm:gpu_cache_usage_perc",
                [
                    ({"engine": "0", "model_name": MODEL}, 0.5),
                    ({"engine": "0", "model_name": "other"}, 0.99),
                ],
            ),
        ]
    )
    load = parse_metrics("vllm", page, MODEL)
    assert (load.waiting, load.running, load.kv_cache) == (4.0, None, 0.5)
    # with two models and none named, the page says nothing certain
    assert parse_metrics("vllm", page, "a third model").waiting is None


def test_llama_cpp_gauges_have_no_labels():
    page = "\n".join(
        [
            _gauge("llamacpp:requests_processing", [({}, 1.0)]),
            _gauge("llamacpp:requests_deferred", [({}, 3.0)]),
        ]
    )
    load = parse_metrics("llamacpp", page, "tiny")
    assert (load.waiting, load.running, load.kv_cache) == (3.0, 1.0, None)
