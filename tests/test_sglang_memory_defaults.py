"""SGLang's memory defaults by release (sim/engines/sglang_memory.py): each expected value is
worked by hand from the formula in that release's wheel (srt/server_args.py), with the MiB
nvidia-smi reports (H100-SXM 81559, H200 143771, RTX 4090 24081)."""

from __future__ import annotations

import pytest

from sim.engines.resolve import resolve
from sim.kv.memory import plan_memory
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model


def settings(spec: str, gpu: str, tp: int = 1, model: str = "llama-3.1-8b"):
    return resolve(spec, load_hardware(gpu), load_model(model), tp, "server", {})


@pytest.mark.parametrize(
    ("spec", "rule_set"),
    [
        ("sglang@0.4.6", "0.4.6"),
        ("sglang@0.4.7.post1", "0.4.7.post1"),
        ("sglang@0.4.8", "0.4.8"),
        ("sglang@0.5.1.post1", "0.5.1.post1"),
        ("sglang@0.5.2", "0.5.1.post1"),
        ("sglang@0.5.3.post1", "0.5.3"),
        ("sglang@0.5.6.post2", "0.5.6.post1"),
        ("sglang@0.5.8.post1", "0.5.8"),
        ("sglang@0.5.9", "0.5.8"),
        ("sglang@0.5.10", "0.5.10"),
    ],
)
def test_each_release_takes_the_rules_read_for_it(spec, rule_set):
    assert settings(spec, "h100-sxm").rule_set == rule_set


@pytest.mark.parametrize(
    ("spec", "gpu", "tp", "fraction"),
    [
        # 0.4.6 / 0.4.7: the table by TP up to 81,920 MiB; 0.4.7 above 96 GiB: the smaller of
        # 0.88 + 48 GiB x 0.12 / memory and (memory - 18 GiB) / memory, not rounded
        ("sglang@0.4.6", "h200", 1, round((143771 - 13 * 1024) / 143771, 3)),
        ("sglang@0.4.7", "h200", 1, (143771 - 18432) / 143771),
        ("sglang@0.4.7", "b200", 1, 0.79),
        ("sglang@0.4.7", "h100-sxm", 1, 0.88),
        ("sglang@0.4.7", "h100-sxm", 8, 0.81),
        # 0.4.8-0.5.2: (memory - (9.5 + TP / 2) GiB) / memory below 90 GiB, 12 GiB base below 160
        ("sglang@0.5.1.post1", "h100-sxm", 2, 0.868),  # 81559 - 10752 MiB
        ("sglang@0.5.1.post1", "h100-sxm", 8, 0.831),  # 81559 - 13824 MiB
        ("sglang@0.4.8", "h200", 1, 0.911),  # 143771 - 12800 MiB
        # 0.5.3 on: 512 + 1.5 x 8192 + 2 x graph bs + TP / 8 x 1024 MiB, at least 10 GiB
        ("sglang@0.5.8.post1", "h100-sxm", 1, 0.835),  # 512 + 12288 + 512 + 128 = 13440
        ("sglang@0.5.6.post2", "h200", 1, 0.907),  # 13440 MiB of 143771
        ("sglang@0.5.9", "h200", 8, 0.897),  # 512 + 12288 + 1024 + 1024 = 14848
        # below 35 GiB: chunk 2048 and graphs to 16 (0.5.3) or 24 (0.5.6): 3744 / 3760 MiB
        ("sglang@0.5.3", "rtx-4090", 1, 0.845),
        ("sglang@0.5.6", "rtx-4090", 1, 0.844),
    ],
)
def test_mem_fraction_static_is_the_releases_formula(spec, gpu, tp, fraction):
    s = settings(spec, gpu, tp)
    assert s.gpu_memory_utilization == fraction
    assert "srt/server_args.py" in s.rules["gpu_memory_utilization"]


@pytest.mark.parametrize(
    ("spec", "gpu", "tp", "chunk", "graph_max"),
    [
        ("sglang@0.5.1.post1", "h100-sxm", 2, 8192, 160),  # cuda_graph_runner.py's 1..160
        ("sglang@0.5.1.post1", "h200", 1, 8192, 256),  # 168..256 above 90 GiB
        ("sglang@0.5.1.post1", "rtx-4090", 4, 2048, 80),
        ("sglang@0.5.1.post1", "b200", 1, 16384, 512),  # 272..512 above 160,000 MiB
        ("sglang@0.5.3", "h100-sxm", 2, 8192, 256),
        ("sglang@0.5.6.post2", "h200", 4, 8192, 512),
        ("sglang@0.5.3", "rtx-4090", 1, 2048, 16),
        ("sglang@0.5.6", "rtx-4090", 1, 2048, 24),
        ("sglang@0.5.6", "rtx-4090", 4, 2048, 80),
        ("sglang@0.5.19", "rtx-4090", 1, 2048, 24),  # arg_groups/memory_hook.py, 0.5.19
        ("sglang@0.5.20", "rtx-4090", 1, 4096, 48),  # ... from 0.5.20: 4k, 48 if tp < 4
        ("sglang@0.5.22", "rtx-4090", 4, 4096, 160),
    ],
)
def test_chunk_and_graph_sizes_by_release_and_gpu(spec, gpu, tp, chunk, graph_max):
    s = settings(spec, gpu, tp)
    assert s.max_num_batched_tokens == chunk
    assert max(s.cudagraph_capture_sizes) == graph_max


def test_capture_lists_change_at_0_5_3():
    old = settings("sglang@0.5.2", "h200").cudagraph_capture_sizes
    new = settings("sglang@0.5.3", "h200").cudagraph_capture_sizes
    assert old[:6] == (1, 2, 4, 8, 16, 24) and 12 not in old
    assert new[:6] == (1, 2, 4, 8, 12, 16)
    assert old[-1] == new[-1] == 256


@pytest.mark.parametrize(
    ("spec", "steps", "offset"),
    [("sglang@0.5.2", 20, 0), ("sglang@0.5.3", 1, 0), ("sglang@0.5.6", 1, 1)],
)
def test_retraction_by_release(spec, steps, offset):
    """schedule_batch.py retract_decode: 20 steps' tokens until 0.5.2, one step from 0.5.3;
    the new ratio's denominator + 1 from 0.5.6."""
    s = settings(spec, "h100-sxm")
    assert (s.retract_decode_steps, s.retract_ratio_offset) == (steps, offset)


def test_the_fraction_moves_the_kv_pool():
    """0.5.8.post1 on one H100 leaves Qwen3-32B less KV than 0.4.7's 0.88 did: the pool is
    total x mem_fraction_static - weights - non-torch memory (sim/kv/memory.py)."""
    model, hw = load_model("qwen3-32b"), load_hardware("h100-sxm")
    old = settings("sglang@0.4.7", "h100-sxm", 1, "qwen3-32b")
    new = settings("sglang@0.5.8.post1", "h100-sxm", 1, "qwen3-32b")
    kv_old = plan_memory(hw, model, old, 1, "bf16").kv_cache_bytes
    kv_new = plan_memory(hw, model, new, 1, "bf16").kv_cache_bytes
    # 0.045 of 81559 MiB = 3670 MiB less for the pool
    assert kv_old - kv_new == pytest.approx((0.88 - 0.835) * 81559 * 2**20, rel=0.01)
    assert kv_new > 0


@pytest.mark.parametrize(
    ("spec", "gpu", "tp", "model", "fraction", "chunk", "graph_max"),
    [
        # 0.5.10: + 8 MiB per piecewise prefill graph (42 token counts up to 2048, 58 up to 8192)
        ("sglang@0.5.10", "rtx-4090", 1, "llama-3.1-8b", 0.83, 2048, 24),  # 4096 MiB reserved
        ("sglang@0.5.10", "h100-sxm", 1, "qwen3-32b", 0.83, 8192, 256),  # 13904 MiB
        # an MLA backend's prefill graphs: 1.5 GiB (512 + 12288 + 1024 + 1024 + 1536 MiB)
        ("sglang@0.5.10", "h200", 8, "deepseek-v3", 0.886, 8192, 512),
        # 0.5.23 (arg_groups/memory_hook.py): chunk 4096 and graphs to 48 / 160 below 35 GiB
        ("sglang@0.5.23", "rtx-4090", 4, "llama-3.1-8b", 0.672, 4096, 160),
    ],
)
def test_piecewise_graph_reserve_from_0_5_10(spec, gpu, tp, model, fraction, chunk, graph_max):
    s = settings(spec, gpu, tp, model)
    assert s.gpu_memory_utilization == fraction
    assert (s.max_num_batched_tokens, max(s.cudagraph_capture_sizes)) == (chunk, graph_max)
