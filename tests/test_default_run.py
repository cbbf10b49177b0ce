"""The default run is what the README promises: ~1,000 chat-like requests at ~70% of capacity."""

from __future__ import annotations

import numpy as np

from sim.cli import check_overrides
from sim.run import simulate


def test_default_rate_is_near_70_percent_of_capacity():
    (default,) = check_overrides([])
    assert default.workload.num_requests == 1000
    assert default.model == "llama-3.1-8b" and default.hardware == "h100-sxm"
    # capacity: the steady completion rate when the same traffic arrives all at once
    (burst,) = check_overrides(["workload=burst", "workload.num_requests=2000"])
    finish = np.sort(simulate(burst).requests["finish_s"].to_numpy())
    lo, hi = int(0.2 * len(finish)), int(0.8 * len(finish))
    capacity = (hi - lo) / (finish[hi] - finish[lo])
    load = default.workload.rate / capacity
    assert 0.6 <= load <= 0.8, (default.workload.rate, capacity)
