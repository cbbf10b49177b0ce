"""Driving engines through simulated time: a simpy driver (arrivals + one process per replica)
and a plain loop for one replica. The only events are arrivals and step ends.

Both follow the same rules: a request is sent at its arrival time, or later when `concurrency`
requests are already in flight (as `vllm bench serve --max-concurrency`); the router picks its
replica; a replica that has work steps back to back; requests that arrive during a step join the
waiting queue and are seen by the next step; requests that arrive exactly when a step ends are
seen by that next step too.

Routers (parallel.router):
  least_loaded       vLLM's data-parallel score, 4 x waiting + running, lowest first
  least_outstanding  fewest requests sent and not finished
  round_robin        replicas in turn
  prefix_aware       the replica whose prefix cache holds the longest prefix of the prompt
                     now, then fewest outstanding (an ideal cache-aware router: it sees every
                     replica's cache exactly)
Ties go to the lowest replica number.

With pipeline parallelism (pp > 1) a replica keeps up to pp micro-batches in flight: it starts
the next one when the previous has left the first stage (stage_s), and each finishes latency_s
after its start; a micro-batch schedules only requests that are not already in flight.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import simpy
from simpy.events import AnyOf

from sim.config import ROUTERS
from sim.errors import UserError
from sim.run.engine import Engine
from sim.workload.generate import Workload
from sim.workload.records import RequestRecords
from sim.workload.request import Request, Status

Progress = Callable[[float, int, int], None]  # (sim time, requests ended, requests total)


@dataclass(slots=True)
class RunOutcome:
    records: RequestRecords  # every request of the workload, one row each, in workload order
    end_s: float  # simulated time when the run stopped
    stopped_early: bool  # the time limit came before every request ended
    num_sent: int = 0  # requests sent to a replica (the rest had not arrived, or were held
    # back by the concurrency cap, when the clock stopped)
    in_flight_ids: frozenset[int] = frozenset()  # sent and not ended when the clock stopped
    finishing_ids: frozenset[int] = frozenset()  # of those, finished by the step that was
    # running at the stop: their replica has let them go (see _cut_at)

    @property
    def requests(self) -> list[Request]:
        """The rows as (content-less) Request objects, for tests and small tools."""
        return [self.records.request(i) for i in range(len(self.records))]

    @property
    def replica_of(self) -> dict[int, int]:
        """Request id -> the replica it was sent to."""
        return {i: int(r) for i, r in enumerate(self.records.replica) if r >= 0}


class _Dispatch:
    """Sends requests in order, holding them while `concurrency` are in flight."""

    def __init__(self, workload: Workload, engines: list[Engine], router: str = "least_loaded"):
        if router not in ROUTERS:
            raise ValueError(f"unknown router {router!r}")
        self.workload = workload
        self.engines = engines
        self.router = router
        self.num_sent = 0
        self.records = RequestRecords(workload.arrival_s, workload.prompt_len, workload.output_len)
        self.in_flight_requests: dict[int, Request] = {}  # sent and not ended
        self.next_index = 0
        self.in_flight = 0
        self.ended = 0
        self.limit = workload.concurrency
        self.last_free_s = 0.0  # when a finish last unblocked a full dispatcher

    @property
    def blocked(self) -> bool:
        return self.limit is not None and self.in_flight >= self.limit

    def next_send_s(self) -> float | None:
        """When the next request can be sent (None: all sent, or waiting for a free slot)."""
        if self.next_index >= len(self.workload) or self.blocked:
            return None
        return float(self.workload.arrival_s[self.next_index])

    def send(self, send_s: float) -> Engine | None:
        i = self.next_index
        self.next_index += 1
        req = self.workload.request(i)
        req.arrival_s = send_s  # TTFT counts from the send, as the benchmark client measures it
        engine = self.route(req)
        self.num_sent += 1
        self.records.replica[i] = engine.replica
        if engine.add_request(req):
            self.in_flight += 1
            self.in_flight_requests[i] = req
            return engine
        self.ended += 1  # rejected on arrival
        self.records.record(req)
        return None

    def route(self, req: Request) -> Engine:
        engines = self.engines
        if len(engines) == 1:
            return engines[0]
        match self.router:
            case "round_robin":
                return engines[self.num_sent % len(engines)]
            case "least_outstanding":
                return min(engines, key=lambda e: (e.outstanding, e.replica))
            case "prefix_aware":
                return min(
                    engines,
                    key=lambda e: (-e.cached_prefix_tokens(req), e.outstanding, e.replica),
                )
            case _:
                return min(engines, key=lambda e: (e.load, e.replica))

    def finished(self, reqs: list[Request], now: float) -> None:
        was_blocked = self.blocked
        self.in_flight -= len(reqs)
        self.ended += len(reqs)
        for req in reqs:
            self.records.record(req)
            del self.in_flight_requests[req.request_id]
        if was_blocked and not self.blocked:
            self.last_free_s = now

    def outcome(self, end_s: float) -> RunOutcome:
        finishing = set()
        for req in self.in_flight_requests.values():  # stopped by the time limit
            if _cut_at(req, end_s):
                finishing.add(req.request_id)
            self.records.record(req)
        return RunOutcome(
            self.records,
            end_s,
            self.ended < len(self.records),
            self.num_sent,
            frozenset(self.in_flight_requests),
            frozenset(finishing),
        )


def _cut_at(req: Request, end_s: float) -> bool:
    """A request in flight when the clock stopped at end_s, as of end_s. A replica applies a
    step when it starts, so the step running at the stop has already emitted its tokens (at its
    end, after end_s) and may have finished the request: take that token back and say it is
    still running. True when the request had finished in that step (its replica let it go)."""
    if req.last_token_s is None or req.last_token_s <= end_s:
        return False
    req.num_output_tokens -= 1
    req.last_token_s = None  # not needed after the run; before end_s, unknown here
    if req.first_token_s is not None and req.first_token_s > end_s:
        req.first_token_s = None
    finishing = req.status == Status.FINISHED
    if finishing:
        req.status, req.finish_s = Status.RUNNING, None
    return finishing


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
    d = _Dispatch(workload, engines, router)
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
            engine = d.send(env.now)
            if engine is not None and not wake[engine.replica].triggered:
                wake[engine.replica].succeed()
            _check_done()

    def ended(finished: list[Request]) -> None:
        if finished:
            d.finished(finished, env.now)
            if not slot_freed[0].triggered:
                slot_freed[0].succeed()
                slot_freed[0] = env.event()
            if progress is not None:
                progress(env.now, d.ended, total)
            _check_done()

    def replica(engine: Engine):
        while True:
            if not engine.has_work:
                wake[engine.replica] = env.event()
                yield wake[engine.replica]
            durations, finished = engine.advance(env.now, env.peek())
            if len(durations) == 1:
                yield env.timeout(durations[0])
            else:  # a fast-forwarded run: one timeout to its end if now + d can hit it
                delay = delay_to(env.now, durations)
                for dt in durations if delay is None else (delay,):
                    yield env.timeout(dt)
            ended(finished)
            send_s = d.next_send_s()
            if send_s is not None and send_s <= env.now:  # a send due now joins this step
                yield env.timeout(0)

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
    env.run(until=stop)
    return d.outcome(env.now)


def run_loop(workload: Workload, engine: Engine, until_s: float | None = None) -> RunOutcome:
    """The same simulation as run_simpy for one replica without pipeline parallelism."""
    if engine.pp > 1:
        raise ValueError("run_loop drives pp = 1 only; use run_simpy")
    d = _Dispatch(workload, [engine])
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
    return d.outcome(now)


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
        blocks = {b.block_id for bl in e.kv.req_blocks.values() for b in bl if b is not null}
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
