"""Driving a disaggregated deployment through simulated time: a prefill pool, a decode pool,
and the KV transfers between them (simpy; the only events are arrivals, step ends and
transfer ends).

A request's life, as vLLM's disaggregated serving (a proxy, NixlConnector) runs it:

  arrival -> prefill replica (router): queued, then its prompt computed in one or more steps;
             it samples a token the proxy throws away, and keeps its blocks (delayed free)
          -> decode replica (router): waits for free blocks for the prompt (first come, first
             served, while a sequence slot is free), reusing what its own prefix cache holds
          -> transfer over the link (sim/kv/transfer.py); each replica's link carries one
             transfer at a time; the prefill replica frees its blocks when it ends
          -> decode replica's waiting queue: its first step recomputes the last prompt token
             and samples the first output token (TTFT), then decodes as usual.

TTFT = queue (arrival -> first prefill step) + prefill (-> the prompt's last step ends)
     + decode wait (-> the decode replica has blocks) + transfer (-> the KV has arrived)
     + first decode (-> the first token).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np
import simpy

from sim.kv.transfer import Pair, transfer_window
from sim.run.dispatch import Dispatch, RunOutcome, route
from sim.run.driver import check_conservation, rarer_young_collections
from sim.run.engine import Engine
from sim.workload.generate import Workload
from sim.workload.records import STATUS_CODE, RequestRecords
from sim.workload.request import Request, Status

TTFT_PARTS = ("queue", "prefill", "decode_wait", "transfer", "first_decode")  # in order
TRANSFER_COLUMNS = (
    "prefill_replica",
    "decode_replica",
    "prefill_end_s",
    "decode_blocks_s",
    "transfer_start_s",
    "transfer_end_s",
    "kv_transfer_tokens",
    "kv_transfer_bytes",
)


class Transfers:
    """Per request: where it went and when its KV moved (NaN / -1: not yet)."""

    def __init__(self, n: int):
        self.prefill_replica = np.full(n, -1, dtype=np.int64)
        self.decode_replica = np.full(n, -1, dtype=np.int64)
        self.prefill_end_s = np.full(n, np.nan)
        self.decode_blocks_s = np.full(n, np.nan)
        self.transfer_start_s = np.full(n, np.nan)
        self.transfer_end_s = np.full(n, np.nan)
        self.kv_transfer_tokens = np.zeros(n, dtype=np.int64)
        self.kv_transfer_bytes = np.zeros(n, dtype=np.int64)
        self.prefills = np.zeros(n, dtype=np.int64)  # prompts finished on a prefill replica
        self.transfers = np.zeros(n, dtype=np.int64)  # transfers ended
        self.decodes = np.zeros(n, dtype=np.int64)  # answers finished on a decode replica

    def columns(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in TRANSFER_COLUMNS}


@dataclass(slots=True)
class _Pending:
    """A prefilled request waiting for blocks on its decode replica."""

    req: Request  # the request as the decode replica runs it (its record)
    copy: Request  # the prefill replica's copy, holding the blocks there
    source: Engine
    step_start_s: float
    step_end_s: float
    last_step_tokens: int  # prompt tokens computed in the step that finished the prompt


@dataclass(slots=True)
class DisaggOutcome:
    outcome: RunOutcome
    transfers: Transfers


def run_disagg(
    workload: Workload,
    prefill: list[Engine],
    decode: list[Engine],
    pair: Pair,
    num_layers: int,
    layerwise: bool,
    until_s: float | None = None,
    progress=None,
    router: str = "least_loaded",
) -> DisaggOutcome:
    env = simpy.Environment()
    total = len(workload)
    records = RequestRecords(workload.arrival_s, workload.prompt_len, workload.output_len)
    d = Dispatch(records, workload.concurrency, router)  # in flight: the decode-side request
    t = Transfers(total)
    pending: dict[int, deque[_Pending]] = {e.replica: deque() for e in decode}
    link_free_s = {e.replica: -math.inf for e in (*prefill, *decode)}  # each replica's NICs
    wake = {e.replica: env.event() for e in (*prefill, *decode)}
    handed = [0]  # requests handed to the decode pool: its round-robin turn
    slot_freed = [env.event()]
    all_done = env.event()
    max_len = min(e.max_model_len for e in decode)

    def poke(engine: Engine) -> None:
        if not wake[engine.replica].triggered:
            wake[engine.replica].succeed()

    def check_done() -> None:
        if d.num_ended == total and not all_done.triggered:
            all_done.succeed()

    def queued(engine: Engine) -> int:
        """Requests handed to a decode replica and waiting for its blocks."""
        return len(pending[engine.replica])

    def ended(req: Request, now: float) -> None:
        d.ended(req)
        if d.limit is not None and not slot_freed[0].triggered:  # an event only when one waits
            # for it: a pending event would cut the decode replicas' fast-forward horizon
            slot_freed[0].succeed()
            slot_freed[0] = env.event()
        if progress is not None:
            progress(now, d.num_ended, total)
        check_done()

    def arrivals():
        for i in range(total):
            while d.blocked:  # --max-concurrency
                yield slot_freed[0]
            send_s = float(workload.arrival_s[i])
            if send_s > env.now:
                yield env.timeout(send_s - env.now)
            req = workload.request(i)
            req.arrival_s = env.now
            copy = Request(
                req.request_id, env.now, req.prompt_len, 1, req.content_ids,
                req.content_block_tokens, req.priority, req.first_private_id,
            )  # fmt: skip
            engine = route(prefill, router, d.num_sent)
            d.sent(req, engine.replica)
            t.prefill_replica[i] = engine.replica
            if req.prompt_len + req.max_output_len > max_len:
                req.status = Status.REJECTED
                req.reject_reason = (
                    f"prompt {req.prompt_len} + output {req.max_output_len} tokens exceed the "
                    f"decode pool's max_model_len {max_len}"
                )
                ended(req, env.now)
                continue
            if not engine.add_request(copy):
                req.status, req.reject_reason = Status.REJECTED, copy.reject_reason
                ended(req, env.now)
                continue
            d.admitted(req)
            poke(engine)

    def idle(engine: Engine):
        while not engine.has_work:  # woken by new work (or by freed blocks: look again)
            wake[engine.replica] = env.event()
            yield wake[engine.replica]

    def stalled(engine: Engine, transfers: dict):
        """Nothing could start: the waiting requests need blocks that requests sending (or
        receiving) KV hold. Wait for a transfer to end (it pokes this replica)."""
        if not transfers:
            raise RuntimeError(f"replica {engine.replica} has work but scheduled nothing")
        wake[engine.replica] = env.event()
        yield wake[engine.replica]

    def prefill_replica(engine: Engine):
        while True:
            yield from idle(engine)
            start = env.now
            plan, cost = engine.start_step(start)
            if plan.batch_size == 0 and plan.num_preempted == 0:
                yield from stalled(engine, engine.scheduler.sending)
                continue
            yield env.timeout(cost.total_s)
            done = engine.finish_step(plan, cost, start, env.now)
            for copy in done:  # prompt computed: hand over to a decode replica
                n = plan.num_new_tokens[plan.requests.index(copy)]
                req = d.in_flight[copy.request_id]
                req.first_scheduled_s = copy.first_scheduled_s
                req.num_cached_tokens = copy.num_cached_tokens
                req.num_preemptions = copy.num_preemptions
                t.prefills[copy.request_id] += 1
                t.prefill_end_s[copy.request_id] = env.now
                target = route(decode, router, handed[0], queued=queued)
                handed[0] += 1
                t.decode_replica[copy.request_id] = target.replica
                records.replica[copy.request_id] = target.replica
                pending[target.replica].append(
                    _Pending(req, copy, engine, start, env.now, min(n, req.prompt_len))
                )
                admit(target)

    def admit(engine: Engine) -> None:
        """Blocks on `engine` for its pending requests, in order, while they fit."""
        queue = pending[engine.replica]
        sched = engine.scheduler
        while queue and len(sched.running) < sched.max_num_seqs:
            p = queue[0]
            tokens = sched.begin_receive(p.req)
            if tokens is None:
                break
            queue.popleft()
            i = p.req.request_id
            t.decode_blocks_s[i] = env.now
            plan = pair.plan(tokens)
            src, dst = p.source.replica, engine.replica
            # layer by layer, blocks found at once were reserved when the prefill began
            waited = env.now > p.step_end_s
            ready = env.now if waited or not layerwise else -math.inf
            start, end = transfer_window(
                plan, max(link_free_s[src], link_free_s[dst]), ready, p.step_start_s, p.step_end_s,
                min(1.0, p.last_step_tokens / plan.tokens) if plan.tokens else 1.0,
                num_layers, layerwise,
            )  # fmt: skip
            link_free_s[src] = link_free_s[dst] = end - plan.latency_s
            t.transfer_start_s[i], t.transfer_end_s[i] = start, end
            t.kv_transfer_tokens[i], t.kv_transfer_bytes[i] = plan.tokens, plan.bytes_total
            env.process(arrive(p, engine, end - env.now))

    def arrive(p: _Pending, engine: Engine, delay: float):
        yield env.timeout(delay)
        i = p.req.request_id
        p.source.scheduler.release(p.copy)
        t.transfers[i] += 1
        poke(p.source)  # freed blocks may let it admit more
        engine.scheduler.finish_receive(p.req)
        poke(engine)

    def decode_replica(engine: Engine):
        sched = engine.scheduler
        while True:
            yield from idle(engine)
            if sched.running or sched.ready:
                durations, finished = engine.advance(env.now, env.peek())
                for dt in durations:
                    yield env.timeout(dt)
            else:  # only waiting requests (preempted here): can one start?
                start = env.now
                plan, cost = engine.start_step(start)
                if plan.batch_size == 0:
                    yield from stalled(engine, sched.receiving)
                    continue
                yield env.timeout(cost.total_s)
                finished = engine.finish_step(plan, cost, start, env.now)
            for req in finished:
                t.decodes[req.request_id] += 1
                ended(req, env.now)
            admit(engine)  # finished requests freed blocks and sequence slots

    env.process(arrivals())
    for e in prefill:
        env.process(prefill_replica(e))
    for e in decode:
        env.process(decode_replica(e))
    stop = all_done if until_s is None else simpy.AnyOf(env, [all_done, env.timeout(until_s)])
    with rarer_young_collections():
        env.run(until=stop)
    for e in [*prefill, *decode]:  # requests in flight as they stand (a time limit)
        e.scheduler.sync_requests()
    outcome = d.outcome(env.now)
    return DisaggOutcome(outcome, t)


def check_disagg_conservation(
    result: DisaggOutcome, prefill: list[Engine], decode: list[Engine]
) -> dict:
    """Nothing lost across the pools: every finished request was prefilled once, its KV sent
    once and its answer decoded once; every request in flight is held by exactly one replica
    of each pool it is in (a prefill replica until its KV is sent, a decode replica from its
    blocks there); every KV block in use, in either pool, is held by a request in flight (all
    returned when none is). A violation is a simulator bug and raises."""
    outcome, t = result.outcome, result.transfers
    problems = []
    finished = np.flatnonzero(outcome.records.status == STATUS_CODE[Status.FINISHED])
    for name, counts in (("prefilled", t.prefills), ("sent", t.transfers), ("decoded", t.decodes)):
        wrong = finished[counts[finished] != 1]
        if len(wrong):
            problems.append(f"{len(wrong)} finished requests not {name} exactly once")
    if (t.prefills > 1).any() or (t.transfers > t.prefills).any() or (t.decodes > 1).any():
        problems.append("a request prefilled, sent or decoded more than once")
    if not outcome.stopped_early and outcome.in_flight_ids:
        problems.append(f"{len(outcome.in_flight_ids)} requests left over without a time limit")
    if not outcome.stopped_early and any(e.scheduler.sending for e in prefill):
        problems.append("a prefill replica still holds KV it never sent")
    for pool in (prefill, decode):
        held: set[int] = set()
        for e in pool:
            mine = {r.request_id for r in e.scheduler.held_requests()}
            if held & mine:
                problems.append(f"replica {e.replica} holds another replica's requests")
            held |= mine
    if problems:
        raise RuntimeError(f"conservation violated: {'; '.join(problems)}")
    # per pool: blocks in use belong to requests in flight; the tally over the whole run
    tallies = []
    for pool in (prefill, decode):
        tallies.append(_pool_check(outcome, pool, check_conservation))
    return tallies[1] | {"prefilled": int(t.prefills.sum()), "kv_sent": int(t.transfers.sum())}


def _pool_check(outcome: RunOutcome, pool: list[Engine], check) -> dict:
    """The single-pool check (requests held by one replica, blocks held by requests in
    flight) on one pool: requests in flight elsewhere are not its concern."""
    held = set().union(*({r.request_id for r in e.scheduler.held_requests()} for e in pool))
    view = RunOutcome(
        outcome.records, outcome.end_s, True, outcome.num_sent, outcome.in_flight_ids,
        outcome.finishing_ids | (outcome.in_flight_ids - held),
    )  # fmt: skip
    return check(view, pool)
