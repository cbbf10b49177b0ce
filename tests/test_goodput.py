"""Goodput as vllm bench serve --goodput counts it, on a hand-made run and a simulated one."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sim.run.metrics import goodput
from sim.run.simulate import simulate
from tests.conftest import config


def test_goodput_counts_requests_meeting_every_target():
    requests = pd.DataFrame(
        {
            "status": ["finished"] * 4 + ["rejected"],
            "ttft_s": [0.1, 0.3, 0.1, 0.1, np.nan],
            # one-token answers have no TPOT; vllm bench counts them as 0 (good)
            "tpot_s": [0.02, 0.02, 0.06, np.nan, np.nan],
            "e2el_s": [1.0, 1.0, 1.0, 0.1, np.nan],
        }
    )
    out = goodput(requests, 2.0, {"ttft": 200.0, "tpot": 50.0})
    # good: request 0 and 3 (1 misses TTFT, 2 misses TPOT; the rejected one is not counted)
    assert out["request_goodput"] == 1.0  # 2 good in 2 s
    assert out["ttft_slo_met_pct"] == 75.0 and out["tpot_slo_met_pct"] == 75.0
    assert out["slo_met_pct"] == 50.0
    # a target exactly met counts as met (value <= target)
    assert goodput(requests, 2.0, {"e2el": 1000.0})["slo_met_pct"] == 100.0


def test_simulated_run_reports_goodput_with_slos():
    cfg = config(slo={"ttft_ms": 100.0, "tpot_ms": 30.0})
    s = simulate(cfg).summary
    r = simulate(cfg).requests
    done = r[r["status"] == "finished"]
    good = (done["ttft_s"] * 1e3 <= 100.0) & (done["tpot_s"].fillna(0) * 1e3 <= 30.0)
    assert s["request_goodput"] == pytest.approx(good.sum() / s["duration"])
    assert s["slo"] == {"ttft_ms": 100.0, "tpot_ms": 30.0}
    assert "request_goodput" not in simulate(config()).summary  # no targets, no goodput
