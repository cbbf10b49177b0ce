"""sim/run/delivery.py: a token sampled by step k is seen at the end of step k + 1."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.run.delivery import in_process_view, seen_at


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


def _requests(first, finish, output):
    n = len(first)
    df = pd.DataFrame(
        {"replica": np.zeros(n, dtype=int), "arrival_s": np.zeros(n), "first_token_s": first}
    )
    df["finish_s"], df["output_tokens"] = finish, output
    df["ttft_s"] = df["first_token_s"]
    return df


def test_an_in_process_v0_client_sees_first_tokens_a_step_late():
    """workload.client_in_process under vLLM V0 with async output processing: TTFT grows by the
    next step, TPOT is recomputed over the rest, a one-token request finishes when seen."""
    from types import SimpleNamespace

    steps = _steps([0, 0, 0], [0.0, 0.01, 0.03], [0.01, 0.02, 0.01])
    reqs = _requests([0.01, 0.01], [0.04, 0.01], [4, 1])
    v0 = SimpleNamespace(scheduler="vllm_v0", async_output_proc=True)
    seen = in_process_view(reqs, steps, v0)
    np.testing.assert_allclose(seen["ttft_s"], [0.03, 0.03])
    np.testing.assert_allclose(seen["finish_s"], [0.04, 0.03])
    np.testing.assert_allclose(seen["tpot_s"].iloc[0], (0.04 - 0.03) / 3)
    for settings in (SimpleNamespace(scheduler="vllm_v1", async_output_proc=True),
                     SimpleNamespace(scheduler="vllm_v0", async_output_proc=False)):  # fmt: skip
        assert in_process_view(reqs, steps, settings) is reqs
