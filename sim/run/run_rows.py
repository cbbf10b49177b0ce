"""A fast-forwarded run's state and the pieces of it that need none of its planning
(sim/run/fast_forward.py plans the steps): what fast-forward uses of a replica (Engine, Feed),
the run as planned so far (Run), the planned run applied (apply_run: its pool calls, finishes
and admissions in order, the requests' state, the gaps between tokens, the step log's rows),
and a decode-only stretch of the batch as it stands (decode_stretch: its rows priced by
price_rows, its pool calls listed by block_calls)."""

from __future__ import annotations

import bisect
import itertools
import math
from array import array
from typing import Protocol

import numpy as np

from sim.cost.step import CostModel
from sim.kv.manager import KVCacheManager
from sim.run.metrics import StepLog
from sim.schedulers.base import Scheduler
from sim.schedulers.lane import Lane
from sim.workload.request import Request


class Feed(Protocol):
    """A replica's arrivals, which it sends itself (sim/run/driver.py's _Feed)."""

    def next_s(self) -> float:
        """When the next request is sent (inf: every one has been)."""
        ...

    def send_until(self, t: float) -> None:
        """Send every request due at or before `t`, at its own time."""
        ...


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


FINISH = -1  # the n of a finish in a run's calls: (i, FINISH, computed, out)
ADMIT = -2  # (i, ADMIT, n, 0): waiting request i admitted with n new tokens


class Run:
    """The planned bulk: per-request state as it evolves, and what each step records. Request
    i is the i-th of the running list at the start, or the one the run admitted i-th from
    there on; `alive` is the batch (those indices, in running order), which gains a request
    when the run admits it and loses one when it finishes (when the engine lets runs go on
    past finishes: Engine.finish_inside_runs). The batch's state (computed, outputs, held,
    last_s, prompts, limits) is held by position in `alive`, deleted in place with it."""

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
            self.last_s = lane.last_token_s()
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
        self.finished_s: dict[int, float] = {}  # request index -> last token time (finished)
        # pool calls in step and request order: (i, n, computed, out) a grow by n tokens,
        # (i, FINISH, computed, out) request i finished (its blocks freed)
        self.calls: list[tuple[int, int, int, int]] = []
        self.free = engine.kv.num_free_blocks
        self.used = engine.kv.num_used_blocks
        self.unref: dict[int, int] = {}  # block id -> references dropped by finishes here
        self.ends = [now]
        self.durations: list[float] = []  # dt of each step: now + dt_1 + ... gives ends
        # the step log's rows, typed as StepLog's columns (record_run copies them whole)
        self.columns: dict[str, array] = {k: array(code) for k, code in ROW_FIELDS.items()}
        self.gaps: list[float] = []  # single gaps
        # gaps that several requests had, and how many each: a chunked step's decodes whose
        # last token came at its start, a decode-only stretch's steps after its first
        self.counted_gaps = array("d")
        self.gap_counts = array("q")
        self.measure_from = engine.scheduler.itl.measure_from
        self.kv = engine.kv
        # admission (Scheduler.admits_in_runs): the waiting queue at the start (and, with a
        # feed, the requests sent since), the next to admit, when each was scheduled
        self.waiting: list[Request] = []
        self.next_wait = 0
        self.num_waiting = len(engine.scheduler.waiting)  # after each step: its row's
        self.admitted_at: dict[int, float] = {}
        self.feed: Feed | None = None  # arrivals sent before each step (fast_forward's feed)
        self.next_arrival = math.inf  # the feed's next send

    @property
    def waiting_left(self) -> bool:
        return self.next_wait < len(self.waiting)

    @property
    def steps(self) -> int:
        return len(self.ends) - 1

    def pure_decode(self) -> bool:
        return not self.prefilling

    def finish(self, done: list[int]) -> None:
        """The requests at positions `done` (ascending) emitted their last token in the step
        just planned: out of the batch, their blocks freed after that step (the caller's row
        of that step counts them out of kv_used and num_running, as update_from_output
        does)."""
        kv, unref = self.kv, self.unref
        ref = kv.pool.ref
        freed = 0
        for j in done:
            i = self.alive[j]
            self.calls.append((i, FINISH, self.computed[j], self.outputs[j]))
            self.finished_s[i] = self.last_s[j]
            if not kv.enable_caching:  # no block is shared: all of them go free
                freed += self.held[j]
                continue
            blocks = kv.req_blocks[self.running[i].request_id]
            for block in blocks:  # shared prefix blocks go free with their last holder
                drop = unref.get(block, 0) + 1
                unref[block] = drop
                if ref[block] == drop:
                    freed += 1
            freed += self.held[j] - len(blocks)  # taken in this run: private
        self.free += freed
        self.used -= freed
        state = (self.alive, self.computed, self.outputs, self.held, self.last_s, self.prompts,
                 self.limits)  # fmt: skip
        for j in reversed(done):
            for values in state:
                del values[j]


ROW_FIELDS = {
    "gpu_s": "d", "cpu_s": "d", "prefill_tokens": "q", "decode_tokens": "q", "batch_size": "q",
    "kv_used": "q", "num_running": "q", "num_waiting": "q",
}  # fmt: skip


# A run's rows cost ~4 + 0.2 x batch + 0.5 x steps + 0.03 x batch x steps µs in plain
# Python (CostModel.decode_rows) and ~36 + 0.005 x batch x steps µs in one numpy call
# (decode_run), measured inside the yardstick's run (benchmarks/README.md, issue 24's twelfth
# step; a microbenchmark's warm numpy call takes ~20): runs below this bound are priced in
# Python.
PYTHON_ROWS = 1280


def python_rows(steps: int, batch: int) -> bool:
    """Whether `steps` decode-only steps of `batch` requests are priced in plain Python."""
    return steps * (20 + batch) + 8 * batch <= PYTHON_ROWS


def price_rows(engine: Engine, computed: list[int], steps: int, now: float, horizon: float):
    """(gpu_s, cpu_s, total_s, ends) of up to `steps` decode-only steps from `now`, as lists,
    stopping before the first that starts at or after `horizon`; ends[0] is `now`. Small runs
    are priced in plain Python (CostModel.decode_rows), larger ones in one numpy call
    (CostModel.decode_run): the same bits."""
    cost = engine.cost
    rows = cost.decode_rows(computed, steps) if python_rows(steps, len(computed)) else None
    if rows is None:  # one numpy call (its cpu_s is the same every step)
        first = np.array(computed, dtype=np.int64)[None, :]
        gpu, cpu, total = cost.decode_run(first + np.arange(steps, dtype=np.int64)[:, None])
        rows = gpu.tolist(), float(cpu[0]), total.tolist()
    gpu_s, cpu, total_s = rows
    ends = list(itertools.accumulate(total_s, initial=now))  # sequential sums, as np.cumsum
    if total_s and ends[-2] >= horizon:  # (ends rise) cut from the first step starting at it
        k = bisect.bisect_left(ends, horizon, 0, len(total_s))
        del gpu_s[k:], total_s[k:], ends[k + 1 :]
    return gpu_s, [cpu] * len(total_s), total_s, ends


def block_calls(computed, held, block_size: int, steps: int, caching: bool):
    """The pool calls of a decode-only run, as codes step x batch + index (steps 1-based),
    ascending: a new block when a request's token needs one, a cached hash when its token
    fills one; and how many new blocks each step takes (entry k for step k)."""
    batch = len(computed)
    new_per_step = [0] * (steps + 1)
    firsts = [h * block_size - c + 1 for c, h in zip(computed, held, strict=True)]
    if not caching and steps <= block_size:  # one new block at most per request
        codes = [(k if k > 1 else 1) * batch + i for i, k in enumerate(firsts) if k <= steps]
        codes.sort()
        for code in codes:
            new_per_step[code // batch] += 1
        return codes, new_per_step
    codes = []
    for i, k in enumerate(firsts):
        if k > steps and not caching:
            continue
        k = max(k, 1)  # the step whose token needs block h + 1
        while k <= steps:
            codes.append(k * batch + i)
            new_per_step[k] += 1
            k += block_size
        if caching:  # the steps that fill a block, whose hash is then cached
            k = block_size - computed[i] % block_size
            while k <= steps:
                codes.append(k * batch + i)
                k += block_size
    return sorted(set(codes)), new_per_step


def window_block_calls(computed, held, kv: KVCacheManager, steps: int):
    """block_calls where bounded windows make a request hold kv.blocks_for(tokens) blocks,
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


def apply_run(engine: Engine, run: Run) -> list[Request]:
    """Make the planned bulk happen: the pool calls and finishes in order, then every
    request's state, the gaps between tokens, the step log's rows and the family's own
    per-step state. Returns the requests that finished (in the order freed)."""
    sched, kv = engine.scheduler, engine.kv
    running = run.running
    finished = []
    # without a prefix cache, bounded windows or offload tiers a grow only takes blocks:
    # the grows between two admissions or finishes go as one (KVCacheManager.grow_all)
    plain = not kv.enable_caching and kv.windowed is None and kv.pool.lower is None
    pending: list[tuple[Request, int]] = []  # (request, its computed tokens after the grow)
    for i, n, computed, out in run.calls:
        req = running[i]
        if plain and n > 0:
            pending.append((req, computed + n))
            continue
        if pending:
            kv.grow_all(pending)
            pending = []
        if n == ADMIT:  # as _admit_waiting admits it (n: its new tokens)
            sched.admit_planned(req, computed, run.admitted_at[i])
            continue
        if n == FINISH:  # as update_from_output finishes a request
            req.num_computed_tokens = computed
            req.num_output_tokens = out
            req.last_token_s = run.finished_s[i]
            sched.finish(req, req.last_token_s)
            finished.append(req)
            continue
        req.num_computed_tokens = computed
        req.num_output_tokens = out
        if not kv.grow(req, n):
            raise RuntimeError(f"fast-forward: request {req.request_id} found no block")
    if pending:
        kv.grow_all(pending)
    for i, computed, out, last_s in zip(
        run.alive, run.computed, run.outputs, run.last_s, strict=True
    ):
        req = running[i]
        req.num_computed_tokens = computed
        req.num_output_tokens = out
        req.last_token_s = last_s
    for i, first_s in run.first_s.items():
        running[i].first_token_s = first_s
    if finished or run.admitted_at:
        sched.running[:] = [running[i] for i in run.alive]
    itl = sched.itl
    itl.add(run.gaps)
    itl.add_counted(run.counted_gaps, run.gap_counts)
    ends = np.array(run.ends)
    starts, durations = array("d"), array("d")  # (typed as StepLog's columns: copied whole)
    starts.frombytes(ends[:-1].tobytes())
    durations.frombytes(np.diff(ends).tobytes())  # end - start, as step by step
    engine.steps.record_run(engine.replica, starts, durations, run.columns)
    sched.advance_decode_state(run.steps)
    sched.ran_until(run.ends[-2], run.steps)
    return finished


def decode_stretch(engine: Engine, run: Run, horizon: float, minimum: int, most: int) -> int:
    """Decode-only steps of the batch as it stands (fast_forward.py's _decode_steps), at
    most `most` of them (to the first that finishes a request, or the one before, within
    MAX_RUN_STEPS), stopping before one that would lack blocks or start at or after
    `horizon`: the number of steps taken (none where fewer than `minimum` are possible).
    Their rows, pool calls, gaps between tokens and the batch's state go into `run`."""
    now = run.ends[-1]
    alive, c, out, held = run.alive, run.computed, run.outputs, run.held  # (by position)
    steps = most
    if steps < minimum or now >= horizon:
        return 0
    if math.isfinite(horizon) and steps > 4:  # (rows past the horizon would be priced for
        # nothing) no step is shorter than the cost without attention
        steps = min(steps, int((horizon - now) / engine.cost.decode_floor_s(c)) + 2)
    kv = engine.kv
    if kv.windowed is None:
        calls, new_per_step = block_calls(c, held, kv.block_size, steps, kv.enable_caching)
    else:
        calls, new_per_step = window_block_calls(c, held, kv, steps)
    taken = list(itertools.accumulate(new_per_step[1 : steps + 1]))  # blocks after step k
    if taken[-1] > run.free:  # no step may need more blocks than are free
        steps = bisect.bisect_right(taken, run.free)
    if steps < minimum:
        return 0
    gpu_s, cpu_s, total_s, ends = price_rows(engine, c, steps, now, horizon)
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
    used = [run.used + x for x in taken[:steps]]
    run.free -= used[-1] - run.used
    run.used = used[-1]
    first_end = ends[1]
    if run.measure_from == 0:  # every request measured
        prior = run.last_s
        if prior.count(prior[0]) == batch:  # (usually) the previous step gave every token
            run.counted_gaps.append(first_end - prior[0])
            run.gap_counts.append(batch)
        else:
            run.gaps.extend([first_end - t for t in prior])
        measured = batch
    else:
        ids = [run.running[i].request_id for i in alive]
        run.gaps.extend(
            [first_end - t for t, r in zip(run.last_s, ids, strict=True) if r >= run.measure_from]
        )
        measured = sum(r >= run.measure_from for r in ids)
    if steps > 1 and measured:
        run.counted_gaps.extend([b - a for a, b in itertools.pairwise(ends[1 : steps + 1])])
        run.gap_counts.extend(array("q", [measured]) * (steps - 1))
    end = ends[steps]
    ends_c = [x + steps for x in c]  # each request's computed tokens after the stretch
    # in place: the lists stay the ones _chunk_steps holds
    if kv.windowed is None:  # max(h, blocks_for(x)), inlined
        bs = kv.block_size
        held[:] = [h if h * bs >= x else -(-x // bs) for h, x in zip(held, ends_c, strict=True)]
    else:
        need = [kv.blocks_for(x) for x in ends_c]
        held[:] = [n if n > h else h for h, n in zip(held, need, strict=True)]
    c[:] = ends_c
    out[:] = [x + steps for x in out]
    run.last_s[:] = [end] * batch
    run.ends.extend(ends[1 : steps + 1])
    run.durations.extend(total_s)
    col = run.columns
    col["gpu_s"].extend(gpu_s)
    col["cpu_s"].extend(cpu_s)
    each = array("q", [batch]) * steps
    col["prefill_tokens"].extend(array("q", [0]) * steps)
    col["decode_tokens"].extend(each)
    col["batch_size"].extend(each)
    col["kv_used"].extend(used)
    col["num_running"].extend(each)
    col["num_waiting"].extend(array("q", [run.num_waiting]) * steps)
    return steps
