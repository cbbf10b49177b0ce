"""vLLM's V0 scheduler (releases before 0.8).

Without chunked prefill (the V0 default): prefill first. A step admits waiting requests, whole
prompts, while the token budget, max_num_seqs and the block watermark allow; if it admitted
any, it runs only those prefills. Otherwise it decodes every running request, preempting the
newest when blocks run out, by recompute or, with preemption_mode=swap, by moving the blocks to
CPU memory over PCIe; with nothing preempted, swapped requests come back first.

With chunked prefill (on by default for long contexts from 0.5.3): one budget per step, decodes
first, then running prefill chunks, then swapped requests, then new prefills in chunks.

Multi-step scheduling (num_scheduler_steps = n > 1, 0.5.5 to 0.10.0): a decode batch runs n steps
in a row without rescheduling; new requests wait for the window to end (the scheduler is not
called while steps of the window remain: engine/llm_engine.py step(), _has_remaining_steps,
0.6.0). Before 0.6.2 the client sees a window's tokens together at its end: intermediate steps
return no outputs (llm_engine.py step(), "Multi-step case", 0.6.0), so a streaming client
gets one chunk per window, and a request that finishes inside a window ends with it (its row
runs to the window's end: the engine learns of the end only then). From
0.6.2 multi_step_stream_outputs (default True, PR #8335) streams each step's tokens.
"""

from __future__ import annotations

from collections import deque

from sim.engines.settings import EngineSettings
from sim.kv.manager import KVCacheManager, cdiv
from sim.schedulers.base import SchedulerBase, SchedulerOptions, StepPlan
from sim.workload.request import Request, Status


class VllmV0Scheduler(SchedulerBase):
    def __init__(
        self,
        settings: EngineSettings,
        kv: KVCacheManager,
        bytes_per_block: int = 0,
        options: SchedulerOptions = SchedulerOptions(),
    ):
        super().__init__(settings, kv, bytes_per_block, options)
        self.swap = settings.preemption_mode == "swap"
        self.watermark_blocks = int(settings.block_watermark * kv.pool.num_usable_blocks)
        self.bytes_per_block = bytes_per_block
        self.cpu_blocks_total = settings.swap_space_bytes // max(bytes_per_block, 1)
        self.cpu_blocks_free = self.cpu_blocks_total
        self.swapped: deque[Request] = deque()
        self.swapped_blocks: dict[int, int] = {}
        self.num_scheduler_steps = settings.num_scheduler_steps
        self.window_left = 0  # decode steps left in the current multi-step window
        # burst: a window's tokens reach the client at its end (multi-step before 0.6.2)
        self.burst = self.num_scheduler_steps > 1 and not settings.multi_step_streams
        self.unshown: dict[int, tuple[Request, float | None]] = {}  # id -> (req, last shown)
        self.done_unshown: list[Request] = []  # finished inside the window, not yet told
        self.window_left_at_finish: dict[int, int] = {}  # ... and the window's steps left then

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    def held_requests(self) -> list[Request]:
        return [*self.waiting, *self.running, *self.swapped, *self.done_unshown]

    def update_from_output(self, plan: StepPlan, end_s: float) -> list[Request]:
        if not self.burst:
            return super().update_from_output(plan, end_s)
        # tokens are sampled each step, but the client sees them when the window ends: one
        # chunk per request, so one inter-token gap per window (the benchmark client counts
        # an SSE chunk of several tokens as one ITL entry), the window's length; the step's
        # own gaps are not shown (show_gaps), the window's are worked out below
        outputs = [r.num_output_tokens for r in plan.requests]
        shown = [r.last_token_s for r in plan.requests]
        finished = super().update_from_output(plan, end_s)
        for req, out, last in zip(plan.requests, outputs, shown, strict=True):
            if out > 0 and req.num_output_tokens > out:  # a decode token (a first is shown)
                self.unshown.setdefault(req.request_id, (req, last))
        if self.window_left > 0 and self.running:  # the window goes on: hold the news back
            for req in finished:
                req.status, req.finish_s = Status.RUNNING, None
                self.window_left_at_finish[req.request_id] = self.window_left
            self.done_unshown.extend(finished)
            return []
        gaps = []
        for req, last in self.unshown.values():
            if last is not None and req.request_id >= self.itl.measure_from:
                gaps.append(end_s - last)
            req.last_token_s = end_s
        self.itl.add(gaps)
        for req in self.done_unshown:
            req.status, req.finish_s = Status.FINISHED, end_s
        finished = [*self.done_unshown, *finished]
        self.unshown.clear()
        self.done_unshown = []
        self.window_left_at_finish.clear()
        return finished

    def show_gaps(self, gaps: list[float]) -> None:
        if not self.burst:
            self.itl.add(gaps)

    def schedule(self, now: float) -> StepPlan:
        reqs: list[Request] = []
        new_tokens: list[int] = []
        before = self.num_preemptions
        if self.priority:  # V0 keeps running sorted, so victims (from the back) rank lowest
            self.running.sort(key=self._rank)
        if self.window_left > 0 and not self.running:  # the window's requests all finished
            self.window_left = 0
        if self.window_left > 0:  # multi-step: the window's decode batch again
            self.window_left -= 1
            swap_bytes = self._running(reqs, new_tokens, chunked=False)
            plan = self._plan(reqs, new_tokens, self.num_preemptions - before, swap_bytes)
            if self.done_unshown:  # finished unknown to the engine: their rows still run
                plan.padding_context = tuple(
                    r.num_computed_tokens + self.window_left_at_finish[r.request_id]
                    - self.window_left - 1
                    for r in self.done_unshown
                )  # fmt: skip
            return plan
        if self.enable_chunked_prefill:
            swap_bytes = self._running(reqs, new_tokens, chunked=True)
            if self.num_preemptions == before:
                swap_bytes += self._swap_in(reqs, new_tokens)
                budget = self.max_num_batched_tokens - sum(new_tokens)
                self._admit(now, budget, reqs, new_tokens)
            return self._plan(reqs, new_tokens, self.num_preemptions - before, swap_bytes)
        if not self.swapped:
            self._admit(now, self.max_num_batched_tokens, reqs, new_tokens)
            if reqs:
                return self._plan(reqs, new_tokens, 0)
        swap_bytes = self._running(reqs, new_tokens, chunked=False)
        if self.num_preemptions == before:
            swap_bytes += self._swap_in(reqs, new_tokens)
        if self.num_scheduler_steps > 1 and reqs:
            self.window_left = self.num_scheduler_steps - 1
        return self._plan(reqs, new_tokens, self.num_preemptions - before, swap_bytes)

    def decode_run(self) -> bool:
        if self.priority:  # what the next schedule does first anyway
            self.running.sort(key=self._rank)
        # nothing to admit or swap in, and the budget covers one token of every request;
        # not when a window's tokens are shown at its end (fast-forward shows every step's)
        return (
            not self.burst
            and not self.waiting
            and not self.swapped
            and (len(self.running) <= self.max_num_batched_tokens)
        )

    def advance_decode_state(self, num_steps: int) -> None:
        if self.enable_chunked_prefill:
            return  # decode windows are for prefill-first scheduling
        for _ in range(num_steps):  # a window's steps, then a full schedule opening the next
            if self.window_left > 0:
                self.window_left -= 1
            elif self.num_scheduler_steps > 1:
                self.window_left = self.num_scheduler_steps - 1

    def _running(self, reqs: list, new_tokens: list, chunked: bool) -> int:
        """Schedule running requests in order; when blocks run out, preempt from the back of
        the queue (possibly the request itself). Returns the bytes swapped out."""
        budget = self.max_num_batched_tokens
        swap_bytes = 0
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = self._chunk(req.num_tokens - req.num_computed_tokens, budget) if chunked else 1
            while not self.kv.grow(req, n):
                victim = self.running.pop()
                swap_bytes += self._preempt_v0(victim)
                if victim is req:
                    return swap_bytes
            reqs.append(req)
            new_tokens.append(n)
            budget -= n
            i += 1
        return swap_bytes

    def _preempt_v0(self, req: Request) -> int:
        """Swap `req` out if swapping is on and CPU space allows, else recompute it."""
        blocks = self.kv.num_blocks_of(req)
        if not self.swap or blocks > self.cpu_blocks_free:
            self._preempt(req)
            return 0
        self.kv.free(req)
        self.cpu_blocks_free -= blocks
        self.swapped_blocks[req.request_id] = blocks
        req.status = Status.PREEMPTED
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.swapped.append(req)
        return blocks * self.bytes_per_block

    def _swap_in(self, reqs: list, new_tokens: list) -> int:
        """Bring swapped requests back (oldest first) and decode them this step."""
        moved = 0
        while self.swapped and len(self.running) < self.max_num_seqs:
            req = self.swapped[0]
            blocks = self.swapped_blocks[req.request_id]
            extra = cdiv(req.num_computed_tokens + 1, self.kv.block_size) - blocks
            if not self.kv.can_allocate(blocks + max(extra, 0), self.watermark_blocks):
                break
            self.swapped.popleft()
            del self.swapped_blocks[req.request_id]
            self.cpu_blocks_free += blocks
            self.kv.swap_in(req, req.num_computed_tokens)
            self.kv.allocate_slots(req, 1)
            req.status = Status.RUNNING
            self.running.append(req)
            reqs.append(req)
            new_tokens.append(1)
            moved += blocks * self.bytes_per_block
        return moved

    def _admit(self, now: float, budget: int, reqs: list, new_tokens: list) -> None:
        """New prefills: whole prompts (or chunks with chunked prefill) within the budget."""
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            hits, num_hit_tokens = self.kv.get_computed_blocks(req)
            n = req.num_tokens - num_hit_tokens
            if self.enable_chunked_prefill:
                n = self._chunk(n, budget)
            elif n > budget:
                break
            need = cdiv(num_hit_tokens + n, self.kv.block_size) - len(hits)
            if not self.kv.can_allocate(need, self.watermark_blocks):
                break
            if self.kv.allocate_slots(req, n, hits, num_hit_tokens) is None:
                break
            self._admitted(req, num_hit_tokens, n, now, reqs, new_tokens)
            budget -= n

    def check_invariants(self) -> None:
        super().check_invariants()
        for req in self.swapped:
            assert req.request_id not in self.kv.req_blocks
            assert req.num_computed_tokens > 0
        assert set(self.swapped_blocks) == {r.request_id for r in self.swapped}
        assert sum(self.swapped_blocks.values()) + self.cpu_blocks_free == self.cpu_blocks_total
        assert self.cpu_blocks_free >= 0
