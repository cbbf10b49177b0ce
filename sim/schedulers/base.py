"""What every scheduler family offers the engine (Scheduler) and the state they share
(SchedulerBase, StepPlan).

A scheduler owns a replica's queues and its KV cache manager. The engine calls, per step:

    plan = scheduler.schedule(now)             which requests compute how many new tokens
    ... the cost model prices the plan; the step runs ...
    finished = scheduler.update_from_output(plan, end_s)
                                               tokens sampled, finished requests freed

and, between steps, add_request / admission_error (arrivals), has_work, and the fast-forward
questions decode_run / chunked_run / advance_decode_state. Disaggregated serving adds
release (prefill side) and begin_receive / finish_receive (decode side). Every family
(sim/schedulers/vllm_v1.py, vllm_v0.py, sglang.py, trtllm.py, teaching.py) subclasses
SchedulerBase and decides only what schedule() runs; the engine picks one by
settings.scheduler (sim/run/engine.py). As vLLM V1's SchedulerInterface, the interface is
the contract; SchedulerBase is the shared implementation.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from sim.engines.settings import EngineSettings
from sim.engines.speculative import accepted, drafts_per_step, profile
from sim.kv.manager import KVCacheManager
from sim.schedulers.lane import Lane
from sim.workload.records import ItlLog
from sim.workload.request import Request, Status


@dataclass(slots=True)
class StepPlan:
    """What one step computes. Lists are aligned: one entry per scheduled request."""

    requests: list[Request]
    num_new_tokens: list[int]
    num_context_tokens: list[int]  # tokens with KV already in cache before this step
    num_prefill_tokens: int
    num_decode_tokens: int
    num_preempted: int
    swap_bytes: int = 0  # KV moved over PCIe this step (vLLM V0 swap preemption)
    padding_context: tuple[int, ...] = ()  # finished rows a static batch still computes
    preemptions: tuple[int, ...] = ()  # each request's num_preemptions when planned
    spec_drafts: tuple[int, ...] = ()  # speculative decoding: drafts each row verifies
    load_s: float = 0.0  # KV loaded back from the offload tiers before this step runs
    rows: object = None  # vLLM V1: each row's index in the scheduler's lane (lane.py)
    split: tuple | None = None  # vLLM V1's lane: (prefill q, prefill c, decode contexts as an
    # int64 array), CostModel.batch_cost's split of the rows made already

    @property
    def num_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode_tokens

    @property
    def batch_size(self) -> int:
        return len(self.requests)


@dataclass(frozen=True, slots=True)
class SchedulerOptions:
    """What a run decides per replica, beside the engine's settings."""

    spec_rng: np.random.Generator | None = None  # speculative decoding: draft acceptance draws
    measure_from: int = 0  # requests with smaller ids are warm-up: their token gaps not kept
    sends_kv: bool = False  # a disaggregated prefill replica: blocks held until the KV is sent
    pp: int = 1  # pipeline stages of the replica


class Scheduler(Protocol):
    """The contract between a replica's engine (and drivers) and its scheduler family."""

    kv: KVCacheManager
    waiting: deque[Request]
    running: list[Request]
    itl: ItlLog
    max_num_seqs: int
    plans_ahead: bool  # planning a step ahead (PlanAhead: then last_start, sees_next too)

    @property
    def has_work(self) -> bool: ...

    def add_request(self, req: Request) -> None: ...

    def admission_error(self, req: Request) -> str | None: ...

    def schedule(self, now: float) -> StepPlan: ...

    def update_from_output(self, plan: StepPlan, end_s: float) -> list[Request]: ...

    def held_requests(self) -> list[Request]: ...

    def decode_run(self) -> bool: ...

    def chunked_run(self) -> bool: ...

    def advance_decode_state(self, num_steps: int) -> None: ...

    def finish_inside_runs(self) -> bool: ...

    def finish(self, req: Request, end_s: float) -> None: ...

    def sync_requests(self) -> None: ...

    def admits_in_runs(self, batch: int) -> bool: ...

    def decode_run_of(self, batch: int, waiting: bool) -> bool: ...

    def admit_planned(self, req: Request, n: int, now: float) -> None: ...

    def ran_until(self, last_start: float, steps: int) -> None: ...

    def running_lane(self) -> Lane | None: ...

    def check_invariants(self) -> None: ...


class SchedulerBase:
    """State and bookkeeping every family shares; subclasses decide what each step runs."""

    plans_ahead = False  # families that plan a step ahead say so (sim/schedulers/ahead.py)

    def __init__(
        self,
        settings: EngineSettings,
        kv: KVCacheManager,
        bytes_per_block: int = 0,
        options: SchedulerOptions = SchedulerOptions(),
    ):
        self.kv = kv
        self.max_num_seqs = settings.max_num_seqs
        self.max_num_batched_tokens = settings.max_num_batched_tokens
        self.long_prefill_token_threshold = settings.long_prefill_token_threshold
        self.enable_chunked_prefill = settings.enable_chunked_prefill
        self.reserve_full_isl = settings.scheduler_reserve_full_isl
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.itl = ItlLog(options.measure_from)  # gaps between consecutive tokens
        self.spec_k = drafts_per_step(settings)  # drafts per decoding request (0: off)
        self.spec_probs = profile(settings) if self.spec_k else None
        self.spec_rng = options.spec_rng
        self.num_preemptions = 0
        self.priority = settings.policy == "priority"
        # disaggregated serving (sim/run/disagg.py). A prefill replica keeps a finished request's
        # blocks until its KV has been sent (vLLM's delayed free): request id -> request.
        self.sending: dict[int, Request] | None = {} if options.sends_kv else None
        # A decode replica holds blocks of requests whose KV is on its way (receiving) or
        # has arrived (ready: scheduled before the waiting queue, see VllmV1Scheduler).
        self.receiving: dict[int, Request] = {}
        self.ready: deque[Request] = deque()

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.ready)

    def held_requests(self) -> list[Request]:
        """Every request this scheduler holds (sent to it and not ended); a disaggregated
        replica's requests sending or receiving KV too."""
        sending = self.sending.values() if self.sending else ()
        return [*self.waiting, *self.running, *sending, *self.receiving.values(), *self.ready]

    # ---- disaggregated prefill / decode (sim/run/disagg.py) -------------------------------------
    def release(self, req: Request) -> None:
        """A prefill replica: `req`'s KV has been sent; free its blocks."""
        del self.sending[req.request_id]
        self.kv.free(req, finished=True)

    def begin_receive(self, req: Request) -> int | None:
        """A decode replica: blocks for `req`'s prompt, whose KV comes from a prefill replica
        (None: the pool has not enough free blocks now). Blocks its prefix cache already holds
        are reused; returns the tokens left to receive."""
        hits, num_hit_tokens = self.kv.get_computed_blocks(req)
        n = req.prompt_len - num_hit_tokens
        if self.kv.allocate_slots(req, n, hits, num_hit_tokens) is None:
            return None
        self.receiving[req.request_id] = req
        return n

    def finish_receive(self, req: Request) -> None:
        """The KV has arrived: `req` is ready; its first step recomputes the last prompt token
        to sample the first output token (vLLM: a full prompt hit recomputes one token)."""
        del self.receiving[req.request_id]
        self.ready.append(req)

    def add_request(self, req: Request) -> None:
        if self.priority:
            self._insert_by_priority(req)
        else:
            self.waiting.append(req)

    def admission_error(self, req: Request) -> str | None:
        """Why this engine can never run `req` (it is then refused on arrival), or None."""
        return None

    @staticmethod
    def _rank(req: Request) -> tuple:
        return (req.priority, req.arrival_s, req.request_id)

    def _insert_by_priority(self, req: Request) -> None:
        key = self._rank(req)
        i = len(self.waiting)
        while i > 0 and self._rank(self.waiting[i - 1]) > key:
            i -= 1
        self.waiting.insert(i, req)

    def _pick_victim(self) -> Request:
        """Take the request to preempt out of the running list: the newest (fcfs), or the
        one with the largest (priority, arrival)."""
        if not self.priority:
            return self.running.pop()
        victim = max(self.running, key=self._rank)
        self.running.remove(victim)
        return victim

    def _chunk(self, num_new_tokens: int, budget: int) -> int:
        threshold = self.long_prefill_token_threshold
        if 0 < threshold < num_new_tokens:
            num_new_tokens = threshold
        return min(num_new_tokens, budget)

    def _start(self, req: Request, num_hit_tokens: int, now: float) -> None:
        """Move the head of the waiting queue into the running batch."""
        if self.waiting[0] is req:
            self.waiting.popleft()
        else:
            self.waiting.remove(req)
        self.running.append(req)
        req.status = Status.RUNNING
        req.num_computed_tokens = num_hit_tokens
        if req.num_cached_tokens is None:
            req.num_cached_tokens = num_hit_tokens
        if req.first_scheduled_s is None:
            req.first_scheduled_s = now

    def _admitted(self, req: Request, num_hit_tokens: int, n: int, now: float, reqs, new_tokens):
        """Start waiting `req` with `n` new tokens in this step's plan."""
        self._start(req, num_hit_tokens, now)
        req.num_drafts = 0
        reqs.append(req)
        new_tokens.append(n)

    def _preempt(self, req: Request, front: bool = True) -> None:
        """Recompute preemption: free the blocks, back to the waiting queue (its front, or
        its back with front=False; by priority under policy=priority)."""
        self.kv.free(req)
        req.status = Status.PREEMPTED
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.num_preemptions += 1
        if self.priority:
            self._insert_by_priority(req)
        elif front:
            self.waiting.appendleft(req)
        else:
            self.waiting.append(req)

    def _plan(self, reqs, new_tokens, num_preempted, swap_bytes: int = 0) -> StepPlan:
        context = []
        num_decode = 0
        spec = self.spec_k > 0
        for req, n in zip(reqs, new_tokens, strict=True):
            c = req.num_computed_tokens
            context.append(c)
            if req.num_output_tokens > 0 and n == 1 + (req.num_drafts if spec else 0):
                num_decode += n  # a decode: one token, or one and the drafts it verifies
            req.num_computed_tokens = c + n
        return StepPlan(
            requests=reqs,
            num_new_tokens=new_tokens,
            num_context_tokens=context,
            num_prefill_tokens=sum(new_tokens) - num_decode,
            num_decode_tokens=num_decode,
            num_preempted=num_preempted,
            swap_bytes=swap_bytes,
            preemptions=tuple([r.num_preemptions for r in reqs]),
            spec_drafts=tuple([r.num_drafts for r in reqs]) if spec else (),
        )

    def _emit(self, req: Request, end_s: float) -> None:
        req.num_output_tokens += 1
        if req.first_token_s is None:
            req.first_token_s = end_s
        elif req.request_id >= self.itl.measure_from:
            self.itl.add([end_s - req.last_token_s])
        req.last_token_s = end_s

    def update_from_output(self, plan: StepPlan, end_s: float) -> list[Request]:
        """Sample a token for each request that caught up; return the requests that finished."""
        finished = []
        gaps = []  # one per request and step: a step's tokens reach the client together
        measure_from = self.itl.measure_from
        drafts = plan.spec_drafts
        rows = zip(
            plan.requests, plan.preemptions, plan.num_context_tokens, plan.num_new_tokens,
            strict=True,
        )  # fmt: skip
        for req, marks, context, new in rows:
            out = req.num_output_tokens
            if context + new < req.prompt_len + out or req.num_preemptions != marks:
                # a partial prefill (no token yet; with pipeline parallelism, an earlier chunk
                # landing after the last one was scheduled), or preempted since it was planned
                continue
            if drafts and req.num_drafts:  # verified: the accepted drafts and one more
                a = accepted(self.spec_rng, self.spec_probs, [req.num_drafts])[0]
                out += a
                req.num_computed_tokens = context + 1 + a  # rejected drafts' KV is dropped
            out += 1
            req.num_output_tokens = out
            if req.first_token_s is None:
                req.first_token_s = end_s
            elif req.request_id >= measure_from:
                gaps.append(end_s - req.last_token_s)
            req.last_token_s = end_s
            if out >= req.max_output_len:
                self.finish(req, end_s)
                finished.append(req)
        self.show_gaps(gaps)
        for req in finished:  # a few, out of a running list of hundreds
            self.running.remove(req)
        return finished

    def finish(self, req: Request, end_s: float) -> None:
        """`req` emitted its last token at `end_s`: finished, its blocks freed (a prefill
        replica's kept until its KV is sent). The caller takes it out of the running list
        (update_from_output here, fast_forward's runs past finishes)."""
        req.status = Status.FINISHED
        req.finish_s = end_s
        if self.sending is None:
            self.kv.free(req, finished=True)
        else:  # freed once its KV has been sent
            self.sending[req.request_id] = req

    def show_gaps(self, gaps: list[float]) -> None:
        """One step's inter-token gaps, as the client sees them (every step's tokens streamed
        at its end; vLLM V0 multi-step before 0.6.2 shows a window's at the window's end)."""
        self.itl.add(gaps)

    # ---- fast-forward (sim/run/fast_forward.py) -------------------------------------------------
    def decode_run(self) -> bool:
        """Whether the next step, by this family's rules, decodes one token of every running
        request and does nothing else, and would keep doing so while no request arrives,
        finishes or lacks a block. Families that cannot say keep the default: never."""
        return False

    def advance_decode_state(self, num_steps: int) -> None:
        """Apply what `num_steps` such steps change in the family's own state."""

    def ran_until(self, last_start: float, steps: int) -> None:
        """A fast-forwarded run of `steps` steps ran, the last starting at `last_start`: for
        families that keep when steps started (those that plan a step as the one before
        starts: sim/schedulers/ahead.py). Others keep the default: nothing to do."""

    def finish_inside_runs(self) -> bool:
        """Whether a fast-forwarded run may go on past a step that finishes requests: the
        steps after it are the same run without them (nothing waits for the slot or the
        blocks they free, and the family keeps no state of its own per finish). Families
        that cannot say keep the default: never."""
        return False

    def admits_in_runs(self, batch: int) -> bool:
        """Whether a fast-forwarded run with `batch` requests running may admit waiting
        requests itself, as this family's step would (fast_forward.py plans vLLM V1's
        admission: each waiting request in order while budget, sequence slots and blocks
        allow, one chunk, no prefix lookup), and the run may go on past finishes (as
        finish_inside_runs) whether or not requests wait: the run plans their use of the
        sequence slot and blocks a finish frees. Families that cannot say keep the default:
        never."""
        return False

    def decode_run_of(self, batch: int, waiting: bool) -> bool:
        """decode_run() as it holds with `batch` requests running and requests waiting or
        not, as a run that admits plans them (families that admit in runs)."""
        return False

    def admit_planned(self, req: Request, n: int, now: float) -> None:
        """Admit `req`, the head of the waiting queue, with `n` new tokens in a step starting
        at `now`, as this family's step does (a fast-forwarded run's admission, replayed)."""
        raise NotImplementedError

    def sync_requests(self) -> None:
        """Write back to the Request objects whatever counters the family holds apart from
        them (vLLM V1's lane, sim/schedulers/lane.py): the driver calls it when a run ends,
        before it reads requests in flight. Families that keep none: nothing to do."""

    def running_lane(self) -> Lane | None:
        """The running requests as arrays (sim/schedulers/lane.py), where the family keeps
        them so and the lane holds their counters apart from the objects: fast-forward reads
        them there, and writes every request back itself. None: the objects hold them."""
        return None

    def chunked_run(self) -> bool:
        """Whether nothing but the running requests' own progress decides the next steps
        while a prefill is in progress, as fast_forward.py replays them (vLLM V1's one budget
        over running requests in order). Families that cannot say keep the default: never."""
        return False

    def check_invariants(self) -> None:
        self.kv.check_invariants()
        ids = [r.request_id for r in self.running] + [r.request_id for r in self.waiting]
        assert len(ids) == len(set(ids)), "a request is queued twice"
        assert len(self.running) <= self.max_num_seqs
        for req in self.running:
            assert req.status is Status.RUNNING
            assert req.num_computed_tokens <= req.num_tokens
            assert req.request_id in self.kv.req_blocks
        for req in self.waiting:
            assert req.status in (Status.WAITING, Status.PREEMPTED)
            assert req.num_computed_tokens == 0
            assert req.request_id not in self.kv.req_blocks
        for req in self.ready:
            assert req.status is Status.WAITING and req.request_id in self.kv.req_blocks
