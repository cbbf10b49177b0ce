"""vLLM V1's scheduler: one token budget, running requests first, then waiting ones (FCFS).

Each step:
  1. running requests, oldest first, each gets min(remaining tokens, threshold, budget) new
     tokens; when the pool is out of blocks the newest running request is preempted (its blocks
     freed, num_computed_tokens reset, pushed to the front of the waiting queue), repeatedly,
     possibly the request itself;
  2. only if nothing was preempted: waiting requests in order while budget and max_num_seqs
     allow, each reusing its cached prefix and taking a chunk of what remains;
  3. after the step, every request whose computed tokens reached its known tokens samples one.
"""

from __future__ import annotations

from array import array
from collections import deque
from dataclasses import dataclass

from sim.kv_cache import KVCacheManager
from sim.request import Request, Status
from sim.settings import EngineSettings


@dataclass(slots=True)
class StepPlan:
    """What one step computes. Lists are aligned: one entry per scheduled request."""

    requests: list[Request]
    num_new_tokens: list[int]
    num_context_tokens: list[int]  # tokens with KV already in cache before this step
    num_prefill_tokens: int
    num_decode_tokens: int
    num_preempted: int

    @property
    def num_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode_tokens

    @property
    def batch_size(self) -> int:
        return len(self.requests)


class VllmV1Scheduler:
    def __init__(self, settings: EngineSettings, kv: KVCacheManager):
        self.kv = kv
        self.max_num_seqs = settings.max_num_seqs
        self.max_num_batched_tokens = settings.max_num_batched_tokens
        self.long_prefill_token_threshold = settings.long_prefill_token_threshold
        self.enable_chunked_prefill = settings.enable_chunked_prefill
        self.reserve_full_isl = settings.scheduler_reserve_full_isl
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.itl_gaps_s = array("d")  # every gap between consecutive tokens of a request
        self.num_preemptions = 0

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add_request(self, req: Request) -> None:
        self.waiting.append(req)

    def _chunk(self, num_new_tokens: int, budget: int) -> int:
        threshold = self.long_prefill_token_threshold
        if 0 < threshold < num_new_tokens:
            num_new_tokens = threshold
        return min(num_new_tokens, budget)

    def schedule(self, now: float) -> StepPlan:
        budget = self.max_num_batched_tokens
        reqs: list[Request] = []
        new_tokens: list[int] = []
        preempted_before = self.num_preemptions
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = self._chunk(req.num_tokens - req.num_computed_tokens, budget)
            if not self._allocate_or_preempt(req, n):
                break  # req preempted itself: nothing after it can run either
            reqs.append(req)
            new_tokens.append(n)
            budget -= n
            i += 1
        num_preempted = self.num_preemptions - preempted_before
        if num_preempted == 0:
            self._admit_waiting(now, budget, reqs, new_tokens)
        return self._plan(reqs, new_tokens, num_preempted)

    def _allocate_or_preempt(self, req: Request, n: int) -> bool:
        """Make room for n more tokens of running `req` by preempting the newest running
        requests; False if `req` itself had to go."""
        while self.kv.allocate_slots(req, n) is None:
            victim = self.running.pop()
            self._preempt(victim)
            if victim is req:
                return False
        return True

    def _admit_waiting(self, now: float, budget: int, reqs: list, new_tokens: list) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            hits, num_hit_tokens = self.kv.get_computed_blocks(req)
            n = req.num_tokens - num_hit_tokens
            if not self.enable_chunked_prefill and n > budget:
                break
            n = self._chunk(n, budget)
            if self.kv.allocate_slots(req, n, hits, num_hit_tokens, self.reserve_full_isl) is None:
                break
            self.waiting.popleft()
            self.running.append(req)
            req.status = Status.RUNNING
            req.num_computed_tokens = num_hit_tokens
            if req.num_cached_tokens is None:
                req.num_cached_tokens = num_hit_tokens
            if req.first_scheduled_s is None:
                req.first_scheduled_s = now
            reqs.append(req)
            new_tokens.append(n)
            budget -= n

    def _preempt(self, req: Request) -> None:
        self.kv.free(req)
        req.status = Status.PREEMPTED
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)

    def _plan(self, reqs, new_tokens, num_preempted) -> StepPlan:
        context = []
        num_decode = 0
        for req, n in zip(reqs, new_tokens, strict=True):
            context.append(req.num_computed_tokens)
            if n == 1 and req.num_output_tokens > 0:
                num_decode += 1
            req.num_computed_tokens += n
        return StepPlan(
            requests=reqs,
            num_new_tokens=new_tokens,
            num_context_tokens=context,
            num_prefill_tokens=sum(new_tokens) - num_decode,
            num_decode_tokens=num_decode,
            num_preempted=num_preempted,
        )

    def update_from_output(self, plan: StepPlan, end_s: float) -> list[Request]:
        """Sample a token for each request that caught up; return the requests that finished."""
        finished = []
        gaps = self.itl_gaps_s
        for req in plan.requests:
            if req.num_computed_tokens < req.num_tokens:
                continue  # a partial prefill: no token yet
            req.num_output_tokens += 1
            if req.first_token_s is None:
                req.first_token_s = end_s
            else:
                gaps.append(end_s - req.last_token_s)
            req.last_token_s = end_s
            if req.is_finished:
                req.status = Status.FINISHED
                req.finish_s = end_s
                self.kv.free(req)
                finished.append(req)
        if finished:
            self.running = [r for r in self.running if r.status is Status.RUNNING]
        return finished

    def check_invariants(self) -> None:
        self.kv.check_invariants()
        ids = [r.request_id for r in self.running] + [r.request_id for r in self.waiting]
        assert len(ids) == len(set(ids)), "a request is queued twice"
        assert len(self.running) <= self.max_num_seqs
        for req in self.running:
            assert req.status is Status.RUNNING
            assert req.num_computed_tokens <= req.num_tokens
            assert req.request_id in self.kv.req_blocks
        statuses = [req.status for req in self.waiting]
        # preempted requests go back to the front, new ones join the back
        assert statuses == sorted(statuses, key=lambda s: s is Status.WAITING), statuses
        for req in self.waiting:
            assert req.status in (Status.WAITING, Status.PREEMPTED)
            assert req.num_computed_tokens == 0
            assert req.request_id not in self.kv.req_blocks
