"""When a client in the engine's own process sees a token (workload.client_in_process): vLLM
V0's AsyncLLMEngine hands each step's outputs over one step late.

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

vLLM V1 runs its engine core in another process and streams outputs as each step ends, so a
client of V1 sees tokens when sampled (with async scheduling a request that arrives mid-step is
admitted a step later still: the scheduler models that, sim/schedulers/ahead.py).

The run records when each token was sampled (a step's end); `seen_at` maps those times to when
such a client sees them, per replica, from the run's step log (`next_step`: the step that
follows a moment, also where an engine reads a request, sim/scenarios/validate/engine_queue.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.run.metrics import with_latencies


def next_step(
    t: np.ndarray, replica: np.ndarray, steps: pd.DataFrame, eps_s: float = 1e-9
) -> tuple[np.ndarray, np.ndarray]:
    """For each moment `t` (seconds) on replica `replica`: (start, end) of that replica's first
    step to start at or after it (within `eps_s`), or (t, t) where none does. NaN stays NaN.

    steps: the run's step log with columns replica, start_s, duration_s (sim/run/outputs.py)."""
    t = np.asarray(t, dtype=np.float64)
    replica = np.asarray(replica)
    first, last = t.copy(), t.copy()
    for r in np.unique(replica):
        mine = steps[steps["replica"] == r]
        start = mine["start_s"].to_numpy(dtype=np.float64)
        order = np.argsort(start, kind="stable")
        start = start[order]
        end = start + mine["duration_s"].to_numpy(dtype=np.float64)[order]
        at = np.nonzero((replica == r) & np.isfinite(t))[0]
        i = np.searchsorted(start, t[at] - eps_s, side="left")
        has_next = i < len(start)
        first[at[has_next]] = start[i[has_next]]
        last[at[has_next]] = end[i[has_next]]
    return first, last


def seen_at(
    token_s: np.ndarray, replica: np.ndarray, steps: pd.DataFrame, eps_s: float = 1e-9
) -> np.ndarray:
    """For each token sampled at `token_s` (seconds, a step's end) on replica `replica`, the end
    of the next step of that replica (next_step), or `token_s` itself where none does."""
    return next_step(token_s, replica, steps, eps_s)[1]


def in_process_view(requests: pd.DataFrame, steps: pd.DataFrame, settings) -> pd.DataFrame:
    """The run's requests (sim/run/metrics.py requests_frame) as a client in the engine's own
    process sees them: under vLLM V0 with async output processing each first token at the end of
    the step after the one that sampled it (seen_at), its TTFT and TPOT recomputed; a request
    that finished with that token finishes when it is seen. Other engines: unchanged (V1's
    engine core streams each step's outputs from its own process)."""
    if settings.scheduler != "vllm_v0" or not settings.async_output_proc:
        return requests
    out = requests.copy()
    replica = out["replica"].to_numpy()
    first = seen_at(out["first_token_s"].to_numpy(dtype=np.float64), replica, steps)
    out["first_token_s"] = first
    out["finish_s"] = np.fmax(out["finish_s"].to_numpy(dtype=np.float64), first)
    return with_latencies(out)
