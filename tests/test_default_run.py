"""The default run is what the README promises: ~1,000 chat-like requests at ~70% of capacity."""

from __future__ import annotations

import numpy as np

from sim.cli import check_overrides
from sim.run.simulate import simulate


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


def test_default_run_prices_steps_with_the_calibrated_h100_profile():
    (cfg,) = check_overrides(["workload.num_requests=40"])
    sim = simulate(cfg).summary["sim"]
    assert sim["cost_profile"] == "h100-sxm" and sim["cost_profile_calibrated"]
    assert sim["kernel_family"] == "vllm@0.24.0"  # newest measured vLLM kernels <= 0.33.0
    assert sim["priced_with"]["gemm"] == "gemm/bf16"
    assert sim["priced_with"]["attention_decode"] == "attention_decode/FLASH_ATTN_FA3/bf16"


def test_gpus_without_tables_fall_back_to_the_prior():
    (cfg,) = check_overrides(
        ["hardware=l40s", "workload.num_requests=10", "engine_args.max_model_len=16384"]
    )
    sim = simulate(cfg).summary["sim"]
    assert sim["cost_profile"] == "prior" and not sim["cost_profile_calibrated"]
    assert "no measured profile for l40s" in sim["cost_profile_source"]
