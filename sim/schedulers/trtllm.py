"""TensorRT-LLM's in-flight batching scheduler.

Each step mixes generation (decode) and context (prefill) requests under two limits,
max_batch_size requests and max_num_tokens tokens. Requests already in flight go first, in
the order they started; then new requests, first come first served. Without chunked context
(the 1.0 default) a prompt runs whole in one step, so a prompt longer than max_num_tokens is
refused on arrival; with it, a prompt takes what is left of the step's tokens.

The capacity scheduler decides who may start:
  GUARANTEED_NO_EVICT  a request starts only if the pool can hold its whole sequence (prompt +
                       max output, prefix-cache hits not credited) on top of what every running
                       request may still need, so nothing is ever evicted;
  MAX_UTILIZATION      a request starts if this step's tokens fit; when a running request
                       cannot get a block, the most recently started one is paused (its KV
                       freed, recomputed later).
"""

from __future__ import annotations

from sim.engines.settings import EngineSettings
from sim.kv.manager import KVCacheManager, cdiv
from sim.schedulers.base import SchedulerBase, SchedulerOptions, StepPlan
from sim.workload.request import Request, Status


class TrtllmScheduler(SchedulerBase):
    allocate_upfront = False  # Orca: the whole sequence's blocks are taken at admission

    def __init__(
        self,
        settings: EngineSettings,
        kv: KVCacheManager,
        bytes_per_block: int = 0,
        options: SchedulerOptions = SchedulerOptions(),
    ):
        super().__init__(settings, kv, bytes_per_block, options)
        self.no_evict = settings.capacity_policy != "MAX_UTILIZATION"

    def admission_error(self, req: Request) -> str | None:
        if not self.enable_chunked_prefill and req.prompt_len > self.max_num_batched_tokens:
            return (
                f"prompt of {req.prompt_len} tokens exceeds max_num_tokens "
                f"{self.max_num_batched_tokens} without chunked context"
            )
        if self.no_evict and self._full_blocks(req) > self.kv.pool.num_usable_blocks:
            return "prompt + max output exceed the KV pool"
        return None

    def _full_blocks(self, req: Request) -> int:
        return cdiv(req.prompt_len + req.max_output_len, self.kv.block_size)

    def _outstanding_blocks(self) -> int:
        """Blocks the running requests may still take before they finish."""
        return sum(max(self._full_blocks(r) - self.kv.num_blocks_of(r), 0) for r in self.running)

    def schedule(self, now: float) -> StepPlan:
        budget = self.max_num_batched_tokens
        reqs: list[Request] = []
        new_tokens: list[int] = []
        before = self.num_preemptions
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = req.num_tokens - req.num_computed_tokens
            if n > budget and not self.enable_chunked_prefill:
                i += 1
                continue  # a whole context does not fit this step's tokens: next step
            n = min(n, budget)
            while not self.kv.grow(req, n):
                if self.no_evict:
                    raise RuntimeError(f"request {req.request_id}: guaranteed blocks missing")
                victim = self.running.pop()
                self._preempt(victim)
                if victim is req:
                    break
            if req.status is not Status.RUNNING:
                break
            reqs.append(req)
            new_tokens.append(n)
            budget -= n
            i += 1
        if self.num_preemptions == before:
            self._admit(now, budget, reqs, new_tokens)
        return self._plan(reqs, new_tokens, self.num_preemptions - before)

    def chunked_run(self) -> bool:
        # with chunked context the running loop is vLLM V1's with no per-request cap (this
        # family's threshold is 0), as fast_forward.py replays it; nothing can be admitted
        if not self.enable_chunked_prefill:
            return False  # a context that does not fit waits whole: not a replayable step
        return not self.waiting or len(self.running) >= self.max_num_seqs

    def finish_inside_runs(self) -> bool:
        # as vLLM V1: only the waiting queue could use the slot and blocks a finish frees
        return not (self.waiting or self.ready) and self.sending is None

    def decode_run(self) -> bool:
        batch = len(self.running)
        if batch > self.max_num_batched_tokens:
            return False
        return not self.waiting or batch >= min(self.max_num_seqs, self.max_num_batched_tokens)

    def _admit(self, now: float, budget: int, reqs: list, new_tokens: list) -> None:
        outstanding = self._outstanding_blocks() if self.no_evict else 0
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            hits, num_hit_tokens = self.kv.get_computed_blocks(req)
            n = req.num_tokens - num_hit_tokens
            if n > budget and not self.enable_chunked_prefill:
                break
            n = min(n, budget)
            if self.no_evict:  # the whole sequence; prefix hits are not credited (C++ check)
                evictable_hits = self.kv.pool.num_idle(hits)
                if self._full_blocks(req) > self.kv.num_free_blocks - evictable_hits - outstanding:
                    break
            reserve = req.prompt_len + req.max_output_len - num_hit_tokens
            if (
                self.kv.allocate_slots(
                    req, reserve if self.allocate_upfront else n, hits, num_hit_tokens
                )
                is None
            ):
                break
            self._admitted(req, num_hit_tokens, n, now, reqs, new_tokens)
            budget -= n
            outstanding += max(self._full_blocks(req) - self.kv.num_blocks_of(req), 0)

    def check_invariants(self) -> None:
        super().check_invariants()
        if self.no_evict:
            assert self._outstanding_blocks() <= self.kv.num_free_blocks
