"""MoE kernels priced from the tables that measured them: the experts a table's routing
touched (sim/cost/routing.py, AIConfigurator's power law, what the fit divides by and a served
batch is priced at) and a release's table that never measured an expert shape (the H200's
vLLM 0.18 MXFP4 MoE, TP1 only) giving way to one that did (KernelPricer._measured_experts)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.cost.prior import CostProfile
from sim.cost.profiles import choose_pricer
from sim.cost.roofline import moe_shape
from sim.cost.routing import experts_touched, power_law_touched, routed_experts
from sim.specs.hardware import load_hardware

PRIOR = CostProfile.load("prior")
GPT_OSS = dict(hidden=2880, inter=2880, topk=4, experts=128)  # gpt-oss-120b's experts


def collector_touched(tokens: int, experts: int, topk: int, rng, alpha=1.2) -> int:
    """One routing drawn as AIConfigurator's collectors draw it, step by step
    (collector/helper.py _generate_power_law_distribution, ai-dynamo/aiconfigurator@095f58a):
    loads from a power law, scaled to the picks and rounded, capped at one pick per token, the
    remainder handed one pick at a time to the least loaded expert."""
    picks = tokens * topk
    lo, hi = (1.0, 0.8 * tokens) if picks > experts else (0.01, 2.0)
    a = 1 - alpha
    load = ((hi**a - lo**a) * rng.random(experts) + lo**a) ** (1 / a)
    counts = np.minimum(np.round(load / load.sum() * picks), tokens).astype(int)
    while counts.sum() < picks:
        open_ = np.where(counts < tokens, counts, np.iinfo(int).max)
        counts[int(np.argmin(open_))] += 1
    while counts.sum() > picks:
        counts[int(np.argmax(counts))] -= 1
    return int((counts > 0).sum())


@pytest.mark.parametrize("experts,topk", [(128, 4), (128, 8), (256, 8), (64, 6)])
def test_the_power_law_touches_what_the_collectors_routing_touches(experts, topk):
    rng = np.random.default_rng(7)
    tokens = np.array([1, 3, 8, 16, 32, 100, 512, 4096])
    ours = power_law_touched(tokens, topk, experts)
    theirs = np.array(
        [np.mean([collector_touched(int(t), experts, topk, rng) for _ in range(200)])
         for t in tokens]
    )  # fmt: skip
    assert np.allclose(ours, theirs, rtol=0.05, atol=0.5)
    assert (ours <= np.minimum(experts, tokens * topk) + 1e-9).all()
    assert (ours >= topk - 1e-9).all()


def test_decode_batches_touch_fewer_experts_than_independent_picks():
    """A hot expert takes many of a batch's picks, so 16-512 tokens of gpt-oss read fewer
    experts than independent picks would (the tables: 32 tokens, 0.39 ms power law against
    0.72 ms balanced on the H200's vLLM 0.18 MXFP4 table); one token reads its top-k either way."""
    tokens = np.array([16, 32, 64, 128, 512])
    assert (power_law_touched(tokens, 4, 128) < experts_touched(tokens, 4, 128)).all()
    assert float(power_law_touched(1, 4, 128)) == pytest.approx(4)


def test_an_expert_parallel_rank_is_priced_by_independent_picks():
    tokens = np.array([4.0, 32.0])
    assert np.allclose(routed_experts(tokens, 8, 32, 8), experts_touched(tokens, 8, 32, 8))
    hw = load_hardware("h100-sxm")
    _, served, _ = moe_shape(hw, 32, GPT_OSS["hidden"], GPT_OSS["inter"], 4, 128, "fp4")
    touched = float(power_law_touched(32, 4, 128))
    expert = 3 * GPT_OSS["hidden"] * GPT_OSS["inter"] * 0.53125
    assert served == pytest.approx(touched * expert + 32 * GPT_OSS["hidden"] * 4)


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
