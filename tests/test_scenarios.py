"""Every scenario file composes and runs on a tiny workload."""

from __future__ import annotations

import pytest

from sim.cli import check_overrides, group_options
from sim.run.simulate import simulate


@pytest.mark.parametrize("scenario", group_options("scenario"))
def test_scenario_runs(scenario):
    (cfg,) = check_overrides([f"scenario={scenario}", "workload.num_requests=24"])
    result = simulate(cfg)
    sim = result.summary["sim"]
    assert sim["finished"] + sim["rejected"] == 24
    assert result.summary["completed"] == sim["finished"] > 0


@pytest.mark.parametrize(
    "workload", [w for w in group_options("workload") if w not in ("trace", "bench_json")]
)
def test_workload_groups_run(workload):
    (cfg,) = check_overrides([f"workload={workload}", "workload.num_requests=16"])
    assert simulate(cfg).summary["completed"] == 16


def test_scenarios_show_their_mechanism():
    (shared,) = check_overrides(["scenario=prefix_sharing", "workload.num_requests=80"])
    assert simulate(shared).summary["sim"]["prefix_cache_hit_rate"] > 0.4
    (turns,) = check_overrides(["scenario=multi_turn", "workload.num_requests=80"])
    assert simulate(turns).summary["sim"]["prefix_cache_hit_rate"] > 0.3
    (over,) = check_overrides(["scenario=overload", "workload.num_requests=400"])
    assert simulate(over).summary["sim"]["preemptions"] > 0
