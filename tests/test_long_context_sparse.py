"""Sparse prefill as a long-context remedy (issue 41, item 10): vertical + slash patterns scale
full attention's prefill pairs (and the cached KV they read) by the pattern's density, the
GEMMs unchanged; the density comes from the model's pattern (or long_context.
sparse_prefill_density), the report shows TTFT dense against sparse, and says what it leaves
out and which way that leans."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from sim.config import SimConfig
from sim.cost.roofline import causal_pairs, prefill_shape
from sim.scenarios.long_context.arithmetic import prefill_flops
from sim.scenarios.long_context.caveats import unmodelled
from sim.scenarios.long_context.report import report_text
from sim.scenarios.long_context.runs import Context
from sim.scenarios.long_context.sparse_prefill import (
    DEFAULT_PATTERN,
    PATTERNS,
    pattern_density,
    pattern_for,
)
from sim.scenarios.long_context.study import run_long_context
from sim.scenarios.long_context.text import dur
from sim.specs.hardware import load_hardware
from sim.specs.model import Attention
from sim.specs.model_config import load_model

M = 1_048_576


def config(model: str, tp: int, prompt: int, hardware: str = "h100-sxm", **lc) -> SimConfig:
    lc = {"background": False, "architectures": [], "jobs": 1, "prompt_tokens": prompt} | lc
    return SimConfig.from_mapping(
        {"model": model, "hardware": hardware, "parallel": {"tp": tp}, "long_context": lc}
    )


# ---- the cost layer --------------------------------------------------------------------------
def test_a_sparse_chunk_keeps_each_querys_own_key_and_the_density_of_the_rest():
    hw = load_hardware("h100-sxm")
    q, c, heads, kv_heads, dim = 8192.0, 65536.0, 4, 1, 128
    args = (hw, q, c, 1, heads, kv_heads, dim, 0, False, 2.0)
    dense_flops, dense_bytes, _ = prefill_shape(*args)
    flops, nbytes, feats = prefill_shape(*args, 0.25)
    pairs = float(causal_pairs(q, c, 0, False)[()])
    assert dense_flops == 4 * heads * dim * pairs
    assert flops == 4 * heads * dim * (q + 0.25 * (pairs - q))
    activations = q * 2 * heads * dim * 2.0
    assert dense_bytes == activations + (c + q) * 2 * kv_heads * dim * 2.0
    assert nbytes == activations + (q + 0.25 * c) * 2 * kv_heads * dim * 2.0
    assert feats[0, 2] == np.log2((q + 0.25 * (pairs - q)) / q)  # keys per query, sparse


@pytest.mark.parametrize("cost_profile", ["auto", "prior"])
def test_the_chunk_pricer_and_the_array_pricer_agree_on_a_sparse_shape(cost_profile):
    cfg = replace(config("llama-3.1-8b", 8, M), cost_profile=cost_profile)
    cost = Context.of(cfg).cost_model(8)
    pricer = cost.pricer
    shape = replace(next(iter(cost.shapes.values())), density=0.05)
    for q, c in ((8192, 0), (8192, 500_000), (576, 1_048_000)):
        one = pricer.prefill_chunk_s(q, c, 1, shape)
        assert one == pytest.approx(float(np.ravel(pricer.prefill_s(q, c, 1, shape))[0]), rel=1e-12)
        assert one < pricer.prefill_chunk_s(q, c, 1, replace(shape, density=1.0))


def test_only_full_attention_layers_become_sparse_and_the_gemms_do_not_move():
    """Llama-4-Scout: 12 full-attention layers, 36 chunked-local ones (already bounded)."""
    ctx = Context.of(config("llama-4-scout-17b-16e", 8, M))
    dense, sparse = ctx.cost_model(8), ctx.cost_model(8)
    sparse.attention.set_prefill_density(0.02)
    kinds = {
        layer.attention: sparse.shapes[id(layer)].density for layer, _ in sparse.attention.layers
    }
    assert kinds == {Attention.FULL: 0.02, Attention.CHUNKED: 1.0}
    a, b = dense.cost([8192], [900_000], []), sparse.cost([8192], [900_000], [])
    assert b.attention_prefill_s < 0.2 * a.attention_prefill_s
    assert (b.linear_s, b.moe_s, b.allreduce_s) == (a.linear_s, a.moe_s, a.allreduce_s)
    assert dense.cost([], [], [900_000]).total_s == sparse.cost([], [], [900_000]).total_s


def test_density_one_is_the_dense_pricing_bit_for_bit():
    ctx = Context.of(config("llama-3.1-8b", 8, M))
    dense, same = ctx.cost_model(8), ctx.cost_model(8)
    same.attention.set_prefill_density(1.0)
    for q, c in ((8192, 0), (8192, 123_456), (1000, 1_000_000)):
        assert same.cost([q], [c], []).attention_prefill_s == (
            dense.cost([q], [c], []).attention_prefill_s
        )


# ---- the pattern and its density -------------------------------------------------------------
def test_the_llama_8b_density_at_a_million_tokens_by_hand():
    """MInference's Llama-3.1-8B-Instruct pattern keeps 512 vertical + 2,048 slash keys in all
    1,024 heads. A prompt of n = 1,048,576 tokens then keeps, per head,
        2,560 x 2,561 / 2 + (1,048,576 - 2,560) x 2,560 = 2,681,079,040 pairs
    of n(n+1)/2 = 549,756,338,176: beyond each query's own key, 2,680,030,464 of
    549,755,289,600."""
    p = pattern_for("llama-3.1-8b")
    assert p.budgets == ((2560, 1024),) and p.keys_per_query == 2560
    assert p.kept_pairs(M) == 2_681_079_040
    assert pattern_density(p, M) == 2_680_030_464 / 549_755_289_600


def test_every_pattern_covers_every_head_of_its_model():
    for name, pattern in PATTERNS.items():
        m = load_model(name)
        assert pattern.heads == m.num_layers * m.num_q_heads, name
    assert pattern_for("gemma-3-27b-it") is DEFAULT_PATTERN  # no searched pattern: the default
    assert DEFAULT_PATTERN.keys_per_query == 1000 + 6096


def test_short_prompts_stay_dense_and_longer_ones_grow_sparser():
    p = pattern_for("qwen2.5-7b-instruct-1m")
    assert pattern_density(p, 32_768) == 1.0  # vLLM's dual-chunk backend: dense up to here
    densities = [pattern_density(p, n) for n in (65_536, 262_144, M)]
    assert 1.0 > densities[0] > densities[1] > densities[2] > 0


# ---- the remedy in the study and the report --------------------------------------------------
def test_qwen_1m_sparse_prefill_in_the_report():
    study = run_long_context(config("qwen2.5-7b-instruct-1m", 4, 262_144))
    sp = study.remedies.sparse_prefill
    assert sp.density_from == "pattern" and "Qwen2.5_7B_Instruct_1M.json" in sp.pattern
    assert sp.density == pattern_density(pattern_for("qwen2.5-7b-instruct-1m"), 262_144)
    assert sp.full_layers == sp.layers == 28 and sp.dual_chunk
    assert sp.ttft_dense_s == study.prefill.total_s
    assert sp.ttft_sparse_s < sp.ttft_dense_s and sp.attention_sparse_s < sp.attention_dense_s
    # the GEMMs, communication and overhead do not move: TTFT falls by the attention saved
    saved = sp.attention_dense_s - sp.attention_sparse_s
    assert sp.ttft_dense_s - sp.ttft_sparse_s == pytest.approx(saved, rel=1e-9)
    report = report_text(study, {})
    assert f"TTFT {dur(sp.ttft_dense_s)} → {dur(sp.ttft_sparse_s)}" in report
    assert "## What is not modelled, and which way it leans" in report
    caveats = "\n".join(unmodelled(study))
    for feature in ("Sparse prefill's tiles", "pattern search", "Dual Chunk Attention",
                    "Prefill context parallelism"):  # fmt: skip
        assert feature in caveats
    # no priced pair beyond the GPU's peak: the pattern's attention FLOPs over its time
    _, attention = prefill_flops(load_model("qwen2.5-7b-instruct-1m"), 262_144)
    n, pairs = 262_144, 262_144 * 262_145 / 2
    kept = attention * (n + sp.density * (pairs - n)) / pairs
    hw = load_hardware("h100-sxm")
    assert kept / sp.attention_sparse_s <= hw.peak_flops_per_s("bf16") * study.at.num_gpus


def test_a_stated_density_overrides_the_pattern():
    study = run_long_context(config("llama-3.1-8b", 8, 131_072, sparse_prefill_density=0.1))
    sp = study.remedies.sparse_prefill
    assert sp.density == 0.1 and sp.density_from == "long_context.sparse_prefill_density"
    assert "a density of 10% set by long_context.sparse_prefill_density" in report_text(study, {})
    assert "Dual Chunk Attention" not in "\n".join(unmodelled(study))  # Llama has none


def test_models_without_full_attention_layers_are_unchanged():
    study = run_long_context(config("deepseek-v3", 8, 131_072, hardware="h200"))
    sp = study.remedies.sparse_prefill
    assert sp.full_layers == 0 and sp.ttft_sparse_s == sp.ttft_dense_s
    assert "no full-attention layer to make sparse here" in report_text(study, {})
