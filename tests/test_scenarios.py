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


FREEZE_CHECK = """
import gc, sys, weakref
from sim.scenarios import runner

class Node:
    pass

a, b = Node(), Node()
a.other, b.other = b, a  # a cycle, unreachable once the names go
gone = weakref.ref(a)
del a, b
frozen = gc.get_freeze_count()
runner.freeze_start_up()
assert gone() is None, "start-up garbage kept"
assert gc.get_freeze_count() > frozen, "nothing frozen"
after = gc.get_freeze_count()
runner.freeze_start_up()  # once per process
assert gc.get_freeze_count() == after
"""


def test_start_up_garbage_is_collected_and_the_rest_frozen():
    """freeze_start_up (sim/scenarios/runner.py): the garbage start-up left is freed (a young
    collection), what lives is frozen, once per process. In a fresh process: gc.freeze is
    process-wide."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", FREEZE_CHECK], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
