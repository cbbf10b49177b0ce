"""Two schedulers for teaching, to set continuous batching against.

Orca (Yu et al., OSDI '22): iteration-level scheduling, so requests join and leave the batch at
any step, but no paged KV: a request takes the KV of its whole sequence (prompt + max output)
when it starts, and keeps it until it ends. Prefills run whole, mixed with decodes.

Static batching: a batch of up to max_num_seqs waiting requests starts when the engine is idle,
prefills together, and decodes until its longest request is done. A request that is done early
keeps its row (its KV and its compute: the batch is padded to its longest member) and its
response completes with the batch; nothing joins a running batch.
"""

from __future__ import annotations

from sim.engines.settings import EngineSettings
from sim.kv.manager import KVCacheManager, cdiv
from sim.schedulers.base import SchedulerBase, SchedulerOptions, StepPlan
from sim.schedulers.trtllm import TrtllmScheduler
from sim.workload.request import Request, Status


class OrcaScheduler(TrtllmScheduler):
    allocate_upfront = True

    def __init__(
        self,
        settings: EngineSettings,
        kv: KVCacheManager,
        bytes_per_block: int = 0,
        options: SchedulerOptions = SchedulerOptions(),
    ):
        super().__init__(settings, kv, bytes_per_block, options)
        self.no_evict = True


class StaticScheduler(SchedulerBase):
    def __init__(
        self,
        settings: EngineSettings,
        kv: KVCacheManager,
        bytes_per_block: int = 0,
        options: SchedulerOptions = SchedulerOptions(),
    ):
        super().__init__(settings, kv, bytes_per_block, options)
        self.done: list[Request] = []  # requests of the batch that have all their tokens
        self.steps_in_batch = 0

    def admission_error(self, req: Request) -> str | None:
        if req.prompt_len > self.max_num_batched_tokens:
            return f"prompt of {req.prompt_len} tokens exceeds the batch's token budget"
        return None

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.done)

    def held_requests(self) -> list[Request]:
        return [*self.waiting, *self.running, *self.done]

    def schedule(self, now: float) -> StepPlan:
        if not self.running and not self.done:
            return self._new_batch(now)
        reqs = list(self.running)
        for req in reqs:
            self.kv.allocate_slots(req, 1)  # reserved at the start: never fails
        plan = self._plan(reqs, [1] * len(reqs), 0)
        # padding rows: a done request's row still runs, at the context a live one would have
        plan.padding_context = tuple(r.prompt_len + self.steps_in_batch - 1 for r in self.done)
        return plan

    def _new_batch(self, now: float) -> StepPlan:
        reqs: list[Request] = []
        budget = self.max_num_batched_tokens
        while self.waiting and len(reqs) < self.max_num_seqs:
            req = self.waiting[0]
            if req.prompt_len > budget:
                break
            full = req.prompt_len + req.max_output_len
            if cdiv(full, self.kv.block_size) > self.kv.num_free_blocks:
                break
            self.kv.allocate_slots(req, full)
            self._start(req, 0, now)
            reqs.append(req)
            budget -= req.prompt_len
        self.steps_in_batch = 0
        return self._plan(reqs, [r.prompt_len for r in reqs], 0)

    def update_from_output(self, plan: StepPlan, end_s: float) -> list[Request]:
        self.steps_in_batch += 1
        for req in plan.requests:
            self._emit(req, end_s)
            if req.is_finished:
                self.done.append(req)
        self.running = [r for r in self.running if not r.is_finished]
        if self.running:
            return []
        finished, self.done = self.done, []
        for req in finished:  # the batch's responses complete together
            req.status = Status.FINISHED
            req.finish_s = end_s
            self.kv.free(req, finished=True)
        return finished

    def check_invariants(self) -> None:
        super().check_invariants()
        for req in self.done:
            assert req.is_finished and req.status is Status.RUNNING
            assert req.request_id in self.kv.req_blocks
