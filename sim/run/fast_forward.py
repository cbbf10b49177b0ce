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
               it has no such run;
  admitting    (vLLM V1 without a prefix cache: Scheduler.admits_in_runs) requests waiting at
               the start: each step, after the running requests, admits them in order as
               _admit_waiting does while budget, sequence slots and blocks allow (each a chunk
               of min(its tokens, threshold, budget) in cdiv(n, block_size) new blocks, no
               prefix to look up); a chunked run follows, and once the queue is empty,
               decode-only steps as above. The admissions are replayed in apply_run in their
               place among the pool calls (Scheduler.admit_planned). Where the family plans a
               step ahead (async scheduling, sim/schedulers/ahead.py), a step admits only what
               its plan saw (_seen); a step whose plan saw none of the waiting requests decodes.

    step k's end      t_k = t_{k-1} + dt_k   (sequential sums, as the driver adds them)
    request tokens    a token when a request's computed tokens reach its known ones; its gap
                      is t_k minus its previous token's time
    blocks            the pool's own calls (a new block, a hash of a block just filled), made
                      in step order and request order, as step by step makes them; a request
                      holds KVCacheManager.blocks_for(its tokens) blocks (fewer than one per
                      block_size tokens where a release bounds windowed layers)

The bulk stops before the first step that would lack blocks, start at or after `horizon`, or
exceed MAX_RUN_STEPS, before one that would admit nothing while requests wait and nothing
prefills (no slot or blocks for them: the usual paths decide), and before the first that
would finish a request unless a finish is no event to anyone: when the driver says so (no
concurrency cap waits for the slot, no time limit; Engine.finish_inside_runs) and the family
does (nothing waits for the slot or the blocks: Scheduler.finish_inside_runs, vLLM V1 and
TensorRT-LLM; or the run admits the waiting requests itself, and so plans their use of them),
the bulk goes on past the step that finishes requests, without them: they are let go as
update_from_output does (their blocks freed after that step's pool calls, in running order;
the step's kv_used and num_running rows count them out), and the steps after it are planned
and priced without them (a decode-only stretch with requests waiting ends there: the next
step admits). The step after the bulk (when it starts before `horizon`) is simulated normally.
With a `feed` (a lone replica, no concurrency cap, no time limit, a family that admits in
runs: Engine.takes_arrivals) arrivals are no event either: the requests due before a step
starts are sent then (at the times the driver's arrivals process would send them) and join
the run's waiting list, decode-only stretches stopping at the next arrival (_fed_steps).
Every figure is the same float step-by-step simulation computes (tests/test_fast_forward.py).
"""

from __future__ import annotations

import itertools
import operator

import numpy as np

from sim.kv.manager import cdiv
from sim.run.run_rows import (
    ADMIT,
    Engine,
    Feed,
    Run,
    apply_run,
    decode_stretch,
)
from sim.schedulers.base import Scheduler

MIN_DECODE_STEPS = 2  # shorter decode-only runs are stepped alone
MAX_RUN_STEPS = 2048  # bounds the steps x batch matrices of one run


def fast_forward(
    engine: Engine, now: float, horizon: float, feed: Feed | None = None
) -> tuple[list, list] | None:
    """Simulate a bulk of steps from `now` and the step after it: (their durations, the
    requests they finished); None (nothing changed) when no bulk is possible. With `feed`
    (the family admits in runs: Engine.takes_arrivals), the requests arriving before each
    step are sent then and the bulk goes on past them (_fed_steps)."""
    sched = engine.scheduler
    running = sched.running
    if feed is not None:
        feed.send_until(now)
        if not sched.admits_in_runs(len(running)):  # (the family's own steps, for now)
            horizon = min(horizon, feed.next_s())  # an arrival is an event again: the run
            feed = None  # stops before the next
    if not running or horizon <= now:
        return None
    lane = sched.running_lane()  # None: the Request objects hold the counters
    if lane is None:  # a prefill in progress is usually the newest request's
        newest = running[-1]
        chunked = newest.prompt_len + newest.num_output_tokens - newest.num_computed_tokens != 1
    else:
        chunked = int(lane.t[-1]) - int(lane.c[-1]) != 1
    admit = feed is not None  # (a run past arrivals admits them as they come)
    if not (admit or (sched.chunked_run() if chunked else sched.decode_run())):
        if not (sched.waiting and sched.admits_in_runs(len(running))):
            return None
        admit = True  # the run starts with the step that admits the waiting requests
    # a finish is an event to no one (the driver: Engine.finish_inside_runs) and, by the
    # family's rules, nothing waits for its slot and blocks, or the run admits the waiting
    # requests itself (a run that admits plans their use of them)
    finishes = engine.finish_inside_runs and (admit or sched.finish_inside_runs())
    if not (chunked or finishes or admit):  # a finish within MIN_DECODE_STEPS: no decode run
        if lane is not None:
            if np.count_nonzero(lane.limit - lane.out <= MIN_DECODE_STEPS):
                return None
        else:
            for r in running:
                if r.max_output_len - r.num_output_tokens <= MIN_DECODE_STEPS:
                    return None
    run = Run(engine, now, finishes, lane)
    if admit:
        run.waiting = list(sched.waiting)
    if feed is not None:
        run.feed = feed
        _fed_steps(engine, run, horizon)
    elif admit:
        _chunk_steps(engine, run, horizon)
        if (
            run.alive
            and run.pure_decode()
            and not run.waiting_left
            and sched.decode_run_of(len(run.alive), False)
        ):
            _decode_steps(engine, run, horizon, minimum=1)
    elif not run.pure_decode():
        if not chunked:
            return None
        _chunk_steps(engine, run, horizon)
        if run.alive and run.pure_decode() and sched.decode_run():
            _decode_steps(engine, run, horizon, minimum=1)
    else:
        _decode_steps(engine, run, horizon, minimum=1 if finishes else MIN_DECODE_STEPS)
    if run.steps == 0:
        return None
    finished = apply_run(engine, run)
    engine.num_fast_forwarded_steps += run.steps
    durations = run.durations
    end = run.ends[-1]
    if feed is not None:
        feed.send_until(end)
    if end < horizon and engine.has_work:  # the step the bulk stopped before, as usual
        dt, last = engine.step(end)
        return [*durations, dt], finished + last
    return durations, finished


def _chunk_steps(engine: Engine, run: Run, horizon: float) -> None:
    """vLLM V1 steps while a prefill is in progress or a request waits, one at a time in plain
    Python: running requests in order, each min(its remaining tokens,
    long_prefill_token_threshold, the budget left) new tokens, then (a run that admits) the
    waiting requests in order while budget, sequence slots and blocks allow, each
    min(its tokens, threshold, budget); stops before a step that would finish a request (unless
    the run goes on past finishes), lack blocks, or (requests still waiting) neither prefill
    nor admit."""
    rows: list[tuple] = []  # the steps' log rows (ROW_FIELDS' order), added when it stops
    try:
        _chunk_loop(engine, run, horizon, rows)
    finally:
        if rows:
            for values, column in zip(zip(*rows, strict=True), run.columns.values(), strict=True):
                column.extend(values)


def _chunk_loop(engine: Engine, run: Run, horizon: float, rows: list[tuple]) -> None:
    """_chunk_steps' steps, each step's log row appended to `rows`."""
    sched, kv, cost = engine.scheduler, engine.kv, engine.cost
    block_size, caching = kv.block_size, kv.enable_caching
    windowed = kv.windowed is not None  # then a request holds kv.blocks_for(tokens) blocks
    threshold = sched.long_prefill_token_threshold
    admits_at = -1  # the batch size admits_in_runs last said yes to
    # the batch's state by position (Run): aliases, kept valid (Run.finish deletes in place)
    alive, c, out, held = run.alive, run.computed, run.outputs, run.held
    prompt, limit, last_s = run.prompts, run.limits, run.last_s
    prefilling = run.prefilling  # (a request not in it decodes: one known token to compute)
    plain = not windowed and not run.measure_from  # (the decode pass's conditions)
    ends = run.ends  # (extended in place: run.steps is len(ends) - 1)
    # the decode pass's fewest tokens left to a finish among its `margin_k` decodes, less one
    # for each step since (each gives every decode a token). Worked out again when their
    # count changes, after a step without the pass and after one that finished requests
    # (-1): else they are the same requests (a prefill catching up adds one, an admission
    # adds a prefill after them)
    margin = margin_k = -1
    while len(ends) <= MAX_RUN_STEPS and alive and (prefilling or run.waiting_left):
        start = ends[-1]
        if start >= horizon:
            return
        if run.waiting and len(alive) != admits_at:
            if not sched.admits_in_runs(len(alive)):
                return  # a run that admits, grown past what it plans well
            admits_at = len(alive)
        if start >= run.next_arrival:  # (inf without a feed)
            _deliver(sched, run, start)
        budget = sched.max_num_batched_tokens
        # the step's batch in running order: positions and new tokens; as the cost model
        # splits it (CostModel.batch_cost: one new token is a decode), chunks and decodes;
        # pool calls, and the grows among them (position, new tokens)
        batch, new_tokens, pre_q, pre_c, dec_c, calls, grows, done = [], [], [], [], [], [], [], []
        new_blocks = num_decode = 0  # (decodes as SchedulerBase._plan counts them)
        k = len(alive) - len(prefilling)  # the decodes, when they all come first (usually)
        rest = range(len(alive))
        if plain and 0 < k < budget and prefilling.issuperset(alive[k:]):
            # the decodes in one pass: each its one token (a decoding request has out > 0)
            dec_c = c[:k]
            if k != margin_k:
                margin, margin_k = min(map(operator.sub, limit[:k], out[:k])), k
            if margin <= 1:  # a finish among them
                if not run.finishes:
                    return  # the step after the bulk
                done = [j for j in range(k) if out[j] + 1 >= limit[j]]
            # a pool call where the token takes a block (blocks_for(ci + 1), inlined) or fills one
            touched = (
                [j for j, ci in enumerate(dec_c) if (ci + block_size) // block_size > held[j]]
                if not caching
                else [
                    j
                    for j, ci in enumerate(dec_c)
                    if (ci + block_size) // block_size > held[j] or not (ci + 1) % block_size
                ]
            )
            for j in touched:
                ci = dec_c[j]
                calls.append((alive[j], 1, ci, out[j]))
                grows.append((j, 1))
                new_blocks += max((ci + block_size) // block_size - held[j], 0)
            batch, new_tokens = list(range(k)), [1] * k
            num_decode = k
            budget -= k
            rest = range(k, len(alive))
        else:
            k, margin_k = 0, -1  # (the decodes get their tokens below, one by one)
        for j in rest:
            i, ci = alive[j], c[j]
            if i in prefilling:
                n = prompt[j] + out[j] - ci
                if 0 < threshold < n:
                    n = threshold
                if n > budget:
                    n = budget
                if n == 0:
                    continue
            else:  # decoding: its one known token (the budget left is at least one)
                n = 1
            end = ci + n
            if end == prompt[j] + out[j] and out[j] + 1 >= limit[j]:
                if not run.finishes:
                    return  # a finish: the step after the bulk
                done.append(j)
            more = (kv.blocks_for(end) if windowed else -(-end // block_size)) - held[j]
            if more > 0 or (caching and end // block_size > ci // block_size):
                calls.append((i, n, ci, out[j]))
                grows.append((j, n))
                if more > 0:
                    new_blocks += more
            if n == 1:
                dec_c.append(ci)
                if out[j] > 0:
                    num_decode += 1
            else:
                pre_q.append(n)
                pre_c.append(ci)
            batch.append(j)
            new_tokens.append(n)
            budget -= n
            if budget == 0:
                break
        if new_blocks > run.free:
            return  # a preemption: the step after the bulk
        if run.waiting_left:
            admitted = _admissions(sched, run, budget, run.free - new_blocks, block_size)
            if admitted is None:
                return  # an admitted request would finish in its first step: the usual paths
            if not admitted and run.pure_decode() and _seen(sched, run, run.next_wait):
                return  # nothing to admit for now (no slot, no blocks): the usual paths
            for req, n, blocks in admitted:
                i, j = len(run.running), len(alive)
                run.running.append(req)
                alive.append(i)
                c.append(0)
                out.append(req.num_output_tokens)
                prompt.append(req.prompt_len)
                limit.append(req.max_output_len)
                held.append(blocks)
                last_s.append(req.last_token_s)
                prefilling.add(i)
                run.admitted_at[i] = start
                batch.append(j)
                new_tokens.append(n)
                if n == prompt[j] + out[j] and out[j] + 1 >= limit[j]:
                    done.append(j)  # (a run past finishes: _admissions)
                if n == 1:
                    dec_c.append(0)
                    if out[j] > 0:
                        num_decode += 1
                else:
                    pre_q.append(n)
                    pre_c.append(0)
                calls.append((i, ADMIT, n, 0))
                new_blocks += blocks
            run.next_wait += len(admitted)
            run.num_waiting -= len(admitted)
        gpu_s, cpu_s, total_s = cost.step_times(pre_q, pre_c, dec_c, len(batch))  # batch_cost's
        end_s = start + total_s
        for j, n in grows:
            need = kv.blocks_for(c[j] + n) if windowed else -(-(c[j] + n) // block_size)
            if need > held[j]:
                held[j] = need
        run.calls.extend(calls)
        run.free -= new_blocks
        run.used += new_blocks
        shared = 0  # measured tokens whose previous one came at the step's start (its gap)
        measure_from = run.measure_from
        tokens = k
        if k:  # the decode pass's requests: a token each, all measured
            margin -= 1
            prior = last_s[:k]
            shared = prior.count(start)
            if shared < k:
                run.gaps.extend([end_s - t for t in prior if t != start])
            c[:k] = [x + 1 for x in c[:k]]
            out[:k] = [x + 1 for x in out[:k]]
            last_s[:k] = [end_s] * k
        for j, n in zip(batch[k:], new_tokens[k:], strict=True):
            tokens += n
            ci = c[j] + n
            c[j] = ci
            if ci == prompt[j] + out[j]:  # caught up: a token (and from now on a decode)
                i = alive[j]
                if out[j] == 0:
                    run.first_s[i] = end_s
                    prefilling.discard(i)
                else:
                    if i in prefilling:
                        prefilling.discard(i)
                    if not measure_from or run.running[i].request_id >= measure_from:
                        if last_s[j] == start:
                            shared += 1
                        else:
                            run.gaps.append(end_s - last_s[j])
                out[j] += 1
                last_s[j] = end_s
        if shared:
            run.counted_gaps.append(end_s - start)
            run.gap_counts.append(shared)
        ends.append(end_s)
        run.durations.append(total_s)
        if done:  # (the row counts them out: kv_used and num_running after the step)
            run.finish(done)
            margin_k = -1
        rows.append(
            (gpu_s, cpu_s, tokens - num_decode, num_decode, len(batch), run.used, len(alive),
             run.num_waiting)
        )  # fmt: skip


def _fed_steps(engine: Engine, run: Run, horizon: float) -> None:
    """A run past arrivals: the requests due before each step are sent and join the waiting
    queue; steps admit them (_chunk_steps) and the decode-only stretches between (while none
    waits) stop at the next arrival. Stops where a step would need the usual paths (short of
    blocks, nothing to admit for now), at MAX_RUN_STEPS, or when the replica runs out of
    work."""
    sched = engine.scheduler
    run.next_arrival = run.feed.next_s()  # (only _deliver sends while the run goes on)
    while run.steps < MAX_RUN_STEPS and run.alive:
        before = run.steps
        _deliver(sched, run, run.ends[-1])
        waiting = run.waiting_left
        if not run.pure_decode() or (waiting and not sched.decode_run_of(len(run.alive), True)):
            _chunk_steps(engine, run, horizon)
        elif sched.decode_run_of(len(run.alive), waiting):  # (waiting: no slot for them yet)
            _decode_steps(engine, run, min(horizon, run.next_arrival), minimum=1)
        if run.steps == before:
            return


def _deliver(sched: Scheduler, run: Run, t: float) -> None:
    """The requests due at or before `t` sent (the feed's), the ones queued joining the
    run's waiting list."""
    if t < run.next_arrival:  # (inf without a feed)
        return
    queued = len(sched.waiting)
    run.feed.send_until(t)
    run.next_arrival = run.feed.next_s()
    added = len(sched.waiting) - queued
    if added:
        run.waiting.extend(itertools.islice(sched.waiting, queued, None))
        run.num_waiting += added


def _admissions(sched: Scheduler, run: Run, budget: int, free: int, block_size: int):
    """The waiting requests a step admits after its running requests, as vLLM V1's
    _admit_waiting does without a prefix cache: [(request, new tokens, blocks)], in order;
    None when one would emit its last token in this step and the run stops before finishes
    (the step after the bulk)."""
    threshold = sched.long_prefill_token_threshold
    reserve = sched.reserve_full_isl
    slots = sched.max_num_seqs - len(run.alive)
    admitted = []
    for k, req in enumerate(run.waiting[run.next_wait :], run.next_wait):
        if budget <= 0 or slots <= 0 or not _seen(sched, run, k):
            break
        tokens = req.prompt_len + req.num_output_tokens  # all to compute: no prefix hit
        n = threshold if 0 < threshold < tokens else tokens
        if n > budget:
            n = budget
        blocks = cdiv(n, block_size)
        # allocate_slots fails (no more admissions this step) short of its blocks, or with
        # scheduler_reserve_full_isl short of the blocks of all its tokens
        if (cdiv(tokens, block_size) if reserve and tokens > n else blocks) > free:
            break
        if n == tokens and req.num_output_tokens + 1 >= req.max_output_len and not run.finishes:
            return None
        admitted.append((req, n, blocks))
        budget -= n
        free -= blocks
        slots -= 1
    return admitted


def _seen(sched: Scheduler, run: Run, k: int) -> bool:
    """Whether the step starting at the run's last end sees its k-th waiting request, as
    PlanAhead.visible decides where the family plans a step ahead (sim/schedulers/ahead.py):
    the step is planned as the one before it started (the scheduler's last, for the run's
    first step), and requests sent after that plan are added at the next step's start; False
    past the list. The list is in arrival order (FCFS), so the first request not seen ends
    the step's admissions, as _admit_waiting's."""
    if k >= len(run.waiting):
        return False
    if not sched.plans_ahead:
        return True
    req = run.waiting[k]
    ends = run.ends
    t = sched.last_start
    if len(ends) > 2 or (len(ends) == 2 and t is not None):
        return req.arrival_s < ends[-2]
    if len(ends) == 2:  # the run's first step saw all (an idle engine plans as requests come):
        return req.arrival_s <= ends[0]  # what was sent by its start (Feed.send_until: <=)
    return sched.sees_next(req)


def _decode_steps(engine: Engine, run: Run, horizon: float, minimum: int) -> None:
    """Decode-only steps, priced in one vectorised call (see the module docstring); when the
    run goes on past finishes, one such call per stretch between two steps that finish
    requests."""
    while run.alive:
        to_finish = min(map(operator.sub, run.limits, run.outputs))
        most = min(to_finish if run.finishes else to_finish - 1, MAX_RUN_STEPS - run.steps)
        steps = decode_stretch(engine, run, horizon, minimum, most)
        if steps < to_finish:
            return  # stopped before a finish, at the horizon, short of blocks or MAX_RUN_STEPS
        ends = zip(run.outputs, run.limits, strict=True)
        run.finish([j for j, (o, m) in enumerate(ends) if o == m])
        col = run.columns  # the stretch's last row counts them out
        col["kv_used"][-1] = run.used
        col["num_running"][-1] = len(run.alive)
        if run.waiting_left:
            return  # a slot freed, requests waiting: the next step admits (_fed_steps)
        minimum = 1
