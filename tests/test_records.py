"""Run records: the (gap, count) ITL log gives the statistics of the expanded list of gaps."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.run.metrics import PERCENTILES
from sim.workload.records import ItlLog, merged, weighted_stats

gap_lists = st.lists(
    st.lists(st.sampled_from([0.004, 0.0125, 0.0125, 0.031, 0.25]), max_size=12), max_size=8
)


@settings(max_examples=80, deadline=None)
@given(steps=gap_lists, split=st.integers(0, 8))
def test_compressed_gaps_give_the_statistics_of_the_expanded_list(steps, split):
    a, b = ItlLog(), ItlLog()  # two replicas' logs, merged at the end
    for k, gaps in enumerate(steps):
        (a if k < split else b).add(gaps)
    values, counts = merged([a, b])
    expanded = np.array([g for gaps in steps for g in gaps])
    assert len(a) + len(b) == len(expanded) == counts.sum()
    assert np.all(np.diff(values) > 0)
    got = weighted_stats("itl", values, counts, PERCENTILES)
    ms = expanded * 1e3 if len(expanded) else np.zeros(1)
    want = {
        "mean_itl_ms": np.mean(ms),
        "median_itl_ms": np.median(ms),
        "std_itl_ms": np.std(ms),
        **{f"p{p}_itl_ms": np.percentile(ms, p) for p in PERCENTILES},
    }
    for key, value in want.items():
        assert np.isclose(got[key], value, rtol=1e-12, atol=1e-12), (key, got[key], value)


def test_a_step_of_equal_gaps_is_one_pair():
    log = ItlLog()
    log.add([0.01] * 256)
    log.add([0.01, 0.02, 0.01])
    assert list(log.gaps_s) == [0.01, 0.01, 0.02] and list(log.counts) == [256, 2, 1]


def test_unmeasured_requests_leave_no_gaps():
    from sim.config import SimConfig
    from sim.run.simulate import simulate

    data = {
        "cost_profile": "prior",
        "output": {"report": False, "progress": False},
        "workload": {
            "kind": "closed_loop",
            "concurrency": 4,
            "num_requests": 12,
            "warmup_requests": 4,
            "input_len": 64,
            "output_len": 9,
            "length_dist": "fixed",
        },
    }
    r = simulate(SimConfig.from_mapping(data))
    assert len(r.itl_s) == 8 * 8  # measured requests x gaps between their 9 tokens
