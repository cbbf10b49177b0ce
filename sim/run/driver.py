"""Driving engines through simulated time: a simpy driver (arrivals + one process per replica)
and a plain loop for one replica. The only events are arrivals and step ends.

Both follow the same rules: a request is sent at its arrival time, or later when `concurrency`
requests are already in flight (as `vllm bench serve --max-concurrency`); the router picks its
replica; a replica that has work steps back to back; requests that arrive during a step join the
waiting queue and are seen by the next step; requests that arrive exactly when a step ends are
seen by that next step too.

With a server front end (workload.frontend_ms, frontend_us_per_token) a sent request first
waits its turn there, one request at a time, and reaches its replica when the front end is
done with it; it holds its client's slot all the while, and its TTFT counts from the send.
A calibrated deployment's frontend_ms (Workload.transit_s) delays every request alike after
that, in parallel.

The router, the concurrency cap and the record of each request are sim/run/dispatch.py's,
shared with the disaggregated driver.

With pipeline parallelism (pp > 1) a replica keeps up to pp micro-batches in flight: it starts
the next one when the previous has left the first stage (stage_s), and each finishes latency_s
after its start; a micro-batch schedules only requests that are not already in flight.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator
from contextlib import contextmanager

import simpy
from simpy.events import AnyOf

from sim.errors import UserError
from sim.run.dispatch import Dispatch, Progress, RunOutcome, route
from sim.run.engine import Engine
from sim.workload.generate import Workload
from sim.workload.records import RequestRecords
from sim.workload.request import Request, Status


class _Sender:
    """Sends the workload's requests in order, holding them while `concurrency` are in flight."""

    def __init__(self, workload: Workload, engines: list[Engine], router: str = "least_loaded"):
        self.workload = workload
        self.engines = engines
        records = RequestRecords(workload.arrival_s, workload.prompt_len, workload.output_len)
        self.d = Dispatch(records, workload.concurrency, router)
        self.next_index = 0
        self.last_free_s = 0.0  # when a finish last unblocked a full dispatcher

    @property
    def ended(self) -> int:
        return self.d.num_ended

    def next_send_s(self) -> float | None:
        """When the next request can be sent (None: all sent, or waiting for a free slot)."""
        if self.next_index >= len(self.workload) or self.d.blocked:
            return None
        return float(self.workload.arrival_s[self.next_index])

    def take(self, send_s: float) -> Request:
        """The next request, sent by its client at `send_s`."""
        i = self.next_index
        self.next_index += 1
        req = self.workload.request(i)
        req.arrival_s = send_s  # TTFT counts from the send, as the benchmark client measures it
        return req

    def send(self, send_s: float) -> Engine | None:
        return self.hand_over(self.take(send_s))

    def hand_over(self, req: Request) -> Engine | None:
        """`req` to its replica (None: refused there)."""
        engine = route(self.engines, self.d.router, self.d.num_sent, req)
        self.d.sent(req, engine.replica)
        if engine.add_request(req):
            self.d.admitted(req)
            return engine
        self.d.ended(req)  # rejected on arrival
        return None

    def finished(self, reqs: list[Request], now: float) -> None:
        was_blocked = self.d.blocked
        for req in reqs:
            self.d.ended(req)
        if was_blocked and not self.d.blocked:
            self.last_free_s = now


class _Feed:
    """A lone replica's arrivals, sent by the replica itself (Engine.takes_arrivals: one
    replica, no concurrency cap, no time limit) before each step that starts at or after them,
    so fast-forwarded runs go on past arrivals. Each is sent when the arrivals process would
    send it: one timeout after the previous send, t + (arrival - t), or at t when it is due
    already (the same floats, so the same requests' times)."""

    def __init__(self, sender: _Sender):
        self.sender = sender
        self.last_s = 0.0  # the previous send (the arrivals process starts at 0)

    def next_s(self) -> float:
        due = self.sender.next_send_s()
        if due is None:
            return math.inf
        t = self.last_s
        return t + (due - t) if due > t else t

    def send_until(self, t: float) -> None:
        while (send_s := self.next_s()) <= t:
            self.sender.send(send_s)
            self.last_s = send_s


YOUNG_GC_THRESHOLD = 20_000  # allocations between two collections of the young generation


@contextmanager
def rarer_young_collections() -> Iterator[None]:
    """The cyclic garbage collector's young generation collected every YOUNG_GC_THRESHOLD
    container allocations instead of every 700 (Python's default) while a run simulates, and
    the thresholds restored after: steps create and drop many small containers and a run
    holds a few long young lists, which each collection visits (about 3% of the yardstick's
    time at 700, measured with gc.callbacks). No result depends on when garbage is collected."""
    young, middle, old = gc.get_threshold()
    if not young or young >= YOUNG_GC_THRESHOLD:  # (collection off, or rarer already)
        yield
        return
    gc.set_threshold(YOUNG_GC_THRESHOLD, middle, old)
    try:
        yield
    finally:
        gc.set_threshold(young, middle, old)


def run_simpy(
    workload: Workload,
    engines: list[Engine],
    until_s: float | None = None,
    progress: Progress | None = None,
    router: str = "least_loaded",
    lockstep: bool = False,
) -> RunOutcome:
    """Simulate the workload on the engines. With `lockstep` the replicas step together, each
    step lasting as long as the slowest replica's (vLLM's data-parallel ranks of an MoE model,
    whose expert layers span every rank)."""
    env = simpy.Environment()
    d = _Sender(workload, engines, router)
    _finishes_inside_runs(engines, workload, until_s)
    feed = None
    front = workload.frontend_s  # None: each request reaches its engine when sent
    front_free = [0.0]  # when the front end is done with the requests handed to it so far
    transit = workload.transit_s  # then each request's own delay, in parallel
    direct = front is None and not transit
    if (
        direct
        and len(engines) == 1
        and engines[0].pp == 1
        and engines[0].finish_inside_runs  # (no concurrency cap, no time limit)
        and engines[0].takes_arrivals
    ):
        feed = _Feed(d)
    wake = {e.replica: env.event() for e in engines}  # triggered when an idle replica gets work
    slot_freed = [env.event()]
    all_done = env.event()
    total = len(workload)

    def arrivals():
        while d.next_index < total:
            send_s = d.next_send_s()
            if send_s is None:  # every slot busy: wait for a finish
                yield slot_freed[0]
                continue
            if send_s > env.now:
                yield env.timeout(send_s - env.now)
            if direct:
                handed(d.send(env.now))
                continue
            req = d.take(env.now)  # into the front end, one request at a time
            d.d.in_front_end += 1
            done_s = env.now
            if front is not None:
                done_s = front_free[0] = max(env.now, front_free[0]) + float(front[req.request_id])
            env.process(front_end(req, done_s + transit))

    def front_end(req: Request, done_s: float):
        yield env.timeout(done_s - env.now)
        d.d.in_front_end -= 1
        handed(d.hand_over(req))

    def handed(engine: Engine | None) -> None:
        if engine is not None and not wake[engine.replica].triggered:
            wake[engine.replica].succeed()
        _check_done()

    def ended(finished: list[Request]) -> None:
        if finished:
            d.finished(finished, env.now)
            if slot_freed[0].callbacks:  # the arrivals wait for a slot (else no event: an
                # event pending now would be a horizon at now for fast-forward)
                slot_freed[0].succeed()
                slot_freed[0] = env.event()
            if progress is not None:
                progress(env.now, d.ended, total)
            _check_done()

    def wait(durations: list[float]):
        """The steps' time: one timeout, or for a fast-forwarded run one to its end where
        now + d can hit it (else one per step)."""
        if len(durations) == 1:
            yield env.timeout(durations[0])
            return
        delay = delay_to(env.now, durations)
        for dt in durations if delay is None else (delay,):
            yield env.timeout(dt)

    def replica(engine: Engine):
        while True:
            if not engine.has_work:
                wake[engine.replica] = env.event()
                yield wake[engine.replica]
            durations, finished = engine.advance(env.now, env.peek())
            yield from wait(durations)
            ended(finished)
            send_s = d.next_send_s()
            if send_s is not None and send_s <= env.now:  # a send due now joins this step
                yield env.timeout(0)

    def fed_replica(engine: Engine):
        # the lone replica sends its own arrivals (feed), waiting for the next when idle
        while True:
            feed.send_until(env.now)
            _check_done()  # (the last requests may have been rejected on arrival)
            if not engine.has_work:
                send_s = feed.next_s()
                if send_s == math.inf:
                    return
                yield env.timeout(delay_until(env.now, send_s))
                continue
            durations, finished = engine.advance(env.now, math.inf, feed)
            yield from wait(durations)
            ended(finished)

    def together():
        while True:
            if not any(e.has_work for e in engines):
                shared = env.event()
                for e in engines:
                    wake[e.replica] = shared
                yield shared
            start, started = env.now, []
            for e in engines:
                if e.has_work:
                    plan, cost = e.start_step(start)
                    if plan.batch_size == 0 and plan.num_preempted == 0:
                        raise RuntimeError(f"engine {e.replica} has work but scheduled nothing")
                    started.append((e, plan, cost))
            yield env.timeout(max(cost.total_s for _, _, cost in started))
            for e, plan, cost in started:
                ended(e.finish_step(plan, cost, start, env.now))
            send_s = d.next_send_s()
            if send_s is not None and send_s <= env.now:
                yield env.timeout(0)

    def pipeline(engine: Engine):
        in_flight = [0]
        landed = [env.event()]  # triggered when a micro-batch leaves the last stage
        last_land = [0.0]  # when the micro-batch started before this one leaves the pipeline

        def micro_batch(plan, cost, start_s):
            # stages are first in, first out: a short micro-batch behind a long one leaves
            # the last stage only after it, plus its own time there
            land_s = max(start_s + cost.latency_s, last_land[0] + cost.gpu_s / engine.pp)
            last_land[0] = land_s
            yield env.timeout(land_s - start_s)
            finished = engine.finish_step(plan, cost, start_s, env.now)
            in_flight[0] -= 1
            if not landed[0].triggered:
                landed[0].succeed()
                landed[0] = env.event()
            ended(finished)

        while True:
            if not engine.has_work and in_flight[0] == 0:
                wake[engine.replica] = env.event()
                yield wake[engine.replica]
            if in_flight[0] >= engine.pp:
                yield landed[0]
                continue
            plan, cost = engine.start_step(env.now)
            if plan.batch_size == 0:
                if in_flight[0] == 0 and plan.num_preempted == 0:
                    raise RuntimeError(f"engine {engine.replica} scheduled nothing at {env.now}")
                if in_flight[0]:  # everything runnable is in flight: wait for a landing
                    yield AnyOf(env, [landed[0], wake[engine.replica]])
                    wake[engine.replica] = env.event()
                continue
            in_flight[0] += 1
            env.process(micro_batch(plan, cost, env.now))
            yield env.timeout(cost.stage_s)

    def _check_done():
        if d.ended == total and not all_done.triggered:
            all_done.succeed()

    if feed is not None:  # the replica sends its arrivals itself
        env.process(fed_replica(engines[0]))
    else:
        env.process(arrivals())
        if lockstep and len(engines) > 1:
            if any(e.pp > 1 for e in engines):
                raise UserError(
                    "lock-stepped data-parallel replicas with pipeline stages are not modelled"
                )
            env.process(together())
        else:
            for engine in engines:
                env.process(pipeline(engine) if engine.pp > 1 else replica(engine))
    stop = all_done if until_s is None else simpy.AnyOf(env, [all_done, env.timeout(until_s)])
    with rarer_young_collections():
        env.run(until=stop)
    for engine in engines:  # requests in flight as they stand (a time limit)
        engine.scheduler.sync_requests()
    return d.d.outcome(env.now)


def run_loop(workload: Workload, engine: Engine, until_s: float | None = None) -> RunOutcome:
    """The same simulation as run_simpy for one replica without pipeline parallelism."""
    if engine.pp > 1:
        raise ValueError("run_loop drives pp = 1 only; use run_simpy")
    if workload.frontend_s is not None or workload.transit_s:
        raise ValueError("run_loop sends requests straight to the engine; use run_simpy")
    d = _Sender(workload, [engine])
    _finishes_inside_runs([engine], workload, until_s)
    now = 0.0

    def send_until(t: float) -> None:
        while (send_s := d.next_send_s()) is not None and max(send_s, d.last_free_s) <= t:
            d.send(max(send_s, d.last_free_s))

    while d.ended < len(workload) and (until_s is None or now < until_s):
        send_until(now)
        if engine.has_work:
            horizon = math.inf if until_s is None else until_s
            if (send_s := d.next_send_s()) is not None:
                horizon = min(horizon, max(send_s, d.last_free_s))
            durations, finished = engine.advance(now, horizon)
            end = now
            for dt in durations:  # the same sums, in the same order, as the driver above
                end += dt
            send_until(end)  # sends during the step; this step's finishers still count
            now = end
            d.finished(finished, now)
        elif (send_s := d.next_send_s()) is not None:
            now = max(send_s, now)
        else:
            break
    engine.scheduler.sync_requests()  # requests in flight as they stand (a time limit)
    return d.d.outcome(now)


def _finishes_inside_runs(engines: list[Engine], workload: Workload, until_s) -> None:
    """Let fast-forwarded runs go on past finishes where a finish is no event to anyone else:
    no concurrency cap holds a request back for the slot it frees, and no time limit can stop
    the clock between a finish inside a run and the run's end (the driver records a run's
    finishes at its end: Dispatch.ended, the conservation check's tally at a stop)."""
    free = workload.concurrency is None and until_s is None
    for engine in engines:
        engine.finish_inside_runs = free


def delay_until(now: float, t: float) -> float:
    """A delay d >= 0 with now + d == t in floating point (t >= now), so a process waiting
    from `now` wakes at `t` itself: t - now, nudged up where the subtraction rounded down."""
    d = t - now
    while now + d < t:
        d = math.nextafter(d, math.inf)
    return d


def delay_to(now: float, durations) -> float | None:
    """A delay d with now + d equal in floating point to now + dt_1 + ... + dt_n summed in
    order, as step-by-step simulation reaches it (simpy adds a delay to now); None when no d
    hits it exactly (rounding ties can skip a value), and the steps must be waited one by one."""
    end = now
    for dt in durations:
        end += dt
    d = end - now
    while now + d < end:
        d = math.nextafter(d, math.inf)
    if now + d > end:
        d = math.nextafter(d, -math.inf)
    return d if now + d == end else None


def check_conservation(outcome: RunOutcome, engines: list[Engine]) -> dict:
    """Nothing lost: every request of the workload is finished, rejected, in flight (sent and
    held by exactly one replica) or not yet sent, and only a time limit leaves any in the last
    two; every KV block in use is held by a request in flight (all returned when none is).
    Checked at the end of every run; returns the tally the summary reports. A violation is a
    simulator bug and raises."""
    counts = outcome.records.counts()
    total = len(outcome.records)
    finished, rejected = counts[Status.FINISHED], counts[Status.REJECTED]
    in_flight = len(outcome.in_flight_ids)
    unsent = total - outcome.num_sent
    tally = {
        "arrived": outcome.num_sent,
        "finished": finished,
        "rejected": rejected,
        "in_flight": in_flight,
        "in_flight_running": counts[Status.RUNNING],
        "in_flight_waiting": counts[Status.WAITING] - unsent + counts[Status.PREEMPTED],
        "not_sent": unsent,
    }
    problems = []
    if outcome.num_sent != finished + rejected + in_flight:
        problems.append("sent != finished + rejected + in flight")
    if not outcome.stopped_early and (in_flight or unsent):
        problems.append("requests left over without a time limit")
    held: set[int] = set()
    for e in engines:
        mine = {r.request_id for r in e.scheduler.held_requests()}
        if held & mine or not mine <= outcome.in_flight_ids:
            problems.append(f"replica {e.replica} holds requests not in flight, or another's")
        held |= mine
        null = e.kv.pool.null_block
        blocks = {b for bl in e.kv.req_blocks.values() for b in bl if b != null}
        if not set(e.kv.req_blocks) <= mine or len(blocks) != e.kv.num_used_blocks:
            problems.append(
                f"replica {e.replica}: {e.kv.num_used_blocks} KV blocks in use, "
                f"{len(blocks)} held by its {len(mine)} requests in flight"
            )
    if held | outcome.finishing_ids != outcome.in_flight_ids:
        problems.append(f"{len(outcome.in_flight_ids - held)} requests in flight on no replica")
    if problems:
        raise RuntimeError(f"conservation violated: {'; '.join(problems)} ({tally})")
    return tally
