"""MoE kernels priced from the tables that measured them: the experts a table's routing
touched (roofline.balanced_experts_touched, what the fit divides by) and a release's table
that never measured an expert shape (the H200's vLLM 0.18 MXFP4 MoE, TP1 only) giving way to
one that did (KernelPricer._measured_experts)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim.cost.prior import CostProfile
from sim.cost.profiles import choose_pricer
from sim.cost.roofline import balanced_experts_touched, experts_touched, moe_shape
from sim.specs.hardware import load_hardware

PRIOR = CostProfile.load("prior")
GPT_OSS = dict(hidden=2880, inter=2880, topk=4, experts=128)  # gpt-oss-120b's experts


def aic_balanced(tokens: int, experts: int, topk: int) -> int:
    """Distinct experts of AIConfigurator's balanced routing, pick by pick (its collectors'
    balanced_logits, ai-dynamo/aiconfigurator@095f58a collector/helper.py)."""
    stride = math.ceil(experts / topk)
    picks = set()
    for t in range(tokens):
        for i in range(topk):
            at = t + i * stride if tokens >= stride else t * stride / tokens + i * stride
            picks.add(int(at % experts))
    return len(picks)


@pytest.mark.parametrize("experts,topk", [(128, 4), (128, 8), (256, 8), (64, 6), (512, 22)])
def test_balanced_routing_touches_every_expert_it_can(experts, topk):
    tokens = np.array([1, 2, 4, 8, 16, 32, 48, 64, 128, 512])
    ours = balanced_experts_touched(tokens, topk, experts)
    theirs = np.array([aic_balanced(int(t), experts, topk) for t in tokens])
    assert np.allclose(ours, theirs, rtol=0.03)
    assert (ours >= experts_touched(tokens, topk, experts) - 1e-9).all()  # never fewer


def test_a_served_batch_reads_the_experts_its_picks_touch_not_the_tables():
    """32 tokens of top-4 over 128 experts: the table's kernel read all 128, independent picks
    touch about 82; the fit divides by the first, a step is priced at the second."""
    hw = load_hardware("h100-sxm")
    args = (hw, 32, GPT_OSS["hidden"], GPT_OSS["inter"], 4, 128, "fp4")
    _, served, _ = moe_shape(*args)
    _, table, _ = moe_shape(*args, balanced=True)
    assert served / table == pytest.approx(82 / 128, rel=0.02)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_an_expert_shape_the_release_never_measured_is_priced_from_a_table_that_did(tp):
    """vLLM 0.18's H200 collection timed gpt-oss-120b's MXFP4 experts at TP1 only; at TP2-8
    the H200 prices them from the 0.24 table, which timed them there, as the H100 does (the
    two GPUs' tables within 15% of each other at every token count: the kernel's floor is
    the die's), instead of extrapolating the TP1 table to a quarter of any measured time."""
    tokens = np.array([1.0, 4, 16, 64])
    shape = (GPT_OSS["hidden"], GPT_OSS["inter"] / tp, 4, 128, "fp4")
    h200 = choose_pricer(load_hardware("h200"), "auto", PRIOR, "vllm", "0.18.0").pricer
    h100 = choose_pricer(load_hardware("h100-sxm"), "auto", PRIOR, "vllm", "0.18.0").pricer
    a, b = h100.moe_s(tokens, *shape), h200.moe_s(tokens, *shape)
    assert np.allclose(b, a, rtol=0.15)
    assert "moe_experts" in h200.used
    one = choose_pricer(load_hardware("h200"), "auto", PRIOR, "vllm", "0.18.0").pricer
    one.moe_s(tokens, GPT_OSS["hidden"], GPT_OSS["inter"], 4, 128, "fp4")
    assert "moe_experts" not in one.used  # TP1: its own release's table
