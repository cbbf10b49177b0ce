"""Queueing sanity: M/D/1 against Pollaczek-Khinchine, and Little's law on a busy run."""

from __future__ import annotations

import numpy as np
import pytest

from sim.run.simulate import simulate
from tests.conftest import config, run_plain


def test_md1_waiting_time_matches_pollaczek_khinchine():
    """One request at a time, one step each (prompt 512, one output token): a single server
    with a constant service time D. Poisson arrivals at rho = 0.7 give a mean wait in queue of
    rho * D / (2 (1 - rho))."""
    probe = config(
        workload={"num_requests": 1, "input_len": 512, "output_len": 1},
        engine_args={"max_num_seqs": 1},
    )
    _, engine, _ = run_plain(probe)
    service_s = engine.steps.columns["duration_s"][0]
    rho = 0.7
    cfg = config(
        workload={
            "num_requests": 20_000,
            "rate": rho / service_s,
            "input_len": 512,
            "output_len": 1,
        },
        engine_args={"max_num_seqs": 1},
        seed=3,
    )
    outcome, engine, _ = run_plain(cfg)
    durations = np.frombuffer(engine.steps.columns["duration_s"])
    assert np.allclose(durations, service_s, rtol=1e-12)  # deterministic service
    waits = np.array([r.first_scheduled_s - r.arrival_s for r in outcome.requests])
    expected = rho * service_s / (2 * (1 - rho))
    assert waits.mean() == pytest.approx(expected, rel=0.06)
    assert (waits == 0).mean() == pytest.approx(1 - rho, abs=0.02)  # P(idle server) = 1 - rho


def test_littles_law_on_a_busy_run():
    """Time-averaged requests in the system = arrival rate x mean time in the system, with
    the first side read from steps.parquet and the second from requests.parquet."""
    cfg = config(
        workload={
            "num_requests": 1500,
            "rate": 12.0,
            "length_dist": "lognormal",
            "input_len": 1155,
            "output_len": 211,
            "input_sigma": 0.99,
            "output_sigma": 0.86,
        }
    )
    result = simulate(cfg)
    steps, reqs = result.steps, result.requests
    horizon = float(reqs["finish_s"].max() - reqs["arrival_s"].min())
    in_system = steps["num_running"] + steps["num_waiting"]
    # a step's count is taken after it ends; requests that finished in it left at its end
    finished_in_step = steps["batch_size"] - steps["num_running"] - steps["num_preempted"]
    area = float(((in_system + finished_in_step.clip(lower=0)) * steps["duration_s"]).sum())
    arrival_rate = len(reqs) / horizon
    mean_sojourn = float(reqs["e2el_s"].mean())
    assert area / horizon == pytest.approx(arrival_rate * mean_sojourn, rel=0.03)
