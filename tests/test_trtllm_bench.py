"""trtllm-bench throughput as it runs (sim/engines/trtllm_bench.py, trtllm's "offline" entry
point): its batch and token heuristics from the dataset's ISL/OSL and the GPU, the chunking
bump, max_seq_len, FP8 KV for FP8 checkpoints, the KV fraction and padded CUDA graphs."""

from __future__ import annotations

import pytest

import sim.engines.resolve as resolve_module
from sim.engines import trtllm, trtllm_bench
from sim.errors import UserError
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model

H100, H200 = load_hardware("h100-sxm"), load_hardware("h200")
L8B, L70B = load_model("llama-3.1-8b"), load_model("llama-3.1-70b")


def bench(hw, model, tp, isl, osl, **more):
    args = {"target_input_len": isl, "target_output_len": osl, "dtype": "fp8", **more}
    values, rules, *_ = trtllm.defaults("trtllm", "1.0.0", hw, model, tp, "offline", args)
    return values, rules


def test_the_heuristic_rounds_as_finetune_setting_does():
    # 8B FP8 on 80 GiB: 0.9 x (80 - 7.5) GiB / (32 KiB x 256 tokens) > 4096 requests: capped
    bs, tokens, rule = trtllm_bench.limits(H100, L8B, 1, 1, "fp8", "fp8", 128, 128)
    assert (bs, tokens) == (4096, 8192) and "bench/build/tuning.py" in rule
    # 22,000-token requests: 48 fit, rounded up to the floor of 64; tokens at their floor 2048
    assert trtllm_bench.limits(H100, L8B, 1, 1, "fp8", "fp8", 20000, 2000)[:2] == (64, 2048)
    # a BF16 KV cache holds half the requests: 131 -> 65 of 70B TP2 at 128/4096
    fp8 = trtllm_bench.limits(H100, L70B, 2, 1, "fp8", "fp8", 128, 4096)[0]
    bf16 = trtllm_bench.limits(H100, L70B, 2, 1, "fp8", "auto", 128, 4096)[0]
    assert (fp8, bf16) == (160, 96)
    # quantisations trtllm-bench does not tune take BuildConfig's limits
    assert trtllm_bench.limits(H100, L8B, 1, 1, "fp4", "auto", 128, 128)[:2] == (2048, 8192)


def test_too_little_kv_memory_is_refused_as_trtllm_bench_refuses_it():
    with pytest.raises(UserError, match="insufficient to run this model"):
        trtllm_bench.limits(H100, L70B, 1, 1, "fp8", "fp8", 100000, 100000)


def test_the_offline_entry_point_runs_with_trtllm_bench_settings():
    values, rules = bench(H100, L8B, 1, 20000, 2000)
    assert values["max_num_seqs"] == 64
    # chunked context off: every prompt must fit one step, so ISL + max_batch_size
    assert values["max_num_batched_tokens"] == values["max_prefill_tokens"] == 20064
    assert values["max_model_len"] == 22000
    assert values["kv_cache_dtype"] == "fp8" and "kv_cache_quant_algo" in rules["kv_cache_dtype"]
    assert values["gpu_memory_utilization"] == 0.9
    assert values["graph_max_bs"] == 64 and "padding" in rules["cudagraph_capture_sizes"]
    assert values["async_scheduling"] is True  # the overlap scheduler
    chunked, _ = bench(H100, L8B, 1, 20000, 2000, enable_chunked_prefill=True)
    assert chunked["max_num_batched_tokens"] == 2048
    bf16, _ = bench(H100, L8B, 1, 128, 128, dtype="bf16")
    assert bf16["kv_cache_dtype"] == "auto"


def test_without_the_dataset_lengths_the_llm_api_defaults_stand_and_say_so():
    values, rules, *_ = trtllm.defaults("trtllm", "1.0.0", H100, L8B, 1, "offline", {})
    assert (values["max_num_seqs"], values["max_num_batched_tokens"]) == (2048, 8192)
    assert "give engine_args target_input_len and target_output_len" in rules["max_num_seqs"]


def test_padded_graph_sizes_reach_the_batch():
    assert trtllm_bench.capture_sizes(64)[-3:] == (48, 56, 64)
    assert trtllm_bench.capture_sizes(160)[-3:] == (120, 128, 160)
    assert trtllm_bench.capture_sizes(4096)[-5:] == (256, 512, 1024, 2048, 4096)
    assert trtllm.capture_sizes("1.0.0", None)[0][-1] == 128  # trtllm-serve: unchanged


def test_through_resolve_once_the_bench_arguments_are_taken(monkeypatch):
    """resolve() with trtllm.BENCH_ARGS taken as arguments the family consumes (the change
    asked of resolve.py): the settings, and the user's own limits over the derived ones."""
    monkeypatch.setattr(resolve_module, "SPECIAL", resolve_module.SPECIAL | set(trtllm.BENCH_ARGS))
    args = {"target_input_len": 128, "target_output_len": 4096, "dtype": "fp8"}
    s = resolve_module.resolve("trtllm@1.0.0", H200, L70B, 1, "offline", args)
    assert (s.max_num_seqs, s.kv_cache_dtype, s.max_model_len) == (128, "fp8", 4224)
    assert s.cudagraph_capture_sizes[-1] == 128
    mine = resolve_module.resolve(
        "trtllm@1.0.0", H200, L70B, 1, "offline", {**args, "max_batch_size": 64}
    )
    assert mine.max_num_seqs == 64
    served = resolve_module.resolve("trtllm@1.0.0", H200, L70B, 1, "server", {})
    assert (served.max_num_seqs, served.kv_cache_dtype) == (2048, "auto")


def test_the_heuristic_gives_what_trtllm_bench_logged():
    """NVIDIA/TensorRT-LLM#6294 (trtllm-bench throughput, nvidia/Llama-3.1-8B-Instruct-FP8,
    one 80 GB H100, --kv_cache_free_gpu_mem_fraction 0.8, tensorrt_llm 0.20.0 with the same
    tuning.py): its dataset averages ISL 128 and OSL 28 (the log's 38,762.1 total and 6,957.3
    output tokens/s at 248.475 requests/s), and it logged max_num_requests=4096,
    max_num_tokens=23552."""
    bs, tokens, _ = trtllm_bench.limits(H100, L8B, 1, 1, "fp8", "fp8", 128, 28, 0.8)
    assert (bs, tokens) == (4096, 23552)


@pytest.mark.parametrize("bad", ["long", -5, 0, float("nan"), True])
def test_a_bad_dataset_length_is_one_line(bad):
    with pytest.raises(UserError, match=r"engine_args\.target_input_len="):
        bench(H100, L8B, 1, bad, 128)
