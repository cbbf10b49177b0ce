"""What a lesson reads off a run: its makespan, batch size over time, worst token gap, prompt
tokens computed, and the share of time its requests spent in one phase."""

from __future__ import annotations

import numpy as np

from sim.run.summary import RunResult


def makespan(r: RunResult) -> float:
    """From the first arrival to the last finish (s)."""
    q = r.requests
    return float(q["finish_s"].max() - q["arrival_s"].min())


def time_mean_batch(r: RunResult) -> float:
    """Requests in the batch, averaged over time (each step weighted by its duration)."""
    s = r.steps
    return float(np.average(s["batch_size"], weights=s["duration_s"])) if len(s) else 0.0


def max_itl_ms(r: RunResult) -> float:
    gaps, _ = r.itl
    return float(gaps.max()) * 1e3 if len(gaps) else 0.0


def prefill_tokens(r: RunResult) -> int:
    return int(r.steps["prefill_tokens"].sum())


# ---- the lessons -------------------------------------------------------------------------------
def phase_share(r: RunResult, phase: str) -> float:
    p = r.phases
    total = float((p["end_s"] - p["start_s"]).sum())
    part = p[p["phase"] == phase]
    return float((part["end_s"] - part["start_s"]).sum()) / total if total else 0.0


def long_ids(r: RunResult, threshold: int) -> np.ndarray:
    return r.requests["prompt_tokens"].to_numpy() >= threshold
