"""The simpy driver and the plain loop agree; concurrency caps and replicas behave."""

from __future__ import annotations

import numpy as np
import pytest

from sim.run.driver import check_conservation, run_loop, run_simpy
from sim.run.metrics import StepLog
from sim.run.setup import Setup
from sim.run.simulate import simulate
from sim.workload.generate import generate
from tests.conftest import config


def _both(cfg):
    out = []
    for driver in ("simpy", "loop"):
        setup = Setup.from_config(cfg)
        workload = generate(cfg.workload, np.random.default_rng(cfg.seed))
        engines = setup.engines(StepLog())
        if driver == "simpy":
            outcome = run_simpy(workload, engines)
        else:
            outcome = run_loop(workload, engines[0])
        check_conservation(outcome, engines)
        out.append(
            [
                (
                    r.request_id,
                    r.arrival_s,
                    r.first_scheduled_s,
                    r.first_token_s,
                    r.finish_s,
                    r.num_preemptions,
                )
                for r in outcome.requests
            ]
        )
    return out


@pytest.mark.parametrize(
    "workload",
    [
        {
            "kind": "poisson",
            "rate": 30.0,
            "length_dist": "lognormal",
            "input_len": 600,
            "output_len": 80,
            "num_requests": 300,
        },
        {
            "kind": "closed_loop",
            "concurrency": 8,
            "num_requests": 120,
            "length_dist": "uniform",
            "range_ratio": 0.5,
        },
        {"kind": "burst", "num_requests": 100, "length_dist": "uniform", "range_ratio": 0.5},
        {"kind": "poisson", "rate": 50.0, "concurrency": 5, "num_requests": 150},
    ],
)
def test_simpy_and_plain_loop_agree(workload):
    simpy_rows, loop_rows = _both(config(workload=workload))
    assert simpy_rows == loop_rows


def test_concurrency_cap_is_never_exceeded():
    cfg = config(
        workload={
            "kind": "closed_loop",
            "concurrency": 6,
            "num_requests": 200,
            "length_dist": "uniform",
            "range_ratio": 0.8,
        }
    )
    setup = Setup.from_config(cfg)
    outcome = run_simpy(generate(cfg.workload, np.random.default_rng(0)), setup.engines(StepLog()))
    events = sorted(
        [(r.arrival_s, 1) for r in outcome.requests] + [(r.finish_s, -1) for r in outcome.requests]
    )
    in_flight = np.cumsum([d for _, d in events])
    assert in_flight.max() == 6
    # in a closed loop each finish sends the next request at that instant
    finishes = sorted(r.finish_s for r in outcome.requests)
    sends = sorted(r.arrival_s for r in outcome.requests)[6:]
    assert sends == finishes[: len(sends)]


def test_data_parallel_replicas_share_the_load():
    cfg = config(workload={"num_requests": 400, "rate": 60.0}, parallel={"dp": 3})
    setup = Setup.from_config(cfg)
    log = StepLog()
    engines = setup.engines(log)
    outcome = run_simpy(generate(cfg.workload, np.random.default_rng(0)), engines)
    check_conservation(outcome, engines)
    per_replica = np.bincount(list(outcome.replica_of.values()), minlength=3)
    assert per_replica.min() > 100 and per_replica.sum() == 400


def test_time_limit_reports_unfinished_requests():
    cfg = config(workload={"num_requests": 200, "rate": 100.0}, max_sim_time_s=1.0)
    from sim.run.simulate import simulate

    result = simulate(cfg)
    sim = result.summary["sim"]
    assert sim["unfinished_at_time_limit"] > 0
    assert sim["finished"] + sim["rejected"] + sim["unfinished_at_time_limit"] == 200
    assert sim["stopped_at_s"] >= 1.0


def test_a_staggered_closed_loop_prefills_its_first_wave_one_at_a_time():
    loop = {"kind": "closed_loop", "concurrency": 4, "num_requests": 12, "warmup_requests": 4}
    lockstep = simulate(config(loop))
    spread = simulate(config(loop | {"stagger": True}))
    sent = spread.requests.sort_values("request_id")["arrival_s"].to_numpy()
    gaps = np.diff(sent[:4])
    assert (gaps > 0).all() and np.allclose(gaps, gaps[0])  # evenly over one lifetime
    assert "spread over" in spread.summary["sim"]["workload"]
    assert spread.summary["completed"] == lockstep.summary["completed"] == 8
    # alone in its step, a prompt waits for no one else's prefill
    assert spread.summary["mean_ttft_ms"] < lockstep.summary["mean_ttft_ms"]


def test_a_closed_loop_with_warmup_measures_throughput_while_full():
    loop = {"kind": "closed_loop", "concurrency": 4, "num_requests": 16, "warmup_requests": 4}
    s = simulate(config(loop)).summary
    a, b = s["sim"]["throughput_window_s"]
    assert 0 < a < b
    # Little's law on the measured requests: 4 in flight, each e2el long, 32 tokens apiece
    little = 4 * 32 / (s["mean_e2el_ms"] / 1e3)
    assert s["output_throughput"] == pytest.approx(little, rel=0.15)
    plain = simulate(config(loop | {"warmup_requests": 0})).summary
    assert plain["sim"]["throughput_window_s"] is None


def test_moe_data_parallel_ranks_step_together():
    """vLLM steps the data-parallel ranks of an MoE model together: every step starts on all
    busy ranks at once and lasts as long as the slowest."""
    moe = {"model": "qwen3-30b-a3b", "hardware": "h200", "engine": "vllm@0.19.0"}
    load = {"kind": "poisson", "num_requests": 40, "rate": 50.0, "length_dist": "uniform"}
    load |= {"range_ratio": 0.5}
    together = simulate(config(load, **moe, parallel={"dp": 2, "ep": 2}))
    apart = simulate(config(load, **moe, parallel={"dp": 2, "ep": 2, "dp_lockstep": False}))
    steps = together.steps
    both = steps.groupby("start_s").filter(lambda g: len(g) == 2)
    assert len(both) > 0.5 * len(steps)
    assert (both.groupby("start_s")["duration_s"].nunique() == 1).all()
    assert (both["gpu_s"] <= both["duration_s"] + 1e-12).all()
    apart_starts = apart.steps.groupby("start_s").size()
    assert (apart_starts == 1).mean() > 0.5  # independent ranks rarely start together
    assert together.summary["completed"] == apart.summary["completed"] == 40
