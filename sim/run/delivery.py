"""When a client in the engine's own process sees a token: vLLM V0's AsyncLLMEngine hands each
step's outputs over one step late.

With async output processing (vLLM 0.6.0+, V0; on unless pipeline parallelism, speculative
decoding or a platform without it turns it off: config.py verify_async_output_proc of the 0.7.3
wheel), a step's sampled tokens are appended to the scheduler context's output queue and
turned into RequestOutputs by the async callback of the NEXT step, which the model runner calls
from the executor's thread once that step's forward is launched (engine/async_llm_engine.py
step_async, worker/model_runner.py execute_model: `model_input.async_callback()` before
sampling). The callback puts them into each request's AsyncStream with asyncio.Queue.put_nowait
from that thread, which does not wake the event loop; the loop, waiting on the executor future
of that same step, runs the client's coroutine when the step ends. So a client in the engine's
process (AccelMark's runners: `async for output in engine.generate(...)` in the benchmark's
event loop, runners/nvidia_vllm_47f5d58e/runner.py) sees the token sampled by step k at the end
of step k + 1. When no unfinished request is left after a step, step_async drains the queue at
once (`if not self.has_unfinished_requests()`), so a token with no later step is seen when sampled.

vLLM V1 with async scheduling (on by default from 0.14.0) delays the first token by a step
too, for another reason: EngineCore.step_with_batch_queue schedules step k + 1 blind while step k
runs and then blocks on step k's result, so a request that arrives while step k is in flight is
read from the input queue after step k ends and scheduled into step k + 2 (vllm/v1/engine/
core.py: "Don't block on next worker response unless the queue is full"; max_concurrent_batches
2 with async scheduling). A request that finds the engine idle is scheduled at once. The
simulator schedules it into k + 1; `in_flight_at` says which requests arrived during a step, and
`seen_at` of their first tokens approximates the step they lost (the next step's duration).

The run records when each token was sampled (a step's end); `seen_at` maps those times to when
such a client sees them, per replica, from the run's step log."""

from __future__ import annotations

import numpy as np
import pandas as pd


def seen_at(
    token_s: np.ndarray, replica: np.ndarray, steps: pd.DataFrame, eps_s: float = 1e-9
) -> np.ndarray:
    """For each token sampled at `token_s` (seconds, a step's end) on replica `replica`, the end
    of the next step of that replica (the first to start at or after it, within `eps_s`), or
    `token_s` itself where none does. NaN (a token never sampled) stays NaN.

    steps: the run's step log with columns replica, start_s, duration_s (sim/run/outputs.py)."""
    token_s = np.asarray(token_s, dtype=np.float64)
    replica = np.asarray(replica)
    out = token_s.copy()
    for r in np.unique(replica):
        mine = steps[steps["replica"] == r]
        start = mine["start_s"].to_numpy(dtype=np.float64)
        order = np.argsort(start, kind="stable")
        start = start[order]
        end = start + mine["duration_s"].to_numpy(dtype=np.float64)[order]
        at = (replica == r) & np.isfinite(token_s)
        i = np.searchsorted(start, token_s[at] - eps_s, side="left")
        has_next = i < len(start)
        seen = token_s[at].copy()
        seen[has_next] = end[i[has_next]]
        out[at] = seen
    return out


def in_flight_at(
    arrival_s: np.ndarray, replica: np.ndarray, steps: pd.DataFrame, eps_s: float = 1e-9
) -> np.ndarray:
    """Whether a step of the request's replica was running when it arrived (started before
    `arrival_s` and ended after it, by more than `eps_s`): the requests a V1 engine with async
    scheduling leaves out of the step it has already scheduled."""
    arrival_s = np.asarray(arrival_s, dtype=np.float64)
    replica = np.asarray(replica)
    out = np.zeros(len(arrival_s), dtype=bool)
    for r in np.unique(replica):
        mine = steps[steps["replica"] == r]
        start = mine["start_s"].to_numpy(dtype=np.float64)
        order = np.argsort(start, kind="stable")
        start = start[order]
        end = start + mine["duration_s"].to_numpy(dtype=np.float64)[order]
        at = replica == r
        i = np.searchsorted(start, arrival_s[at] - eps_s, side="left") - 1
        ok = i >= 0
        busy = np.zeros(int(at.sum()), dtype=bool)
        busy[ok] = arrival_s[at][ok] < end[i[ok]] - eps_s
        out[at] = busy
    return out
