"""Fast-forward: runs of steps that nothing outside the batch can change, simulated in bulk,
exactly as step-by-step simulation would.

Between two outside events (an arrival, another replica's step end, the time limit) and while
no request finishes and the pool has blocks to spare, what a step does depends only on the
running requests' own progress. Two kinds of run are simulated in bulk:

  decode-only  every running request decodes one token per step (any family whose scheduler
               says so: SchedulerBase.decode_run). With request i at context c_i, step k
               (1-based) prices the contexts c_i + k - 1, a steps x batch matrix priced row by
               row in one vectorised call;
  chunked      (vLLM V1, and TensorRT-LLM with chunked context: chunked_run) a prefill still
               in progress beside the decodes: each step hands out the token budget in running
               order as both schedulers do, one step at a time in plain Python, until every
               request decodes; the decode-only steps that follow are then priced as above.
               SGLang runs a chunked prefill's steps without its decodes (prefill first), so
               it has no such run.

    step k's end      t_k = t_{k-1} + dt_k   (sequential sums, as the driver adds them)
    request tokens    a token when a request's computed tokens reach its known ones; its gap
                      is t_k minus its previous token's time
    blocks            the pool's own calls (a new block, a hash of a block just filled), made
                      in step order and request order, as step by step makes them; a request
                      holds KVCacheManager.blocks_for(its tokens) blocks (fewer than one per
                      block_size tokens where a release bounds windowed layers)

The bulk stops before the first step that would lack blocks, start at or after `horizon`, or
exceed MAX_RUN_STEPS, and before the first that would finish a request unless a finish is no
event to anyone: when the driver says so (no concurrency cap waits for the slot, no time
limit; Engine.finish_inside_runs) and the family does (nothing waits for the slot or the
blocks: Scheduler.finish_inside_runs, vLLM V1 and TensorRT-LLM), the bulk goes on past the
step that finishes requests, without them: they are let go as update_from_output does (their
blocks freed after that step's pool calls, in running order; the step's kv_used and
num_running rows count them out), and the decode-only steps after it are priced as another
stretch. The step after the bulk (when it starts before `horizon`) is simulated normally.
Every figure is the same float step-by-step simulation computes (tests/test_fast_forward.py).
"""

from __future__ import annotations

import itertools
import math
from typing import Protocol

import numpy as np

from sim.cost.step import CostModel
from sim.kv.manager import KVCacheManager, cdiv
from sim.run.metrics import StepLog
from sim.schedulers.base import Scheduler
from sim.schedulers.lane import Lane
from sim.workload.request import Request


class Engine(Protocol):
    """What fast-forward uses of a replica (sim/run/engine.py's Engine, which calls it)."""

    scheduler: Scheduler
    kv: KVCacheManager
    cost: CostModel
    steps: StepLog
    replica: int
    num_fast_forwarded_steps: int

    @property
    def has_work(self) -> bool: ...

    def step(self, now: float) -> tuple[float, list[Request]]: ...


MIN_DECODE_STEPS = 2  # shorter decode-only runs are stepped alone
MAX_RUN_STEPS = 2048  # bounds the steps x batch matrices of one run


class _Run:
    """The planned bulk: per-request state as it evolves, and what each step records. Request
    i is the i-th of the running list at the start; `alive` is the batch (indices, in running
    order), which loses a request when it finishes (when the engine lets runs go on past
    finishes: Engine.finish_inside_runs)."""

    def __init__(self, engine: Engine, now: float, finishes: bool, lane: Lane | None):
        self.running: list[Request] = list(engine.scheduler.running)
        r = self.running
        self.alive = list(range(len(r)))
        self.finishes = finishes
        if lane is None:  # the objects hold the counters
            self.computed = [q.num_computed_tokens for q in r]
            self.outputs = [q.num_output_tokens for q in r]
            blocks = engine.kv.req_blocks
            self.held = [len(blocks[q.request_id]) for q in r]
            self.last_s = [q.last_token_s for q in r]
        else:  # the lane holds them (Scheduler.running_lane)
            self.computed, self.outputs = lane.c.tolist(), lane.out.tolist()
            self.held = lane.held.tolist()
            self.last_s = [None if x != x else x for x in lane.last.tolist()]  # NaN: none yet
        self.prompts = [q.prompt_len for q in r]
        self.limits = [q.max_output_len for q in r]
        # requests not yet decoding one token a step (a prefill in progress): a decoding
        # request stays so, a prefill joins it when it catches up (_chunk_steps)
        self.prefilling = {
            i
            for i, (c, o, p) in enumerate(
                zip(self.computed, self.outputs, self.prompts, strict=True)
            )
            if not o or p + o - c != 1
        }
        self.first_s: dict[int, float] = {}  # request index -> first token time, set here
        # pool calls in step and request order: (i, n, computed, out) a grow by n tokens,
        # (i, FINISH, 0, 0) request i finished (its blocks freed)
        self.calls: list[tuple[int, int, int, int]] = []
        self.free = engine.kv.num_free_blocks
        self.used = engine.kv.num_used_blocks
        self.unref: dict[int, int] = {}  # block id -> references dropped by finishes here
        self.ends = [now]
        self.durations: list[float] = []  # dt of each step: now + dt_1 + ... gives ends
        self.columns: dict[str, list] = {k: [] for k in ROW_FIELDS}
        self.gaps: list[float] = []  # single gaps
        self.gap_pairs: list[tuple[np.ndarray, int]] = []  # (gaps, count each) of whole steps
        self.measure_from = engine.scheduler.itl.measure_from
        self.kv = engine.kv

    @property
    def steps(self) -> int:
        return len(self.ends) - 1

    def pure_decode(self) -> bool:
        return not self.prefilling

    def finish(self, done: list[int]) -> None:
        """Requests `done` (indices, in running order) emitted their last token in the step
        just recorded: out of the batch, their blocks freed after that step (the step's
        kv_used and num_running rows count them out, as update_from_output does)."""
        kv, unref = self.kv, self.unref
        ref = kv.pool.ref
        freed = 0
        for i in done:
            self.calls.append((i, FINISH, 0, 0))
            if not kv.enable_caching:  # no block is shared: all of them go free
                freed += self.held[i]
                continue
            blocks = kv.req_blocks[self.running[i].request_id]
            for block in blocks:  # shared prefix blocks go free with their last holder
                drop = unref.get(block, 0) + 1
                unref[block] = drop
                if ref[block] == drop:
                    freed += 1
            freed += self.held[i] - len(blocks)  # taken in this run: private
        self.free += freed
        self.used -= freed
        gone = set(done)
        self.alive = [i for i in self.alive if i not in gone]
        col = self.columns
        col["kv_used"][-1] = self.used
        col["num_running"][-1] = len(self.alive)


FINISH = -1  # the n of a finish in _Run.calls


ROW_FIELDS = (
    "gpu_s", "cpu_s", "prefill_tokens", "decode_tokens", "batch_size", "kv_used", "num_running",
)  # fmt: skip


def fast_forward(engine: Engine, now: float, horizon: float) -> tuple[list, list] | None:
    """Simulate a bulk of steps from `now` and the step after it: (their durations, the
    requests they finished); None (nothing changed) when no bulk is possible."""
    sched = engine.scheduler
    running = sched.running
    if not running or horizon <= now:
        return None
    lane = sched.running_lane()  # None: the Request objects hold the counters
    if lane is None:  # a prefill in progress is usually the newest request's
        newest = running[-1]
        chunked = newest.prompt_len + newest.num_output_tokens - newest.num_computed_tokens != 1
    else:
        chunked = int(lane.t[-1]) - int(lane.c[-1]) != 1
    if not (sched.chunked_run() if chunked else sched.decode_run()):
        return None
    finishes = engine.finish_inside_runs and sched.finish_inside_runs()
    if not (chunked or finishes):  # a finish within MIN_DECODE_STEPS rules a decode run out
        if lane is not None:
            if np.count_nonzero(lane.limit - lane.out <= MIN_DECODE_STEPS):
                return None
        else:
            for r in running:
                if r.max_output_len - r.num_output_tokens <= MIN_DECODE_STEPS:
                    return None
    run = _Run(engine, now, finishes, lane)
    if not run.pure_decode():
        if not chunked:
            return None
        _chunk_steps(engine, run, horizon)
        if run.alive and run.pure_decode() and sched.decode_run():
            _decode_steps(engine, run, horizon, minimum=1)
    else:
        _decode_steps(engine, run, horizon, minimum=1 if finishes else MIN_DECODE_STEPS)
    if run.steps == 0:
        return None
    finished = _apply(engine, run)
    engine.num_fast_forwarded_steps += run.steps
    durations = run.durations
    end = run.ends[-1]
    if end < horizon and engine.has_work:  # the step the bulk stopped before, as usual
        dt, last = engine.step(end)
        return [*durations, dt], finished + last
    return durations, finished


def _chunk_steps(engine: Engine, run: _Run, horizon: float) -> None:
    """vLLM V1 steps while a prefill is in progress, one at a time in plain Python: running
    requests in order, each min(its remaining tokens, long_prefill_token_threshold, the budget
    left) new tokens; stops before a step that would finish a request (unless the run goes on
    past finishes) or lack blocks."""
    sched, kv, cost = engine.scheduler, engine.kv, engine.cost
    block_size, caching = kv.block_size, kv.enable_caching
    windowed = kv.windowed is not None  # then a request holds kv.blocks_for(tokens) blocks
    threshold = sched.long_prefill_token_threshold
    c, out, prompt, limit, held = run.computed, run.outputs, run.prompts, run.limits, run.held
    while run.steps < MAX_RUN_STEPS and run.alive and not run.pure_decode():
        start = run.ends[-1]
        if start >= horizon:
            return
        budget = sched.max_num_batched_tokens
        batch = []  # (i, n)
        for i in run.alive:
            n = prompt[i] + out[i] - c[i]
            if 0 < threshold < n:
                n = threshold
            if n > budget:
                n = budget
            if n == 0:
                continue
            batch.append((i, n))
            budget -= n
            if budget == 0:
                break
        new_blocks, calls, done = 0, [], []
        for i, n in batch:
            end = c[i] + n
            if end == prompt[i] + out[i] and out[i] + 1 >= limit[i]:
                if not run.finishes:
                    return  # a finish: the step after the bulk
                done.append(i)
            more = kv.blocks_for(end) - held[i] if windowed else cdiv(end, block_size) - held[i]
            if more > 0 or (caching and end // block_size > c[i] // block_size):
                calls.append((i, n, c[i], out[i]))
                new_blocks += max(more, 0)
        if new_blocks > run.free:
            return  # a preemption: the step after the bulk
        num_decode = sum(1 for i, n in batch if n == 1 and out[i] > 0)  # as SchedulerBase._plan
        step = cost.batch_cost([n for _, n in batch], [c[i] for i, _ in batch], len(batch))
        end_s = start + step.total_s
        for call in calls:
            i, n = call[0], call[1]
            held[i] = max(held[i], kv.blocks_for(c[i] + n))
        run.calls.extend(calls)
        run.free -= new_blocks
        run.used += new_blocks
        tokens = 0
        for i, n in batch:
            tokens += n
            c[i] += n
            if c[i] == prompt[i] + out[i]:  # caught up: a token (and from now on a decode)
                run.prefilling.discard(i)
                if out[i] == 0:
                    run.first_s[i] = end_s
                elif run.running[i].request_id >= run.measure_from:
                    run.gaps.append(end_s - run.last_s[i])
                out[i] += 1
                run.last_s[i] = end_s
        run.ends.append(end_s)
        run.durations.append(step.total_s)
        col = run.columns
        col["gpu_s"].append(step.gpu_s)
        col["cpu_s"].append(step.cpu_s)
        col["prefill_tokens"].append(tokens - num_decode)
        col["decode_tokens"].append(num_decode)
        col["batch_size"].append(len(batch))
        col["kv_used"].append(run.used)
        col["num_running"].append(len(run.alive))
        if done:
            run.finish(done)


def _decode_steps(engine: Engine, run: _Run, horizon: float, minimum: int) -> None:
    """Decode-only steps, priced in one vectorised call (see the module docstring); when the
    run goes on past finishes, one such call per stretch between two steps that finish
    requests."""
    while run.alive:
        to_finish = min(run.limits[i] - run.outputs[i] for i in run.alive)
        steps = _decode_stretch(engine, run, horizon, minimum, to_finish)
        if steps < to_finish:
            return  # stopped before a finish, at the horizon, short of blocks or MAX_RUN_STEPS
        run.finish([i for i in run.alive if run.outputs[i] == run.limits[i]])
        minimum = 1


def _decode_stretch(engine: Engine, run: _Run, horizon: float, minimum: int, to_finish: int):
    """Decode-only steps of the batch as it stands, up to the `to_finish`-th (the first to
    finish a request; only when the run goes on past finishes, else the one before): the
    number of steps taken."""
    now = run.ends[-1]
    alive = run.alive
    whole = len(alive) == len(run.running)  # no finish yet: the run's own lists
    c = run.computed if whole else [run.computed[i] for i in alive]
    out = run.outputs if whole else [run.outputs[i] for i in alive]
    held = run.held if whole else [run.held[i] for i in alive]
    steps = min(to_finish if run.finishes else to_finish - 1, MAX_RUN_STEPS - run.steps)
    if steps < minimum or now >= horizon:
        return 0
    if math.isfinite(horizon) and steps * (30 + len(c)) > PYTHON_ROWS:  # (priced in numpy:
        # the rows in Python stop at the horizon) later steps read more KV, so take as long
        steps = min(steps, int((horizon - now) / engine.cost.decode_step(c)[2]) + 2)
    kv = engine.kv
    if kv.windowed is None:
        calls, new_per_step = _block_calls(c, held, kv.block_size, steps, kv.enable_caching)
    else:
        calls, new_per_step = _window_block_calls(c, held, kv, steps)
    taken = 0
    for k in range(1, steps + 1):  # no step may need more blocks than are free
        taken += new_per_step[k]
        if taken > run.free:
            steps = k - 1
            break
    if steps < minimum:
        return 0
    gpu_s, cpu_s, total_s, ends = _price_rows(engine, c, steps, now, horizon)
    steps = len(total_s)
    if steps < minimum:
        return 0
    batch = len(c)
    stop = (steps + 1) * batch
    for code in calls:
        if code >= stop:
            break
        k, j = divmod(code, batch)
        run.calls.append((alive[j], 1, c[j] + k - 1, out[j] + k - 1))
    used = list(itertools.accumulate(new_per_step[1 : steps + 1], initial=run.used))[1:]
    run.free -= used[-1] - run.used
    run.used = used[-1]
    first_end = ends[1]
    if run.measure_from == 0:  # every request measured
        run.gaps.extend([first_end - run.last_s[i] for i in alive])
        measured = batch
    else:
        ids = [run.running[i].request_id for i in alive]
        run.gaps.extend(
            [
                first_end - run.last_s[i]
                for i, r in zip(alive, ids, strict=True)
                if r >= run.measure_from
            ]
        )
        measured = sum(r >= run.measure_from for r in ids)
    if steps > 1 and measured:
        later = [b - a for a, b in itertools.pairwise(ends[1 : steps + 1])]
        run.gap_pairs.append((np.array(later), measured))
    end = ends[steps]
    if whole:
        run.computed = c = [x + steps for x in c]
        run.outputs = [x + steps for x in out]
        run.held = [max(h, kv.blocks_for(x)) for h, x in zip(held, c, strict=True)]
        run.last_s = [end] * batch
    else:
        for j, i in enumerate(alive):
            x = c[j] + steps
            run.computed[i] = x
            run.outputs[i] = out[j] + steps
            run.held[i] = max(held[j], kv.blocks_for(x))
            run.last_s[i] = end
    run.ends.extend(ends[1 : steps + 1])
    run.durations.extend(total_s)
    col = run.columns
    col["gpu_s"].extend(gpu_s)
    col["cpu_s"].extend(cpu_s)
    col["prefill_tokens"].extend([0] * steps)
    col["decode_tokens"].extend([batch] * steps)
    col["batch_size"].extend([batch] * steps)
    col["kv_used"].extend(used)
    col["num_running"].extend([batch] * steps)
    return steps


# Rows cost ~3 + 0.1 x batch µs each in plain Python and ~30 µs all together in numpy
# (measured here), so runs with steps x (30 + batch) up to this are priced in Python.
PYTHON_ROWS = 360


def _price_rows(engine: Engine, computed: list[int], steps: int, now: float, horizon: float):
    """(gpu_s, cpu_s, total_s, ends) of up to `steps` decode-only steps from `now`, as lists,
    stopping before the first that starts at or after `horizon`; ends[0] is `now`. Small runs
    are priced step by step in plain Python, larger ones in one numpy call: the same bits."""
    cost = engine.cost
    if steps * (30 + len(computed)) <= PYTHON_ROWS:
        gpu_s, cpu_s, total_s, ends = [], [], [], [now]
        for k in range(steps):
            if ends[-1] >= horizon:
                break
            gpu, cpu, total = cost.decode_step([x + k for x in computed])
            gpu_s.append(gpu)
            cpu_s.append(cpu)
            total_s.append(total)
            ends.append(ends[-1] + total)
        return gpu_s, cpu_s, total_s, ends
    first = np.array(computed, dtype=np.int64)
    gpu, cpu, total = cost.decode_run(first[None, :] + np.arange(steps, dtype=np.int64)[:, None])
    ends = np.cumsum(np.concatenate(([now], total)))
    steps = min(steps, int(np.searchsorted(ends[:steps], horizon, side="left")))
    return (
        gpu[:steps].tolist(),
        cpu[:steps].tolist(),
        total[:steps].tolist(),
        ends[: steps + 1].tolist(),
    )


def _block_calls(computed, held, block_size: int, steps: int, caching: bool):
    """The pool calls of a decode-only run, as codes step x batch + index (steps 1-based),
    ascending: a new block when a request's token needs one, a cached hash when its token
    fills one; and how many new blocks each step takes (entry k for step k)."""
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


def _window_block_calls(computed, held, kv: KVCacheManager, steps: int):
    """_block_calls where bounded windows make a request hold kv.blocks_for(tokens) blocks,
    which grows by at most one block a token and never shrinks: step k (1-based) takes the
    blocks a request's c + k tokens need beyond those it holds. The codes may include steps
    that change nothing (a block filled whose hash the window leaves out): the pool call
    there does nothing, as step by step."""
    batch = len(computed)
    block_size = kv.block_size
    ends = np.asarray(computed, dtype=np.int64)[None, :] + np.arange(1, steps + 1)[:, None]
    need = np.maximum(kv.windowed.blocks_for_each(ends), np.asarray(held)[None, :])
    new = np.diff(need, axis=0, prepend=np.asarray(held)[None, :])
    touched = new > 0
    if kv.enable_caching:  # the steps that fill a block
        touched |= ends % block_size == 0
    k, i = np.nonzero(touched)  # row-major: ascending step, then request
    new_per_step = [0, *new.sum(axis=1).tolist()]
    return ((k + 1) * batch + i).tolist(), new_per_step


def _apply(engine: Engine, run: _Run) -> list[Request]:
    """Make the planned bulk happen: the pool calls and finishes in order, then every
    request's state, the gaps between tokens, the step log's rows and the family's own
    per-step state. Returns the requests that finished (in the order freed)."""
    sched, kv = engine.scheduler, engine.kv
    running = run.running
    finished = []
    for i, n, computed, out in run.calls:
        req = running[i]
        if n == FINISH:  # as update_from_output finishes a request
            req.num_computed_tokens = run.computed[i]
            req.num_output_tokens = run.outputs[i]
            req.last_token_s = run.last_s[i]
            sched.finish(req, run.last_s[i])
            finished.append(req)
            continue
        req.num_computed_tokens = computed
        req.num_output_tokens = out
        if not kv.grow(req, n):
            raise RuntimeError(f"fast-forward: request {req.request_id} found no block")
    for i in run.alive:
        req = running[i]
        req.num_computed_tokens = run.computed[i]
        req.num_output_tokens = run.outputs[i]
        req.last_token_s = run.last_s[i]
    for i, first_s in run.first_s.items():
        running[i].first_token_s = first_s
    if finished:
        sched.running[:] = [running[i] for i in run.alive]
    itl = sched.itl
    itl.add(run.gaps)
    for gaps, count in run.gap_pairs:
        itl.add_each(gaps, count)
    ends = run.ends
    engine.steps.record_run(
        engine.replica,
        ends[:-1],
        [b - a for a, b in itertools.pairwise(ends)],
        run.columns,
        len(sched.waiting),
    )
    sched.advance_decode_state(run.steps)
    return finished
