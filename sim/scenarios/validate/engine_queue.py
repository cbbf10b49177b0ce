"""TTFT counted from when the engine read the request, for sources that measure it so.

vLLM V1's engine records a request's `queued_ts` when its busy loop reads the request from its
input queue (EngineCore._process_input_queue -> Scheduler.add_request -> EngineCoreEvent
QUEUED), which it does between two steps, and LLMServingSim's benchmark counts TTFT from there
(its requests.jsonl: `first_token_ts - queued_ts`; sim/workload/bench_results.py). Its replay
sends each request at that time, which in the simulated timeline falls inside a step, so the
simulated TTFT from the send also counts the rest of that step, which the measured one does
not. The like-for-like figure counts from when the simulated engine reads it: the first step
of its replica that starts at or after its send (an idle engine starts one at the send).

A case says so with `ttft_from: engine_queue` (the LLMServingSim importer writes it); its
predicted TTFT figures and the per-request TTFTs of its KS test are then counted from there.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.run.delivery import next_step
from sim.run.metrics import bench_summary, with_latencies
from sim.run.summary import RunResult

ENGINE_QUEUE = "engine_queue"  # the case key ttft_from's value
TTFT_FROM = ("send", ENGINE_QUEUE)  # its choices (send: the default, the client's send)


def read_s(requests: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """Each request's time the engine read it: the first step start of its replica at or
    after its arrival (its arrival where no step starts after it: a request never run)."""
    arrival = requests["arrival_s"].to_numpy(dtype=np.float64)
    return next_step(arrival, requests["replica"].to_numpy(), steps, eps_s=0.0)[0]


def from_engine_queue(result: RunResult) -> pd.DataFrame:
    """The run's requests frame with arrival_s moved to when the engine read each request and
    its latencies recomputed from there. Refused for a run whose steps were streamed to disk
    (its steps frame is a sample)."""
    if result.streamed is not None:
        raise ValueError("ttft_from: engine_queue needs every step; this run streamed them")
    df = result.requests.copy()
    df["arrival_s"] = read_s(df, result.steps)
    return with_latencies(df)


def rebased(result: RunResult, keys) -> dict[str, float]:
    """The TTFT figures among `keys` (summary.json names: mean_ttft_ms, p50_ttft_ms, ...)
    counted from the engine's read, over the requests the summary counts (warm-up left out)."""
    df = from_engine_queue(result)
    warmup = result.workload.warmup
    measured = df[df["request_id"] >= warmup] if warmup else df
    stats = bench_summary(measured, result.itl)
    return {k: float(stats[k]) for k in keys if "ttft" in k and k in stats}
