"""Fast-forward: a run of decode-only steps simulated in one vectorised jump, exactly.

When the scheduler's family says the next step only decodes one token of every running request
(SchedulerBase.decode_run), the steps that follow stay that way until a request arrives, one
finishes, or the pool runs short of blocks. For such a run of K steps, with request i at
context c_i and step k (1-based):

    step k's contexts       c_i + k - 1              (a K x batch matrix, priced row by row)
    step k's end            t_k = t_{k-1} + dt_k     (sequential sums, as the driver adds)
    request i's tokens      out_i + k after step k; its gap at step 1 is t_1 - last_token_i,
                            then t_k - t_{k-1}
    blocks                  a new block when c_i + k - 1 fills the blocks held, a hash when
                            c_i + k reaches a block boundary: the pool's own calls, made in
                            step order and request order, exactly as step by step

K stops before the first step whose start is not before `horizon` (the next event anything
else could cause: an arrival, another replica's step end, the time limit), before the first
finishing step, and where the free blocks would not cover the new ones. Every figure is the
same float as step-by-step simulation computes: the cost model prices each row the way it
prices one step, and times are accumulated in the same order.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sim.engine import Engine

MIN_RUN_STEPS = 2  # a single step is stepped alone
MAX_RUN_STEPS = 2048  # bounds the steps x batch matrices of one jump


def fast_forward(engine: Engine, now: float, horizon: float) -> tuple[list, list] | None:
    """Simulate a run of decode-only steps from `now`, all starting before `horizon`: (their
    durations, the requests the last one finished), or None (and nothing changed) when no
    run of MIN_RUN_STEPS steps is possible."""
    sched = engine.scheduler
    running = sched.running
    if not running or horizon <= now or not sched.decode_run():
        return None
    batch = len(running)
    computed = np.fromiter((r.num_computed_tokens for r in running), np.int64, batch)
    outputs = np.fromiter((r.num_output_tokens for r in running), np.int64, batch)
    prompts = np.fromiter((r.prompt_len for r in running), np.int64, batch)
    if outputs.min() < 1 or not np.array_equal(prompts + outputs - computed, np.ones(batch)):
        return None  # a prefill (or a chunk of one) is still in the batch
    limits = np.fromiter((r.max_output_len for r in running), np.int64, batch)
    steps = min(int((limits - outputs).min()), MAX_RUN_STEPS)  # up to the first finish
    if steps < MIN_RUN_STEPS:
        return None
    first_dt = engine.cost.decode_run(computed.reshape(1, -1))[2][0]
    if math.isfinite(horizon):  # later steps read more KV, so they take at least as long
        steps = min(steps, int((horizon - now) / first_dt) + 2)
    kv = engine.kv
    block_size = kv.block_size
    held = np.fromiter((len(kv.req_blocks[r.request_id]) for r in running), np.int64, batch)
    events, new_per_step = _block_events(computed, held, block_size, steps, kv.enable_caching)
    room = np.cumsum(new_per_step) <= kv.num_free_blocks
    steps = min(steps, int(np.argmin(room)) if not room.all() else steps)
    if steps < MIN_RUN_STEPS:
        return None
    contexts = computed[None, :] + np.arange(steps, dtype=np.int64)[:, None]
    gpu_s, cpu_s, total_s = engine.cost.decode_run(contexts)
    ends = np.cumsum(np.concatenate(([now], total_s)))
    steps = min(steps, int(np.searchsorted(ends[:steps], horizon, side="left")))
    if steps < MIN_RUN_STEPS:
        return None
    used = kv.num_used_blocks + np.cumsum(new_per_step[: steps - 1])
    finished = _apply(engine, steps, computed, outputs, events, ends, (gpu_s, cpu_s, used))
    engine.num_fast_forwarded_steps += steps
    return total_s[:steps].tolist(), finished


def _block_events(computed, held, block_size: int, steps: int, caching: bool):
    """Steps (1-based) at which each request calls the pool, as codes step x batch + index,
    ascending; and how many new blocks each step takes (index k - 1 for step k)."""
    batch = len(computed)
    index = np.arange(batch, dtype=np.int64)
    first_new = np.maximum(held * block_size - computed + 1, 1)  # the step needing block h+1
    new_k, new_i = _every(first_new, block_size, steps, index)
    ks, idx = [new_k], [new_i]
    if caching:  # the steps that fill a block, whose hash is then cached
        full_k, full_i = _every(block_size - computed % block_size, block_size, steps, index)
        ks.append(full_k)
        idx.append(full_i)
    codes = np.unique(np.concatenate(ks) * batch + np.concatenate(idx))
    new_per_step = np.bincount(new_k - 1, minlength=steps)[:steps]
    return codes, new_per_step


def _every(first: np.ndarray, period: int, last: int, index: np.ndarray):
    """(steps, request index) of first_i, first_i + period, ... up to `last`, for every i."""
    count = np.where(first <= last, (last - first) // period + 1, 0)
    total = int(count.sum())
    within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    return np.repeat(first, count) + period * within, np.repeat(index, count)


def _apply(engine: Engine, steps: int, computed, outputs, events, ends, figures) -> list:
    """Steps 1 .. steps - 1 in bulk; the last through the family's own update_from_output,
    which emits its tokens and finishes whoever is done, exactly as a step alone would.
    `figures`: per step, GPU and CPU seconds and KV blocks in use after the step."""
    gpu_s, cpu_s, used = figures
    sched = engine.scheduler
    running = sched.running
    batch = len(running)
    kv = engine.kv
    for code in events[events < (steps + 1) * batch].tolist():
        k, i = divmod(code, batch)
        req = running[i]
        req.num_computed_tokens = int(computed[i]) + k - 1
        req.num_output_tokens = int(outputs[i]) + k - 1
        if kv.allocate_slots(req, 1) is None:
            raise RuntimeError(f"fast-forward: request {req.request_id} found no block")
    itl = sched.itl
    bulk = steps - 1  # steps applied here
    before_last = float(ends[bulk])
    first_gaps = []
    for i, req in enumerate(running):
        if req.request_id >= itl.measure_from:
            first_gaps.append(float(ends[1]) - req.last_token_s)
        req.num_computed_tokens = int(computed[i]) + bulk
        req.num_output_tokens = int(outputs[i]) + bulk
        req.last_token_s = before_last
    itl.add(first_gaps)
    if first_gaps and bulk > 1:
        later = ends[2 : bulk + 1] - ends[1:bulk]
        itl.add_pairs(later, np.full(len(later), len(first_gaps), dtype=np.int64))
    starts = ends[:bulk]
    engine.steps.record_run(
        engine.replica,
        starts,
        ends[1:steps] - starts,
        gpu_s[:bulk],
        cpu_s[:bulk],
        batch,
        used,
        len(sched.waiting),
    )
    sched.advance_decode_state(steps)
    plan = sched._plan(list(running), [1] * batch, 0)
    end = float(ends[steps])
    finished = sched.update_from_output(plan, end)
    engine.steps.record(
        engine.replica,
        before_last,
        end - before_last,
        _Cost(float(gpu_s[bulk]), float(cpu_s[bulk])),
        plan,
        kv.num_used_blocks,
        len(sched.running),
        len(sched.waiting),
    )
    return finished


class _Cost:
    """The two figures of a step's cost the step log keeps."""

    __slots__ = ("cpu_s", "gpu_s")

    def __init__(self, gpu_s: float, cpu_s: float):
        self.gpu_s, self.cpu_s = gpu_s, cpu_s
