"""vLLM's MXFP4 experts on Marlin: which releases and GPUs run them there (sim/engines/mxfp4.py,
get_mxfp4_backend of the 0.11.0, 0.12.0 and 0.14.0 wheels), Marlin's rate as AIConfigurator's
vLLM 0.24 tables measure it (sim/cost/mxfp4.py), and the floor it puts under a step's MoE time.

The cost model applies the floor through `CostModel.marlin_moe` in sim/cost/step.py
(`_per_token_count`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sim.cost import mxfp4
from sim.cost.prior import CostProfile
from sim.cost.profiles import choose_pricer
from sim.cost.step import CostModel
from sim.engines.mxfp4 import mxfp4_moe_kernel
from sim.engines.resolve import resolve
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model
from tests.conftest import shared_data

PRIOR = CostProfile.load("prior")
A100, H100, H200 = (load_hardware(n) for n in ("a100-80gb", "h100-sxm", "h200"))
# gpt-oss-20b's experts on one GPU: hidden 2,880, intermediate 2,880, top-4
HIDDEN, INTER, TOPK = 2880, 2880, 4


def test_the_kernel_by_release_and_gpu():
    assert mxfp4_moe_kernel("vllm", "0.11.0", A100)[0] == "marlin"
    assert mxfp4_moe_kernel("vllm", "0.10.2", H100)[0] == "marlin"  # no triton_kernels
    assert mxfp4_moe_kernel("vllm", "0.11.0", H200)[0] == "marlin"
    assert mxfp4_moe_kernel("vllm", "0.12.0", H100)[0] == "triton"  # vendored from 0.12
    assert mxfp4_moe_kernel("vllm", "0.18.0", H200)[0] == "triton"
    assert mxfp4_moe_kernel("vllm", "0.19.0", A100)[0] == "marlin"  # SM90-SM100 only
    assert mxfp4_moe_kernel("vllm", "0.11.0", load_hardware("b200"))[0] == "other"
    assert mxfp4_moe_kernel("sglang", "0.5.4", H100)[0] == "other"
    assert mxfp4.runs_marlin("vllm", "0.11.0", H100, "fp4")
    assert not mxfp4.runs_marlin("vllm", "0.11.0", H100, "bf16")  # BF16 experts: fused MoE
    assert not mxfp4.runs_marlin("vllm", "0.11.0", load_hardware("l40s"), "fp4")  # no rate


def test_the_rates_are_marlins_best_measured_and_the_a100_bound():
    assert mxfp4.marlin_rate(H100) == pytest.approx(2.30e14)
    assert mxfp4.marlin_rate(H200) == pytest.approx(2.32e14)
    a100 = mxfp4.marlin_rate(A100)
    assert a100 == pytest.approx(2.30e14 * 108 * 1.41 / (132 * 1.98), rel=1e-9)
    assert 1.3e14 < a100 < A100.peak_flops_per_s("bf16")  # 134 TFLOP/s, 43% of the BF16 peak
    assert mxfp4.marlin_rate(load_hardware("l40s")) is None
    with pytest.raises(ValueError):
        mxfp4.marlin_floor_s(load_hardware("l40s"), 1, HIDDEN, INTER, TOPK)


@pytest.mark.parametrize("gpu", ["h100_sxm", "h200_sxm"])
def test_the_rate_is_the_measured_tables_best(gpu):
    table = pd.read_parquet(
        shared_data(f"aiconfigurator/perf_data/{gpu}/moe/vllm/0.24.0/moe_perf.parquet")
    )
    rows = table[
        table["kernel_source"].str.contains("mxfp4moe_marlin")
        & (table["distribution"] == "balanced")
        & (table["moe_tp_size"] == 1)
        & (table["moe_ep_size"] == 1)
    ]
    flops = 2.0 * rows["num_tokens"] * rows["topk"] * 3 * rows["hidden_size"] * rows["inter_size"]
    best = float((flops / (rows["latency"] * 1e-3)).max())
    hardware = H100 if gpu == "h100_sxm" else H200
    assert mxfp4.marlin_rate(hardware) == pytest.approx(best, rel=0.01)


def test_the_floor_is_the_flops_at_marlins_rate_and_above_the_roofline():
    tokens = np.array([1.0, 64.0, 2048.0, 8192.0])
    floor = mxfp4.marlin_floor_s(H100, tokens, HIDDEN, INTER, TOPK)
    flops = 2 * tokens * TOPK * 3 * HIDDEN * INTER
    np.testing.assert_allclose(floor, flops / 2.30e14)
    assert floor[3] == pytest.approx(7.09e-3, rel=1e-3)  # one layer of an 8,192-token step
    assert np.all(floor > flops / H100.peak_flops_per_s("bf16"))
    a100 = mxfp4.marlin_floor_s(A100, tokens, HIDDEN, INTER, TOPK)
    assert np.all(a100 > floor)


def cost_model(release: str, gpu: str) -> CostModel:
    hardware, model = load_hardware(gpu), load_model("gpt-oss-20b")
    settings = resolve(f"vllm@{release}", hardware, model, 1, "server", {})
    pricer = choose_pricer(hardware, "auto", PRIOR, "vllm", release).pricer
    return CostModel(model, settings, 1, "auto", pricer, PRIOR)


@pytest.mark.parametrize("gpu", ["a100-80gb", "h100-sxm"])
def test_a_prefill_steps_experts_cost_at_least_marlins_floor_under_0_11(gpu):
    cm = cost_model("0.11.0", gpu)
    assert cm.marlin_moe
    layers = load_model("gpt-oss-20b").num_layers
    floor = layers * float(mxfp4.marlin_floor_s(cm.pricer.hardware, 8192, HIDDEN, INTER, TOPK))
    assert cm.batch_cost([8192], [0], 1).moe_s >= floor * (1 - 1e-9)


def test_hopper_under_0_12_keeps_the_measured_triton_table():
    later, marlin = cost_model("0.12.0", "h100-sxm"), cost_model("0.11.0", "h100-sxm")
    assert not later.marlin_moe
    assert later.batch_cost([8192], [0], 1).moe_s < 0.6 * marlin.batch_cost([8192], [0], 1).moe_s
    # a decode of a few sequences reads weights: the measured table prices it either way
    small = ([1] * 4, [1000] * 4, 4)
    assert later.batch_cost(*small).moe_s == pytest.approx(marlin.batch_cost(*small).moe_s)
