"""The rate vLLM's Marlin MoE sustains where a release runs MXFP4 experts on it (issue 43:
GPUStack's gpt-oss runs, vLLM 0.10.2-0.11.0 on A100 and H100, priced 2x too fast). Which kernel
a release runs on which GPU is an engine fact: sim/engines/mxfp4.py.

**Marlin's rate.** AIConfigurator's vLLM 0.24 MoE tables time vLLM's Marlin MXFP4 experts
(kernel_source vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu, hidden
3,584, intermediate 3,072, 896 experts, top-16, balanced routing; ai-dynamo/aiconfigurator
perf_data/{h100_sxm,h200_sxm}/moe/vllm/0.24.0/moe_perf.parquet, ../shared/data/aiconfigurator)
beside the OpenAI Triton kernel at gpt-oss's shapes. At TP1 Marlin levels off at 190-232 TFLOP/s
on both GPUs from about 30 tokens per expert on (H100: 192 at 37, 214 at 55, 230 at 293; H200:
187, 220, 232), where the Triton kernel reaches 527-563 on the H100 at gpt-oss-20b's shapes (32
experts, top-4, 2,048-16,384 tokens). vLLM's fused Marlin MoE never runs faster than its best
measured rate, so its experts cost at least their FLOPs over that rate (marlin_floor_s): the
measured MoE table of the GPU still prices what is slower (small batches, weight reads).
- H100 SXM and H200: their own best rate at TP1 (230 and 232 TFLOP/s, 16,384 tokens).
- A100 (80 and 40 GB): no Marlin MoE table is public (AIConfigurator's A100 vLLM 0.14 table
  times BF16 experts alone). Marlin issues the same mma.sync instructions on both dies, and a
  Hopper SM runs them at least as fast per clock as an Ampere SM, so the H100's rate scaled by
  SM count x boost clock (108 x 1.41 GHz against 132 x 1.98 GHz, NVIDIA's A100 and H100 SXM
  datasheets) is an upper bound on the A100's: 134 TFLOP/s, 43% of its dense BF16 peak.
- Other GPUs: no floor (no measured or bounded rate).
"""

from __future__ import annotations

import numpy as np

from sim.engines.mxfp4 import mxfp4_moe_kernel
from sim.specs.hardware import Hardware, load_hardware

MARLIN_MOE_FLOPS_PER_S = {"h100-sxm": 2.30e14, "h200": 2.32e14}  # measured best, TP1
# Boost clocks (datasheets) of the GPU whose rate is scaled and of those it bounds; SM counts
# are the catalogue's
BOOST_CLOCK_HZ = {"h100-sxm": 1.98e9, "a100-80gb": 1.41e9, "a100-40gb": 1.41e9}


def marlin_rate(hardware: Hardware) -> float | None:
    """FLOP/s vLLM's Marlin MoE sustains at best on `hardware` (None: not known)."""
    if hardware.name in MARLIN_MOE_FLOPS_PER_S:
        return MARLIN_MOE_FLOPS_PER_S[hardware.name]
    if hardware.name in BOOST_CLOCK_HZ:  # bounded by the H100's rate per SM and cycle
        h100 = load_hardware("h100-sxm")
        per_sm_cycle = MARLIN_MOE_FLOPS_PER_S["h100-sxm"] / (
            h100.sm_count * BOOST_CLOCK_HZ["h100-sxm"]
        )
        return per_sm_cycle * hardware.sm_count * BOOST_CLOCK_HZ[hardware.name]
    return None


def runs_marlin(engine: str, release: str, hardware: Hardware, expert_dtype: str) -> bool:
    """Whether the release runs a model's routed experts in MXFP4 on Marlin on `hardware`
    with a known rate (the experts' weight format is fp4)."""
    if expert_dtype != "fp4" or marlin_rate(hardware) is None:
        return False
    return mxfp4_moe_kernel(engine, release, hardware)[0] == "marlin"


def marlin_floor_s(hardware: Hardware, tokens, hidden, inter, topk) -> np.ndarray:
    """Least seconds of one layer's Marlin MoE on one GPU: `tokens` routed to `topk` experts of
    `hidden` x `inter` (this GPU's slice), the gate/up (2 x inter outputs) and down GEMMs, at
    the GPU's best measured Marlin rate."""
    rate = marlin_rate(hardware)
    if rate is None:
        raise ValueError(f"no Marlin MoE rate for {hardware.name}")
    flops = 2.0 * np.asarray(tokens, dtype=np.float64) * topk * 3.0 * hidden * inter
    return flops / rate
