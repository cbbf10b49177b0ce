"""sim/run/delivery.py: a token sampled by step k is seen at the end of step k + 1."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.run.delivery import in_flight_at, seen_at


def _steps(replica, start, duration):
    return pd.DataFrame({"replica": replica, "start_s": start, "duration_s": duration})


def test_token_seen_when_the_next_step_ends():
    # steps back to back: [0, 0.01), [0.01, 0.03), [0.03, 0.04)
    steps = _steps([0, 0, 0], [0.0, 0.01, 0.03], [0.01, 0.02, 0.01])
    sampled = np.array([0.01, 0.03, 0.04])  # the ends of the three steps
    seen = seen_at(sampled, np.zeros(3, dtype=int), steps)
    # the first two wait for the step after theirs; the last has none: drained at once
    np.testing.assert_allclose(seen, [0.03, 0.04, 0.04])


def test_idle_engine_waits_for_the_next_step_it_starts():
    # the engine idles from 0.01 to 0.5; a token sampled at 0.01 is seen when step 2 ends
    steps = _steps([0, 0], [0.0, 0.5], [0.01, 0.02])
    np.testing.assert_allclose(seen_at(np.array([0.01]), np.array([0]), steps), [0.52])


def test_replicas_apart_and_nan_kept():
    steps = _steps([0, 1, 0, 1], [0.0, 0.0, 0.01, 0.02], [0.01, 0.02, 0.05, 0.005])
    sampled = np.array([0.01, 0.02, np.nan])
    seen = seen_at(sampled, np.array([0, 1, 0]), steps)
    np.testing.assert_allclose(seen[:2], [0.06, 0.025])
    assert np.isnan(seen[2])
    assert (seen[:2] >= sampled[:2]).all()


def test_in_flight_at_arrival():
    # steps [0, 0.01), [0.01, 0.03); idle until [0.5, 0.52)
    steps = _steps([0, 0, 0], [0.0, 0.01, 0.5], [0.01, 0.02, 0.02])
    arrival = np.array([0.005, 0.01, 0.2, 0.5, 0.51])
    # mid-step: yes; at a step's start (the engine free to take it): no; while idle: no
    np.testing.assert_array_equal(
        in_flight_at(arrival, np.zeros(5, dtype=int), steps), [True, False, False, False, True]
    )
