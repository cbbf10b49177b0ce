"""Expert shapes a table timed are priced at its timings (sim/cost/measured_moe.py): at the
token counts it measured, between them by log-log interpolation, beyond them meeting the
surface, never under the roofline; other shapes keep the surface."""

from __future__ import annotations

import base64

import numpy as np
import pandas as pd
import pytest

from sim.calibrate.gpu import measured_moe
from sim.cost.measured_moe import MeasuredExperts, shape_key
from sim.cost.prior import CostProfile
from sim.cost.profiles import choose_pricer
from sim.specs.hardware import load_hardware
from tests.conftest import shared_data

PRIOR = CostProfile.load("prior")
H, INTER, K, E = 2880.0, 2880.0, 4.0, 128.0  # gpt-oss-120b's experts


def _rows(tokens, seconds, inter=INTER):
    n = len(tokens)
    return pd.DataFrame({"op": "moe", "dtype": "fp4", "hidden": [H] * n, "inter": [inter] * n,
                         "topk": [K] * n, "experts": [E] * n, "tokens": tokens,
                         "latency_s": seconds})  # fmt: skip


def test_curves_round_trip_through_the_profile_encoding():
    eighth_rows = _rows([1, 16], [5e-5, 9e-5], INTER / 8)
    rows = pd.concat([_rows([1, 4, 16], [1e-4, 2e-4, 4e-4]), eighth_rows])
    encoded = measured_moe(rows)
    assert encoded["tokens"] == [1.0, 4.0, 16.0]
    blob = encoded["curves"][shape_key("fp4", H, INTER / 8, K, E)]
    eighth = np.frombuffer(base64.b64decode(blob), dtype="<f4")
    assert np.isnan(eighth[1]) and eighth[2] == pytest.approx(9e-5)
    timed = MeasuredExperts([encoded])
    grid, y = timed.curve(shape_key("fp4", H, INTER, K, E))
    np.testing.assert_allclose(np.exp(y), [1e-4, 2e-4, 4e-4], rtol=1e-6)
    np.testing.assert_allclose(grid, [0, 2, 4])
    assert timed.curve(shape_key("bf16", H, INTER, K, E)) is None


def test_between_beyond_and_under_the_roofline():
    timed = MeasuredExperts([measured_moe(_rows([4, 16, 64], [2e-4, 4e-4, 8e-4]))])

    def surface_at(t, *shape):
        return 1e-5 * np.asarray(t, dtype=np.float64)  # any smooth stand-in

    tokens = np.array([4.0, 8.0, 64.0, 128.0, 2.0])
    priced = surface_at(tokens)
    roof = np.array([0.0, 0.0, 0.0, 0.0, 3e-4])
    out, hit = timed.apply(priced, roof, tokens, (H, INTER, K, E), "fp4", surface_at)
    assert hit
    np.testing.assert_allclose(out[:3], [2e-4, 2e-4 * np.sqrt(2), 8e-4], rtol=1e-6)
    assert out[3] == pytest.approx(priced[3] * 8e-4 / surface_at(64.0))  # meets the last timing
    assert out[4] == pytest.approx(3e-4)  # never under the roofline
    other, hit = timed.apply(priced, roof, tokens, (H, INTER / 2, K, E), "fp4", surface_at)
    assert not hit and np.array_equal(other, priced)


@pytest.mark.parametrize("tp", [1, 8])
def test_a_served_gpt_oss_step_prices_its_experts_at_the_h100_table(tp):
    """vLLM 0.24's H100 collection timed gpt-oss-120b's MXFP4 experts at TP1-8: a step's experts
    cost what it measured (float32 storage), where the surface was 15-35% over at TP4-8."""
    table = pd.read_parquet(
        shared_data("aiconfigurator/perf_data/h100_sxm/moe/vllm/0.24.0/moe_perf.parquet")
    )
    rows = table[(table["hidden_size"] == 2880) & (table["num_experts"] == 128)
                 & (table["moe_tp_size"] == tp) & (table["moe_ep_size"] == 1)
                 & (table["distribution"] == "power_law_1.2")]  # fmt: skip
    rows = rows.groupby("num_tokens")["latency"].median()
    pricer = choose_pricer(load_hardware("h100-sxm"), "auto", PRIOR, "vllm", "0.24.0").pricer
    tokens = rows.index.to_numpy(dtype=np.float64)
    priced = pricer.moe_s(tokens, H, INTER / tp, K, E, "fp4")
    measured = rows.to_numpy() * 1e-3
    assert (priced >= measured * (1 - 1e-5)).all()  # raised only to the roofline
    assert np.isclose(priced, measured, rtol=1e-5).mean() > 0.9
    assert "moe_measured" in pricer.used


def _h200_block_fp8(version, tp, distribution="power_law_1.2"):
    """Qwen3-235B-A22B-FP8's experts (hidden 4096, 1,536 wide, top-8 of 128) at TP `tp` in the
    H200 vLLM collection `version`: median milliseconds by token count."""
    table = pd.read_parquet(
        shared_data(f"aiconfigurator/perf_data/h200_sxm/moe/vllm/{version}/moe_perf.parquet")
    )
    rows = table[(table["moe_dtype"] == "fp8_block") & (table["hidden_size"] == 4096)
                 & (table["inter_size"] == 1536) & (table["num_experts"] == 128)
                 & (table["moe_tp_size"] == tp) & (table["moe_ep_size"] == 1)
                 & (table["distribution"] == distribution)]  # fmt: skip
    return rows.groupby("num_tokens")["latency"].median()


@pytest.mark.parametrize("tp", [2, 4])
def test_vllm_0_12_block_fp8_decode_experts_are_the_triton_kernel_tables(tp):
    """vLLM 0.12.0 decodes Qwen3-235B-A22B-FP8 on the H200 with the Triton fused_moe kernel and
    the tuned configs its 0.14 collection ran (sim/cost/measured_moe.py): a step's experts cost
    that table's power-law timings, and the 0.19 and 0.24 collections of the same kernel agree
    within 8% at every token count; the balanced rows of one token per expert take 1.6x the
    power-law ones at 16 tokens, the kernel reading only the experts a batch routes to."""
    pricer = choose_pricer(load_hardware("h200"), "auto", PRIOR, "vllm", "0.12.0").pricer
    reference = _h200_block_fp8("0.14.0", tp)
    tokens = reference.index.to_numpy(dtype=np.float64)
    priced = pricer.moe_s(tokens, 4096.0, 1536.0 / tp, 8.0, 128.0, "fp8_block")
    np.testing.assert_allclose(priced, reference.to_numpy() * 1e-3, rtol=1e-5)
    assert "moe_measured" in pricer.used
    for later in ("0.19.0", "0.24.0"):
        ratio = _h200_block_fp8(later, tp).reindex(reference.index) / reference
        assert ratio.notna().all() and ratio.between(0.92, 1.08).all(), (later, ratio.describe())
    balanced = _h200_block_fp8("0.14.0", tp, "balanced")
    assert balanced[16] > 1.6 * reference[16]
