"""Elementwise kernels on the H200, from the H100 SXM's measured ones (the same die): a small
kernel's latency floor is the die's, its bytes move at the GPU's own bandwidth
(sim/cost/kernels.py twin_moved_s, sim/cost/profiles.py _borrow_elementwise)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sim.cost.kernels import twin_moved_s
from sim.cost.prior import CostProfile
from sim.cost.profiles import choose_pricer
from sim.specs.hardware import load_hardware
from tests.conftest import shared_data

PRIOR = CostProfile.load("prior")
KINDS = ("norm", "act", "rope", "add", "embedding")


def pricer(gpu: str, version: str = "0.18.0"):
    return choose_pricer(load_hardware(gpu), "auto", PRIOR, "vllm", version)


@pytest.mark.parametrize("kind", KINDS)
def test_a_decode_steps_small_kernels_cost_the_same_on_both_hoppers(kind):
    """Under 1 MB a kernel's time is its floor: the H200 within 5% of the H100 (the issue's
    70x apart), never under its own roofline; at 1 GB its bytes dominate and the H200 is
    faster by up to the bandwidth ratio, never by more."""
    h100, h200 = pricer("h100-sxm").pricer, pricer("h200").pricer
    small = np.array([2.0**12, 2.0**16, 2.0**19])
    a, b = h100.elementwise_s(small, kind), h200.elementwise_s(small, kind)
    assert b == pytest.approx(a, rel=0.05)
    assert (b >= small / h200.hardware.hbm_bytes_per_s).all()
    big = np.array([2.0**30])
    a, b = h100.elementwise_s(big, kind), h200.elementwise_s(big, kind)
    ratio = h200.hardware.hbm_bytes_per_s / h100.hardware.hbm_bytes_per_s
    assert a / ratio * (1 - 1e-9) <= b < a
    assert h200.used["elementwise"].endswith("of the twin GPU")


def test_the_source_names_the_twin_and_another_die_borrows_nothing():
    """The H200's pricing source says where its elementwise kernels come from; the H20 names
    the H100 for its collectives but is another die (78 SMs): it keeps the prior."""
    assert "elementwise kernels (act, add, embedding, norm, rope) measured on h100-sxm" in (
        pricer("h200").source
    )
    h20 = pricer("h20")
    assert "elementwise" not in h20.source and not h20.pricer.twin_elementwise
    assert not pricer("h100-sxm").pricer.twin_elementwise  # it measured its own


def test_latency_plus_bytes_moves_the_h100s_quantize_kernel_onto_the_h200():
    """AIConfigurator times vLLM's static_scaled_fp8_quant (2 bytes read, 1 written per
    element) at the same 1,628 shapes on both GPUs. The rule predicts the H200's from the
    H100's within a median |error| of 5% under 1 MB and above 67 MB and 15% between;
    scaling the H100's time by the bandwidth ratio (what a borrowed efficiency would do) is
    off by over 25% under 1 MB, and both GPUs' floors sit near 2 us."""
    tables = [
        pd.read_parquet(
            shared_data(
                f"aiconfigurator/perf_data/{gpu}/quantize/vllm/0.24.0/scale_matrix_perf.parquet"
            )
        )
        for gpu in ("h100_sxm", "h200_sxm")
    ]
    both = tables[0].merge(tables[1], on=["m", "k", "quant_dtype"], suffixes=("_a", "_b"))
    nbytes = (both["m"] * both["k"] * 3.0).to_numpy()
    t100, t200 = (both[f"latency_{s}"].to_numpy() * 1e-3 for s in ("a", "b"))
    bw100, bw200 = (load_hardware(g).hbm_bytes_per_s for g in ("h100-sxm", "h200"))
    predicted = twin_moved_s(t100, nbytes, bw100, bw200)
    moved = np.abs(predicted / t200 - 1)
    scaled = np.abs(t100 * bw100 / bw200 / t200 - 1)
    small, large = nbytes < 2**20, nbytes >= 2**26
    assert np.median(moved[small]) < 0.05 and np.median(moved[large]) < 0.05
    assert np.median(moved[~small & ~large]) < 0.15
    assert np.median(scaled[small]) > 0.25
    for t in (t100, t200):
        assert 1.5e-6 < np.median(t[small]) < 2.5e-6
