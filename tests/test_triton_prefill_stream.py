"""vLLM's unified Triton attention (TRITON_ATTN, gpt-oss on an A100) priced no faster than the
keys and values its programs stream through the L2 cache (sim/cost/attention.py
triton_stream_s: one program per BLOCK_Q = 16 / (query heads per KV head) prompt tokens, each
reading its whole causal prefix, vLLM 0.11.0 attention/ops/triton_unified_attention.py)."""

from __future__ import annotations

import pytest

from sim.cost.attention import L2_BYTES_PER_S, AttentionCost, triton_stream_s
from sim.cost.kernels import AttentionShape
from sim.cost.prior import CostProfile
from sim.cost.profiles import choose_pricer
from sim.engines.resolve import resolve
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model

PRIOR = CostProfile.load("prior")
A100 = 7.219e12  # 5,120 bytes per clock at 1.41 GHz (PMC10448217, Table 3)
# gpt-oss's full-attention layer on one GPU: 64 query heads over 8 KV heads of 64
FULL = AttentionShape(64, 8, 64, 0, False, "bf16", "TRITON_ATTN")
WINDOWED = AttentionShape(64, 8, 64, 128, False, "bf16", "TRITON_ATTN")


def test_the_bytes_are_every_programs_prefix():
    assert L2_BYTES_PER_S["a100-80gb"] == A100
    # 2,048 new tokens after 30,000 cached: 1,024 programs (2 tokens each) per KV head, each
    # reading 30,000 + 1,025 keys on average, K and V of 64 bf16 values, 8 KV heads
    expected = 1024 * (30000 + 1025) * 8 * 64 * 2 * 2 / A100
    assert triton_stream_s(2048, 30000, FULL, A100) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(9.01e-3, rel=1e-3)
    # a sliding layer reads its window (128 + 1 keys) per program, whatever the context
    window = 1024 * 129 * 8 * 64 * 2 * 2 / A100
    assert triton_stream_s(2048, 30000, WINDOWED, A100) == pytest.approx(window, rel=1e-12)
    # more than 16 query heads per KV head: one token per program
    wide = AttentionShape(64, 2, 64, 0, False, "bf16", "TRITON_ATTN")
    assert triton_stream_s(10, 0, wide, A100) == pytest.approx(
        10 * (0 + 5.5) * 2 * 64 * 2 * 2 / A100, rel=1e-12
    )
    chunked = AttentionShape(64, 8, 64, 8192, True, "bf16", "TRITON_ATTN")
    assert triton_stream_s(2048, 30000, chunked, A100) == 0.0  # not bounded


def attention(gpu: str, release: str = "0.11.0") -> AttentionCost:
    hardware, model = load_hardware(gpu), load_model("gpt-oss-20b")
    settings = resolve(f"vllm@{release}", hardware, model, 1, "server", {})
    pricer = choose_pricer(hardware, "auto", PRIOR, "vllm", release).pricer
    layers = list(model.layer_groups.items())
    return AttentionCost(
        model, pricer, layers, 1, settings.kv_cache_dtype, settings.attention_backend
    )


def test_a_long_chunk_on_an_a100_costs_at_least_its_stream():
    cost = attention("a100-80gb")
    assert cost.l2_bytes_per_s == A100
    total = cost.prefill([2048], [30000])
    floor = sum(
        count * triton_stream_s(2048, 30000, cost.shapes[id(layer)], A100)
        for layer, count in cost.layers
    )
    assert total >= floor
    assert floor > 0.1  # 12 full layers at 9.0 ms each: above FlashAttention 2's table
    assert cost.prefill([2048], [30000]) == total  # remembered, the same bits


def test_hopper_runs_flashattention_and_keeps_its_table():
    cost = attention("h100-sxm")
    assert cost.l2_bytes_per_s is None  # FLASH_ATTN_FA3 on SM90: no Triton bound
    short = attention("a100-80gb")
    # a short prompt streams little: the measured table prices it as before
    shape = short.shapes[id(short.layers[0][0])]
    assert triton_stream_s(128, 0, shape, A100) < short.pricer.prefill_chunk_s(128, 0, 1, shape)
