"""FP8 GEMMs by the kernel each release runs (issue 43, item 1; sim/cost/fp8.py): per-tensor
W8A8 from a collection that timed CUTLASS scaled_mm, block FP8 at most as the collection that
timed it as GPU time (vLLM 0.19's), weight-only FP8 (Marlin) on GPUs without FP8 tensor cores at
its own roofline."""

from __future__ import annotations

import numpy as np
import pytest

from sim.cost.fp8 import BLOCK_REFERENCE, REFERENCE
from sim.cost.prior import PROFILE_DIR, CostProfile
from sim.cost.profiles import GpuProfile, choose_pricer
from sim.cost.roofline import gemm_shape, moe_shape
from sim.cost.step import CostModel
from sim.engines.resolve import resolve
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model

PRIOR = CostProfile.load("prior")
DECODE_M = np.array([1, 4, 16, 64, 128, 256])
# decode-step shapes of Llama-3.1-70B, Qwen3-32B and DeepSeek-V3 shards at TP 1-8 (n, k)
SHAPES = ((10240, 8192), (1280, 8192), (8192, 1024), (7168, 8192), (8192, 3584),
          (10240, 5120), (5120, 8192), (2048, 7168), (7168, 2048), (16384, 5120))  # fmt: skip


def pricer(gpu: str, family: str):
    return choose_pricer(load_hardware(gpu), "auto", PRIOR, family=family).pricer


def vllm_families(gpu: str) -> list[str]:
    profile = GpuProfile.load(PROFILE_DIR / f"{gpu}.json")
    return sorted(f for f in [*profile.families, *(profile.aliases or {})] if f.startswith("vllm@"))


def grid():
    m = np.repeat(DECODE_M, len(SHAPES))
    n, k = (np.tile([s[i] for s in SHAPES], len(DECODE_M)) for i in (0, 1))
    return m, n, k


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200"])
def test_block_fp8_at_decode_shapes_is_the_collection_that_timed_gpu_time(gpu):
    """Every vLLM release's block-FP8 GEMM: at most as vLLM 0.19's collection prices the shape,
    never under its roofline; the 0.18/0.22/0.24 tables priced the 8192 x 1024 shard at m = 4
    near 60 us (host gaps), the 0.19 table 13.2 us on the H200."""
    hw = load_hardware(gpu)
    m, n, k = grid()
    flops, nbytes, feats = gemm_shape(hw, m, n, k, "fp8_block")
    peak = hw.peak_flops_per_s("fp8")
    roof = np.maximum(flops / peak, nbytes / hw.hbm_bytes_per_s)
    ref = pricer(gpu, BLOCK_REFERENCE["vllm"])
    ref_s = ref.gemm_s(m, n, k, "fp8_block")
    for family in vllm_families(gpu):
        pr = pricer(gpu, family)
        block = pr.gemm_s(m, n, k, "fp8_block")
        assert (block <= ref_s * (1 + 1e-12)).all(), family
        assert (block >= roof * (1 - 1e-12)).all(), family
        own = pr._price(pr.surfaces["gemm/fp8_block"], flops, nbytes, feats, peak, 1.0)
        assert block == pytest.approx(np.minimum(own, ref_s), rel=1e-12), family
        small = float(pr.gemm_s(4, 8192, 1024, "fp8_block")[0])
        assert small < 20e-6, (family, small)


def test_block_reference_is_vllms_alone():
    """SGLang's and TensorRT-LLM's block tables price their own releases untouched."""
    for family in ("sglang@0.5.9", "trtllm@1.3.0rc10", "vllm@0.19.0"):
        assert f"{REFERENCE}/gemm/fp8_block" not in pricer("h200", family).surfaces, family
    assert f"{REFERENCE}/gemm/fp8_block" in pricer("h200", "vllm@0.24.0").surfaces


def test_block_reference_leaves_the_tables_where_they_are_faster():
    """At a compute-bound shape the 0.24 H200 block table (DeepGEMM, 1,196 TF/s measured) is
    faster than the 0.19 one (944 TF/s): the price is 0.24's own surface."""
    pr = pricer("h200", "vllm@0.24.0")
    hw = pr.hardware
    m, n, k = 8192, 8192, 8192
    flops, nbytes, feats = gemm_shape(hw, m, n, k, "fp8_block")
    table = pr._price(pr.surfaces["gemm/fp8_block"], flops, nbytes, feats,
                      hw.peak_flops_per_s("fp8"), 1.0)  # fmt: skip
    price = pr.gemm_s(m, n, k, "fp8_block")
    assert price == pytest.approx(table, rel=1e-12)
    assert float(price[0]) < float(pricer("h200", "vllm@0.19.0").gemm_s(m, n, k, "fp8_block")[0])


@pytest.mark.parametrize("gpu", ["a100-80gb", "a100-40gb"])
def test_weight_only_fp8_on_ampere_reads_8_bit_weights_at_the_bf16_efficiency(gpu):
    """No FP8 tensor cores: Marlin's W8A16 GEMM, its roofline with 16-bit activations at the
    BF16 rate and the measured BF16 GEMM's efficiency (the prior's where none is measured)."""
    hw = load_hardware(gpu)
    choice = choose_pricer(hw, "auto", PRIOR, "vllm", "0.11.0")
    pr = choice.pricer
    m, n, k = grid()
    flops, nbytes, _ = gemm_shape(hw, m, n, k, "fp8")
    assert nbytes == pytest.approx(n * k + 2 * m * k + 2 * m * n)  # 16-bit activations
    fp8, bf16 = pr.gemm_s(m, n, k, "fp8"), pr.gemm_s(m, n, k, "bf16")
    roof = np.maximum(flops / hw.peak_flops_per_s("bf16"), nbytes / hw.hbm_bytes_per_s)
    assert (fp8 >= roof * (1 - 1e-12)).all() and (fp8 <= bf16).all()
    memory_bound = m <= 16
    ratio = fp8[memory_bound] / bf16[memory_bound]
    assert (ratio > 0.45).all() and (ratio < 0.6).all()
    if choice.calibrated:
        assert pr.used["gemm_fp8"] == "gemm/bf16's efficiency, W8A16 roofline"
    assert pr.gemm_s(8, 8192, 4096, "fp8_block") == pytest.approx(pr.gemm_s(8, 8192, 4096, "fp8"))


def linear_ms(engine: str, dtype: str, tp: int, model: str = "llama-3.1-70b") -> float:
    """The linear layers of the issue's decode step: 4 sequences at 1,500 tokens, on the H200."""
    hw, spec = load_hardware("h200"), load_model(model)
    settings = resolve(engine, hw, spec, tp, "server", {}, workers=tp)
    choice = choose_pricer(hw, "auto", PRIOR, settings.engine, settings.version)
    cost = CostModel(spec, settings, tp, dtype, choice.pricer, PRIOR)
    return cost.batch_cost([1] * 4, [1500] * 4, 4).linear_s * 1e3


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_the_issues_fp8_decode_step_is_priced_from_the_cutlass_collection(tp):
    """vLLM 0.11's per-tensor FP8 linear layers of Llama-3.1-70B: the 0.18 collection's CUTLASS
    timings (vllm@0.14.0's surface superseded), within 5% of the 0.19 family's, under BF16 at
    every TP (the issue: 20.5 / 14.7 / 8.5 / 6.3 ms, over BF16's 5.5 at TP8); block FP8 at most
    as the 0.19 collection prices it."""
    old, new = linear_ms("vllm@0.11.0", "fp8", tp), linear_ms("vllm@0.19.0", "fp8", tp)
    assert old == pytest.approx(new, rel=0.05)
    assert old < linear_ms("vllm@0.11.0", "bf16", tp)
    block = linear_ms("vllm@0.11.0", "fp8_block", tp)
    assert block <= linear_ms("vllm@0.19.0", "fp8_block", tp) * (1 + 1e-9)


def test_weight_only_fp8_experts_on_ampere_take_the_bf16_experts_efficiency():
    """Marlin's MoE on the A100 (Qwen3-235B-A22B-FP8 under vLLM 0.11): the measured BF16 expert
    kernel's efficiency at the 8-bit experts' roofline, half the BF16 time where weights
    dominate, never under that roofline."""
    pr = pricer("a100-80gb", "vllm@0.14.0")
    hw = pr.hardware
    args = (np.array([1.0, 8.0, 64.0]), 4096, 1536 / 4, 8, 128)
    fp8, bf16 = pr.moe_s(*args, "fp8_block"), pr.moe_s(*args, "bf16")
    flops, nbytes, feats = moe_shape(hw, *args, "fp8_block")
    roof = np.maximum(flops / hw.peak_flops_per_s("bf16"), nbytes / hw.hbm_bytes_per_s)
    expected = roof * np.exp(np.maximum(pr.surfaces["moe/bf16"](feats), 0.0))
    assert fp8 == pytest.approx(expected, rel=1e-12)
    assert (fp8 < 0.6 * bf16).all() and (fp8 >= roof).all()
    assert pr.used["moe_fp8_block"] == "moe/bf16's efficiency, W8A16 roofline"
