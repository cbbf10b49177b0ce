"""Golden resolution table: (engine version, GPU, entry point, model) -> settings, from the
facts in ../shared/reference/engine-defaults.md as corrected against each release's source
(sim/engines/vllm.py, sim/engines/sglang.py and sim/engines/trtllm.py name the files)."""

from __future__ import annotations

import pytest

from sim.engines.resolve import ENGINES, parse_engine_spec, resolve
from sim.errors import UserError
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model

# (spec, hardware, entry point, model, overrides, expected settings)
GOLDEN = [
    # V0, before chunked prefill's auto-on: the budget covers the whole context
    ("vllm@0.4.3", "h100-sxm", "server", "llama-3.1-8b", {}, {
        "scheduler": "vllm_v0", "max_num_seqs": 256, "max_num_batched_tokens": 131072,
        "enable_chunked_prefill": False, "enable_prefix_caching": False,
        "gpu_memory_utilization": 0.90, "block_size": 16, "attention_backend": "FLASH_ATTN_FA2",
        "cudagraph_mode": "FULL_DECODE_ONLY", "async_output_proc": False,
        "swap_space_bytes": 4 * 2**30, "block_watermark": 0.01,
    }),
    # 0.4.0: no vllm_flash_attn dependency -> xFormers
    ("vllm@0.4.0", "h100-sxm", "server", "llama-3.1-8b", {}, {"attention_backend": "XFORMERS"}),
    # 0.5.3+: chunked prefill auto-on above 32K context, V0 budget 512
    ("vllm@0.5.5", "h100-sxm", "server", "llama-3.1-8b", {}, {
        "enable_chunked_prefill": True, "max_num_batched_tokens": 512, "max_num_seqs": 256,
    }),
    # ... but not for a 32K model
    ("vllm@0.5.5", "h100-sxm", "server", "mistral-7b-v0.1", {}, {
        "enable_chunked_prefill": False, "max_num_batched_tokens": 32768,
    }),
    # 0.6.0: async output processing; 0.6.5: V0 chunked budget 2048
    ("vllm@0.6.3", "h100-sxm", "server", "llama-3.1-8b", {}, {
        "async_output_proc": True, "max_num_batched_tokens": 512,
    }),
    ("vllm@0.6.6", "h100-sxm", "server", "llama-3.1-8b", {}, {
        "max_num_batched_tokens": 2048, "num_scheduler_steps": 1,
        "cudagraph_capture_sizes": (1, 2, 4, *range(8, 257, 8)),
    }),
    # 0.7: FlashAttention 3 on Hopper, still V0 by default
    ("vllm@0.7.3", "h100-sxm", "server", "llama-3.1-8b", {}, {
        "scheduler": "vllm_v0", "attention_backend": "FLASH_ATTN_FA3",
    }),
    # 0.8.0-0.8.3: V1, 1024 sequences everywhere, budget keyed on the device name
    ("vllm@0.8.0", "a100-80gb", "server", "llama-3.1-8b", {}, {
        "scheduler": "vllm_v1", "max_num_seqs": 1024, "max_num_batched_tokens": 2048,
        "enable_prefix_caching": True, "cudagraph_mode": "PIECEWISE", "compile": True,
        "async_scheduling": False,
    }),
    # 0.8.4: both keyed on the name
    ("vllm@0.8.4", "a100-80gb", "server", "llama-3.1-8b", {}, {
        "max_num_seqs": 256, "max_num_batched_tokens": 2048,
    }),
    ("vllm@0.8.4", "h100-sxm", "offline", "llama-3.1-8b", {}, {
        "max_num_seqs": 1024, "max_num_batched_tokens": 16384,
    }),
    # 0.8.5 (PR #17073): by memory, A100-80GB joins the large tier
    ("vllm@0.8.5", "a100-80gb", "server", "llama-3.1-8b", {}, {
        "max_num_seqs": 1024, "max_num_batched_tokens": 8192,
    }),
    ("vllm@0.8.5", "a100-80gb", "offline", "llama-3.1-8b", {}, {
        "max_num_batched_tokens": 16384,
    }),
    # 0.9.0 (PR #17885): A100 back to the small tier
    ("vllm@0.9.2", "a100-80gb", "server", "llama-3.1-8b", {}, {
        "max_num_seqs": 256, "max_num_batched_tokens": 2048,
    }),
    ("vllm@0.9.2", "l40s", "offline", "llama-3.1-8b", {}, {
        "max_num_seqs": 256, "max_num_batched_tokens": 8192,
    }),
    # 0.10.0: capture up to min(2 x max_num_seqs, 512)
    ("vllm@0.10.2", "l40s", "server", "llama-3.1-8b", {}, {
        "cudagraph_capture_sizes": (1, 2, 4, *range(8, 513, 8)),
        "cudagraph_mode": "PIECEWISE",
    }),
    # 0.11.0: FULL_AND_PIECEWISE; 0.11.1: sizes above 256 step 16, capped at the budget
    ("vllm@0.11.0", "h100-sxm", "server", "llama-3.1-8b", {}, {
        "cudagraph_mode": "FULL_AND_PIECEWISE",
    }),
    ("vllm@0.12.0", "h100-sxm", "server", "llama-3.1-8b", {}, {
        "cudagraph_capture_sizes": (1, 2, 4, *range(8, 249, 8), *range(256, 513, 16)),
        "async_scheduling": False,
    }),
    # 0.14.0: async scheduling auto-on; 0.19.0: reserve the full prompt; 0.20.0: 0.92 and the
    # graph pool subtracted before KV sizing
    ("vllm@0.14.0", "h100-sxm", "server", "llama-3.1-8b", {}, {
        "async_scheduling": True, "scheduler_reserve_full_isl": False,
        "gpu_memory_utilization": 0.90, "cudagraph_memory_bytes": 0,
    }),
    ("vllm@0.19.0", "h100-sxm", "server", "llama-3.1-8b", {}, {
        "scheduler_reserve_full_isl": True, "gpu_memory_utilization": 0.90,
    }),
    ("vllm@0.20.0", "h100-sxm", "server", "llama-3.1-8b", {}, {
        "gpu_memory_utilization": 0.92, "cudagraph_memory_bytes": 2**30,
    }),
    # 0.28.0: the >= 160 GiB tier; Blackwell prefers FlashInfer (0.9.1+)
    ("vllm@0.33.0", "b200", "server", "llama-3.1-8b", {}, {
        "max_num_seqs": 1024, "max_num_batched_tokens": 16384, "attention_backend": "FLASHINFER",
    }),
    ("vllm@0.33.0", "h200", "server", "llama-3.1-8b", {}, {
        "max_num_seqs": 1024, "max_num_batched_tokens": 8192,
    }),
    # MLA: FlashMLA needs block size 64 (0.8-0.11 on Hopper)
    ("vllm@0.9.2", "h100-sxm", "server", "deepseek-v3", {}, {
        "attention_backend": "FLASHMLA", "block_size": 64,
    }),
    # V1 falls back to V0 for V0-only arguments (0.8-0.10) ...
    ("vllm@0.8.5", "h100-sxm", "server", "llama-3.1-8b", {"preemption_mode": "swap"}, {
        "scheduler": "vllm_v0", "preemption_mode": "swap", "max_num_seqs": 256,
    }),
    # ... and for an FP8 KV cache in 0.8.0-0.8.1, which V0 runs on xFormers; from 0.8.2 V1
    # takes it with FlashAttention 3 on Hopper (tests/test_engine_releases.py, other GPUs)
    ("vllm@0.8.1", "h100-sxm", "server", "llama-3.1-8b", {"kv_cache_dtype": "fp8"}, {
        "scheduler": "vllm_v0", "attention_backend": "XFORMERS", "kv_cache_dtype": "fp8",
    }),
    ("vllm@0.8.4", "h100-sxm", "server", "llama-3.1-8b", {"kv_cache_dtype": "fp8"}, {
        "scheduler": "vllm_v1", "attention_backend": "FLASH_ATTN_FA3", "kv_cache_dtype": "fp8",
    }),
    ("vllm@0.8.5", "h100-sxm", "server", "llama-3.1-8b", {"kv_cache_dtype": "fp8"}, {
        "scheduler": "vllm_v1", "attention_backend": "FLASH_ATTN_FA3",
    }),
    # 0.11.0: FP8 KV off Hopper -> Triton; 0.12.0: FlashInfer from the priority list
    ("vllm@0.11.0", "l40s", "server", "llama-3.1-8b", {"kv_cache_dtype": "fp8"}, {
        "attention_backend": "TRITON_ATTN",
    }),
    ("vllm@0.12.0", "l40s", "server", "llama-3.1-8b", {"kv_cache_dtype": "fp8"}, {
        "attention_backend": "FLASHINFER",
    }),
    # SGLang 0.3.0: no overlap scheduler, global_config.py's ratios (tests/test_sglang_releases.py)
    ("sglang@0.3.0", "a100-80gb", "server", "llama-3.1-8b", {}, {
        "policy": "lpm", "max_num_batched_tokens": 8192, "gpu_memory_utilization": 0.88,
        "async_scheduling": False, "min_new_token_ratio": 0.1, "new_token_ratio_decay": 0.001,
    }),
    # SGLang
    ("sglang@0.3.6", "h100-sxm", "server", "llama-3.1-8b", {}, {
        "policy": "lpm", "max_num_batched_tokens": 8192, "max_prefill_tokens": 16384,
        "gpu_memory_utilization": 0.88, "attention_backend": "FLASHINFER", "block_size": 1,
        "async_scheduling": True, "new_token_ratio": 0.7,
        "retract_decode_steps": 20, "retract_ratio_offset": 0,
    }),
    ("sglang@0.3.6", "h100-sxm", "server", "llama-3.1-8b", {"schedule_conservativeness": 0.5},
        {"new_token_ratio": 0.35}),
    ("sglang@0.4.6", "h200", "server", "llama-3.1-8b", {}, {
        "policy": "fcfs", "gpu_memory_utilization": 0.907, "attention_backend": "FLASH_ATTN_FA3",
        "cudagraph_capture_sizes": (1, 2, 4, 8, *range(16, 257, 8)),
    }),
    ("sglang@0.4.6", "rtx-4090", "server", "llama-3.1-8b", {}, {
        "max_num_batched_tokens": 2048, "cudagraph_capture_sizes": (1, 2, 4, 8),
    }),
    ("sglang@0.5.23", "a100-40gb", "server", "llama-3.1-8b", {}, {
        "max_num_batched_tokens": 4096, "retract_decode_steps": 1, "retract_ratio_offset": 1,
    }),
    ("sglang@0.5.23", "b200", "server", "llama-3.1-8b", {}, {
        "max_num_batched_tokens": 16384, "attention_backend": "TRTLLM", "block_size": 64,
    }),
    # TensorRT-LLM (PyTorch backend, LLM API)
    ("trtllm@1.0", "h100-sxm", "server", "llama-3.1-8b", {}, {
        "max_num_seqs": 2048, "max_num_batched_tokens": 8192, "block_size": 32,
        "capacity_policy": "GUARANTEED_NO_EVICT", "enable_chunked_prefill": False,
        "enable_prefix_caching": True, "gpu_memory_utilization": 0.9, "async_scheduling": True,
        "cudagraph_capture_sizes": (*range(1, 32), 32, 64, 128),
    }),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "gpu", "entry", "model", "overrides", "expected"), GOLDEN)
def test_golden_resolution(spec, gpu, entry, model, overrides, expected):
    s = resolve(spec, load_hardware(gpu), load_model(model), 1, entry, overrides)
    got = {k: getattr(s, k) for k in expected}
    assert got == pytest.approx(expected) if _numeric(expected) else got == expected


def _numeric(expected: dict) -> bool:
    return all(isinstance(v, float) for v in expected.values())


@pytest.mark.parametrize(
    ("gpu", "fraction"), [("h100-sxm", 0.830), ("h200", 0.903), ("a100-40gb", 0.823)]
)
def test_sglang_05_mem_fraction_formula(gpu, fraction):
    """0.5.23's (memory - reserved) / memory, against the values worked from its source."""
    s = resolve("sglang@0.5.23", load_hardware(gpu), load_model("llama-3.1-8b"), 1)
    assert s.gpu_memory_utilization == pytest.approx(fraction, abs=0.002)


def test_every_release_resolves_on_every_gpu_kind():
    """show_engine works for every supported version: each rule set resolves, with a rule
    for every setting the engine shows."""
    model = load_model("llama-3.1-8b")
    kinds = ("h100-sxm", "a100-80gb", "l40s", "b200", "mi300x")
    # and the kinds issue 25 added: Hopper without "h100" in its name, 24 GB Ampere, Blackwell
    # Ultra (compute capability 10.3), CDNA 4
    for gpu in (*kinds, "h20", "a10g", "b300", "mi355x"):
        hw = load_hardware(gpu)
        for name, module in ENGINES.items():
            for release in module.releases(name):
                for entry in ("server", "offline"):
                    s = resolve(f"{name}@{release}", hw, model, 1, entry)
                    for record in s.records():
                        assert record["rule"], (name, release, record)


def test_between_releases_takes_the_earlier_rules_and_says_so():
    name, version, rule_set = parse_engine_spec("vllm@0.9.0.1")
    assert (name, version, rule_set) == ("vllm", "0.9.0.1", "0.9.0")
    s = resolve("vllm@0.16.0", load_hardware("h100-sxm"), load_model("llama-3.1-8b"), 1)
    assert s.rule_set == "0.15.0"
    assert "vllm 0.16.0 (rules of 0.15.0)" in s.rules["cudagraph_mode"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("vllm@0.3.3", "outside the known range 0.4.0 .. 0.33.0"),
        ("vllm@0.34.0", "outside the known range 0.4.0 .. 0.33.0: it is published, but no rules"),
        ("vllm@0.33.1", "vllm 0.33.1 is not a release vllm has published"),
        ("sglang@0.2.0", "outside the known range 0.3.0 .. 0.5.23"),
        ("tgi@2.0", "unknown engine 'tgi'"),
    ],
)
def test_unknown_versions_list_the_known_range(spec, message):
    with pytest.raises(UserError, match=message):
        parse_engine_spec(spec)


def test_user_overrides_by_the_engines_own_names():
    hw, model = load_hardware("h100-sxm"), load_model("llama-3.1-8b")
    s = resolve("sglang", hw, model, 1, overrides={"chunked_prefill_size": 4096})
    assert s.max_num_batched_tokens == 4096
    assert s.rules["max_num_batched_tokens"] == "user override (engine_args.chunked_prefill_size)"
    s = resolve("sglang", hw, model, 1, overrides={"disable_radix_cache": True})
    assert s.enable_prefix_caching is False
    assert s.as_mapping()["disable_radix_cache"]["value"] is True
    s = resolve("trtllm", hw, model, 1, overrides={"capacity_scheduler_policy": "MAX_UTILIZATION"})
    assert s.capacity_policy == "MAX_UTILIZATION"
    with pytest.raises(UserError, match="not a trtllm argument"):
        resolve("trtllm", hw, model, 1, overrides={"chunked_prefill_size": 4096})
    with pytest.raises(UserError, match="preemption_mode=swap exists only in vLLM's V0"):
        resolve("vllm@0.33.0", hw, model, 1, overrides={"preemption_mode": "swap"})


def test_settings_use_the_engines_argument_names():
    hw, model = load_hardware("h100-sxm"), load_model("llama-3.1-8b")
    names = set(resolve("vllm", hw, model, 1).as_mapping())
    assert {"max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill"} <= names
    assert {"enable_prefix_caching", "gpu_memory_utilization", "block_size"} <= names
    assert {"cudagraph_mode", "attention_backend", "scheduling_policy"} <= names
    sglang = set(resolve("sglang", hw, model, 1).as_mapping())
    assert {"chunked_prefill_size", "max_running_requests", "mem_fraction_static"} <= sglang
    assert {"schedule_policy", "page_size", "disable_radix_cache"} <= sglang
    trt = set(resolve("trtllm", hw, model, 1).as_mapping())
    assert {"max_batch_size", "max_num_tokens", "capacity_scheduler_policy"} <= trt
    assert {"free_gpu_memory_fraction", "tokens_per_block"} <= trt
    for entry in resolve("vllm", hw, model, 1).as_mapping().values():
        assert set(entry) == {"value", "category", "rule"}
        assert entry["category"] in ("defaults", "kernels", "scheduling", "memory")
