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
    if not running or horizon <= now:
        return None
    newest = running[-1]  # a prefill in progress is usually the newest request's
    if newest.prompt_len + newest.num_output_tokens - newest.num_computed_tokens != 1:
        return None
    if not sched.decode_run():
        return None
    kv = engine.kv
    held_blocks = kv.req_blocks
    computed, outputs, held = [], [], []
    steps = MAX_RUN_STEPS
    for r in running:
        c, out = r.num_computed_tokens, r.num_output_tokens
        if out < 1 or r.prompt_len + out - c != 1:
            return None  # a prefill (or a chunk of one) is still in the batch
        steps = min(steps, r.max_output_len - out)  # up to the first finish
        computed.append(c)
        outputs.append(out)
        held.append(len(held_blocks[r.request_id]))
    if steps < MIN_RUN_STEPS:
        return None
    first = np.array(computed, dtype=np.int64)
    if math.isfinite(horizon):  # later steps read more KV, so they take at least as long
        first_dt = float(engine.cost.decode_run(first[None, :])[2][0])
        steps = min(steps, int((horizon - now) / first_dt) + 2)
    events, new_per_step = _block_events(computed, held, kv.block_size, steps, kv.enable_caching)
    taken = 0
    for k in range(1, steps + 1):  # no step may need more blocks than are free
        taken += new_per_step[k]
        if taken > kv.num_free_blocks:
            steps = k - 1
            break
    if steps < MIN_RUN_STEPS:
        return None
    contexts = first[None, :] + np.arange(steps, dtype=np.int64)[:, None]
    gpu_s, cpu_s, total_s = engine.cost.decode_run(contexts)
    ends = np.cumsum(np.concatenate(([now], total_s)))
    steps = min(steps, int(np.searchsorted(ends[:steps], horizon, side="left")))
    if steps < MIN_RUN_STEPS:
        return None
    used = kv.num_used_blocks + np.cumsum(new_per_step[1:steps])
    finished = _apply(engine, steps, computed, outputs, events, ends, (gpu_s, cpu_s, used))
    engine.num_fast_forwarded_steps += steps
    return total_s[:steps].tolist(), finished


def _block_events(computed, held, block_size: int, steps: int, caching: bool):
    """The pool calls of the run, as codes step x batch + index (steps 1-based), ascending:
    a new block when a request's token needs one, a cached hash when its token fills one;
    and how many new blocks each step takes (entry k for step k)."""
    batch = len(computed)
    new_per_step = [0] * (steps + 1)
    codes = []
    for i, (c, h) in enumerate(zip(computed, held, strict=True)):
        k = max(h * block_size - c + 1, 1)  # the step whose token needs block h + 1
        while k <= steps:
            codes.append(k * batch + i)
            new_per_step[k] += 1
            k += block_size
        if caching:  # the steps that fill a block, whose hash is then cached
            k = block_size - c % block_size
            while k <= steps:
                codes.append(k * batch + i)
                k += block_size
    return sorted(set(codes)), new_per_step


def _apply(engine: Engine, steps: int, computed, outputs, events, ends, figures) -> list:
    """Steps 1 .. steps - 1 in bulk; the last through the family's own update_from_output,
    which emits its tokens and finishes whoever is done, exactly as a step alone would.
    `figures`: per step, GPU and CPU seconds and KV blocks in use after the step."""
    gpu_s, cpu_s, used = figures
    sched = engine.scheduler
    running = sched.running
    batch = len(running)
    kv = engine.kv
    stop = (steps + 1) * batch
    for code in events:
        if code >= stop:
            break
        k, i = divmod(code, batch)
        req = running[i]
        req.num_computed_tokens = computed[i] + k - 1
        req.num_output_tokens = outputs[i] + k - 1
        if kv.allocate_slots(req, 1) is None:
            raise RuntimeError(f"fast-forward: request {req.request_id} found no block")
    itl = sched.itl
    bulk = steps - 1  # steps applied here
    before_last = float(ends[bulk])
    first_gaps = []
    first_end = float(ends[1])
    measure_from = itl.measure_from
    for req, c, out in zip(running, computed, outputs, strict=True):
        if req.request_id >= measure_from:
            first_gaps.append(first_end - req.last_token_s)
        req.num_computed_tokens = c + bulk
        req.num_output_tokens = out + bulk
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
