"""The memory plan and the settings the real engine refuses at start-up."""

from __future__ import annotations

import pytest

from sim.engines.resolve import resolve
from sim.errors import UserError
from sim.kv.memory import plan_memory
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model
from tests.conftest import shared_data

GIB = 2**30


def plan(model="llama-3.1-8b", hardware="h100-sxm", tp=1, **args):
    hw, m = load_hardware(hardware), load_model(model)
    return plan_memory(hw, m, resolve("vllm", hw, m, tp, overrides=args), tp, "auto")


def test_kv_pool_is_what_remains():
    p = plan()
    remaining = (
        int(p.total_bytes * p.gpu_memory_utilization)
        - p.weight_bytes
        - p.activation_bytes
        - p.cudagraph_bytes
        - p.non_torch_bytes
    )
    assert p.kv_cache_bytes == remaining
    assert p.num_blocks == remaining // (131_072 * 16)
    assert p.weight_bytes == 2 * 8_030_261_248


def test_tensor_parallel_splits_weights_and_kv_heads():
    one, four = plan("llama-3.1-70b", "h100-sxm", 4), plan("llama-3.1-70b", "h100-sxm", 8)
    assert one.kv_bytes_per_token == 327_680 // 4 and four.kv_bytes_per_token == 327_680 // 8
    assert four.weight_bytes * 2 == pytest.approx(one.weight_bytes, rel=1e-6)


def test_model_that_does_not_fit():
    with pytest.raises(UserError, match=r"raise parallel\.tp"):
        plan("llama-3.1-70b", "h100-sxm", 1)


def test_max_model_len_beyond_the_pool():
    with pytest.raises(UserError, match="longest that fits"):
        plan("llama-3.1-8b", "rtx-4090", 1, gpu_memory_utilization=0.9)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ({"max_num_batched_tokens": 8, "max_num_seqs": 4}, "below block_size"),
        ({"max_num_batched_tokens": 100}, "must be >= max_num_seqs"),
        ({"gpu_memory_utilization": 1.5}, r"\(0, 1\]"),
        ({"block_size": 24}, "block_size=24"),
        ({"max_model_len": 10**7}, "max_position_embeddings"),
        ({"enable_chunked_prefill": False, "max_num_batched_tokens": 4096}, "chunked prefill off"),
        ({"max_num_seqs": "many"}, "expected int"),
        ({"num_gpu_blocks_override": -1}, "at least 2 blocks"),
        ({"num_gpu_blocks_override": 100}, "the pool holds"),
    ],
)
def test_impossible_settings(args, match):
    with pytest.raises(UserError, match=match):
        plan(**args)


def test_measured_rtx4090_block_count_is_close():
    """vLLM 0.19 on an RTX 4090 (LLMServingSim's run) allocated 2,588 blocks for Llama-3.1-8B
    at utilisation 0.9, budget 2,048, max_num_seqs 256, no graph-memory subtraction. The prior
    memory plan should land within 10% of that."""
    import json

    meta = json.loads(
        shared_data("LLMServingSim/bench_examples/RTX4090/Llama-3.1-8B/vllm/meta.json").read_text()
    )
    p = plan(
        "llama-3.1-8b",
        "rtx-4090",
        1,
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=2048,
        max_num_seqs=256,
        max_model_len=32768,
        cudagraph_memory_bytes=0,
    )
    assert p.num_blocks == pytest.approx(meta["kv_cache"]["num_gpu_blocks"], rel=0.10)


def test_num_gpu_blocks_override_sets_the_pool():
    """vLLM's --num-gpu-blocks-override replaces the profiled block count (null block included)."""
    p = plan(num_gpu_blocks_override=2588, max_model_len=32768)
    assert p.num_blocks == 2588 and p.kv_capacity_tokens == 2587 * 16


def test_experts_over_every_data_parallel_rank_free_memory():
    hw, m = load_hardware("h200"), load_model("qwen3-30b-a3b")
    s = resolve("vllm@0.19.0", hw, m, 1)
    alone = plan_memory(hw, m, s, 1, "auto")
    spread = plan_memory(hw, m, s, 1, "auto", ep=2)
    experts = m.expert_params * 2  # bf16
    assert alone.weight_bytes - spread.weight_bytes == pytest.approx(experts / 2, rel=1e-6)
    assert spread.num_blocks > alone.num_blocks
