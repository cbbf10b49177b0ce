"""SGLang's scheduler: prefill first, conservative admission, retraction when decode runs dry.

Each step is either a prefill batch or a decode batch, never both (enable_mixed_chunk is off
by default):
  1. Prefill, if anything can be admitted. A request whose prefill is in progress (the chunked
     request) continues first; then waiting requests in policy order (`lpm`: longest cached
     prefix first, falling back to arrival order when more than 128 wait; `fcfs`: arrival
     order; 0.3.0-0.3.4 sort a queue of any length), while
       - running + admitted < max_running_requests,
       - the tokens left to prefill this step (chunked_prefill_size) and max_prefill_tokens
         allow (the first request may exceed max_prefill_tokens),
       - the pool can hold the request's prompt plus all its max_new_tokens (clipped at
         4096) on top of what the running requests are expected to still need: for each,
         its remaining max_new_tokens x new_token_ratio.
     A prompt longer than the chunk left is cut to it and becomes the chunked request, which
     ends the batch. Decodes wait while prefills run. From 0.3.3, once admission fails none is
     tried until a running request leaves (batch_is_full); 0.3.0-0.3.2 try at every step.
  2. Otherwise decode every running request one token. If the pool cannot hold the step,
     requests are retracted (fewest output tokens, then longest prompt, first) until what is
     left can decode 20 more steps; they return to the waiting queue to be recomputed, and
     new_token_ratio jumps to (tokens decoded + 20 x remaining) / their total max_new_tokens.
     After each decode step without retraction the ratio decays by new_token_ratio_decay
     towards min_new_token_ratio; it resets to its initial value when the batch empties.
"""

from __future__ import annotations

from sim.engines import sglang as releases
from sim.engines.settings import EngineSettings
from sim.kv.manager import KVCacheManager, cdiv
from sim.schedulers.base import SchedulerBase, SchedulerOptions, StepPlan
from sim.workload.request import Request

CLIP_MAX_NEW_TOKENS = 4096  # SGLang's cap on max_new_tokens in admission estimates
RETRACT_DECODE_STEPS = 20  # decode steps the batch must be able to run after a retraction


class SglangScheduler(SchedulerBase):
    def __init__(
        self,
        settings: EngineSettings,
        kv: KVCacheManager,
        bytes_per_block: int = 0,
        options: SchedulerOptions = SchedulerOptions(),
    ):
        super().__init__(settings, kv, bytes_per_block, options)
        self.chunk_size = settings.max_num_batched_tokens  # chunked_prefill_size
        self.max_prefill_tokens = settings.max_prefill_tokens
        self.lpm = settings.policy == "lpm"
        self.lpm_max_queue = releases.lpm_queue_limit(settings.rule_set)  # None: no limit
        self.full_is_sticky = releases.admission_waits_for_a_finish(settings.rule_set)
        self.init_ratio = settings.new_token_ratio
        self.min_ratio = settings.min_new_token_ratio
        self.decay = settings.new_token_ratio_decay
        self.new_token_ratio = self.init_ratio
        # 0.3/0.4 retract until 20 decode steps' tokens are free; 0.5 until one step fits
        self.retract_steps = settings.retract_decode_steps
        self.ratio_denominator_extra = settings.retract_ratio_offset
        self.chunked: Request | None = None  # the request whose prefill is in progress
        self.batch_is_full = False  # admission failed; retry once a running request leaves
        self.num_retractions = 0

    def admission_error(self, req: Request) -> str | None:
        pool = self.kv.pool.num_usable_blocks * self.kv.block_size
        need = req.prompt_len + min(req.max_output_len, CLIP_MAX_NEW_TOKENS)
        if need >= pool:
            return f"prompt + max_new_tokens ({need}) do not fit the KV pool ({pool} tokens)"
        return None

    def schedule(self, now: float) -> StepPlan:
        plan = self._prefill(now)
        if plan is None:
            plan = self._decode()
        if plan.batch_size == 0:  # idle
            self.new_token_ratio = self.init_ratio
        return plan

    # ---- prefill --------------------------------------------------------------------------
    @staticmethod
    def _reserve(req: Request) -> int:
        return min(req.max_output_len - req.num_output_tokens, CLIP_MAX_NEW_TOKENS)

    def _prefill(self, now: float) -> StepPlan | None:
        if self.chunked is None and (self.batch_is_full or not self.waiting):
            return None
        if self.chunked is None and len(self.running) >= self.max_num_seqs:
            self.batch_is_full = self.full_is_sticky
            return None
        base = self.kv.num_free_blocks * self.kv.block_size  # free + evictable
        total_off = sum(
            self._reserve(r) * self.new_token_ratio for r in self.running if r is not self.chunked
        )
        cur_off = 0
        rem_chunk, rem_input = self.chunk_size, self.max_prefill_tokens
        reqs: list[Request] = []
        new_tokens: list[int] = []
        if self.chunked is not None:
            req = self.chunked
            n = min(req.num_tokens - req.num_computed_tokens, rem_chunk)
            if self.kv.allocate_slots(req, n) is None:  # no room after all: retract it
                self.chunked = None
                self.running.remove(req)
                self._preempt(req, front=False)
                self.num_retractions += 1
                return self._plan([], [], 1)
            last = req.num_computed_tokens + n == req.num_tokens
            reqs.append(req)
            new_tokens.append(n)
            total_off += n + (self._reserve(req) if last else 0)
            cur_off += n
            rem_chunk -= n
            rem_input -= n
            if last:
                self.chunked = None
        no_token = False
        if self.chunked is None:
            for req in self._order():
                if len(self.running) >= self.max_num_seqs:
                    self.batch_is_full = self.full_is_sticky
                    break
                if rem_chunk <= 0 or rem_input <= 0:
                    break
                hits, num_hit_tokens = self.kv.get_computed_blocks(req)
                extend = req.num_tokens - num_hit_tokens
                if extend + self._reserve(req) >= base - total_off:
                    no_token = True
                    break
                n = min(extend, rem_chunk)
                if self.kv.allocate_slots(req, n, hits, num_hit_tokens) is None:
                    no_token = True
                    break
                self._admitted(req, num_hit_tokens, n, now, reqs, new_tokens)
                total_off += n + (self._reserve(req) if n == extend else 0)
                cur_off += n
                rem_chunk -= n
                rem_input -= n
                if n < extend:
                    self.chunked = req
                    break
                if base - total_off <= 0 or base - cur_off <= 0:
                    no_token = True
                    break
        if no_token and (reqs or len(self.running) > len(reqs)):
            self.batch_is_full = self.full_is_sticky
        if not reqs:
            return None
        return self._plan(reqs, new_tokens, 0)

    def _order(self) -> list[Request]:
        """Waiting requests in the order the policy tries them."""
        queue = list(self.waiting)
        limit = self.lpm_max_queue
        if self.lpm and (limit is None or len(queue) <= limit) and self.kv.enable_caching:
            hit = {r.request_id: self.kv.get_computed_blocks(r)[1] for r in queue}
            queue.sort(key=lambda r: -hit[r.request_id])  # stable: ties keep arrival order
        return queue

    # ---- decode ---------------------------------------------------------------------------
    def _decode(self) -> StepPlan:
        batch = [r for r in self.running if r is not self.chunked]
        retracted = 0
        if not batch:
            return self._plan([], [], 0)
        if not self._fits(batch, 1):
            retracted = self._retract(batch)
            batch = [r for r in self.running if r is not self.chunked]
        else:
            self.new_token_ratio = max(self.new_token_ratio - self.decay, self.min_ratio)
        for req in batch:
            if not self.kv.grow(req, 1):
                raise RuntimeError(f"request {req.request_id}: no block after retraction")
        return self._plan(batch, [1] * len(batch), retracted)

    def decode_run(self) -> bool:
        if self.chunked is not None:
            return False
        full = self.batch_is_full or len(self.running) >= self.max_num_seqs
        return not self.waiting or full  # no prefill can start: every step decodes

    def advance_decode_state(self, num_steps: int) -> None:
        if self.waiting and len(self.running) >= self.max_num_seqs:
            # what the first step's admission attempt records
            self.batch_is_full = self.full_is_sticky
        for _ in range(num_steps):  # each decode step without retraction decays the ratio
            self.new_token_ratio = max(self.new_token_ratio - self.decay, self.min_ratio)

    def _fits(self, batch: list[Request], steps: int) -> bool:
        """Whether the pool can hold `steps` more tokens of every request in `batch`."""
        need = sum(
            cdiv(r.num_computed_tokens + steps, self.kv.block_size) - self.kv.num_blocks_of(r)
            for r in batch
        )
        return need <= self.kv.num_free_blocks

    def _enough_after_retract(self, batch: list[Request]) -> bool:
        if self.retract_steps == 1:
            return self._fits(batch, 1)
        return self.kv.num_free_blocks * self.kv.block_size >= self.retract_steps * len(batch)

    def _retract(self, batch: list[Request]) -> int:
        """Retract requests (fewest outputs, then longest prompt, first) to the back of the
        waiting queue; reset new_token_ratio from the ones that stay."""
        order = sorted(batch, key=lambda r: (r.num_output_tokens, -r.prompt_len), reverse=True)
        retracted = 0
        while len(order) > 1 and (retracted == 0 or not self._enough_after_retract(order)):
            victim = order.pop()
            self.running.remove(victim)
            self._preempt(victim, front=False)
            retracted += 1
        self.num_retractions += retracted
        self.batch_is_full = False
        if not self._fits(order, 1):
            raise RuntimeError("SGLang: one request alone does not fit the KV pool")
        decoded = sum(r.num_output_tokens for r in order)
        total = sum(r.max_output_len for r in order) + self.ratio_denominator_extra
        ratio = (decoded + RETRACT_DECODE_STEPS * len(order)) / max(total, 1)
        self.new_token_ratio = min(1.0, ratio)
        return retracted

    def update_from_output(self, plan: StepPlan, end_s: float) -> list[Request]:
        finished = super().update_from_output(plan, end_s)
        if finished:
            self.batch_is_full = False
        return finished

    def check_invariants(self) -> None:
        super().check_invariants()
        assert 0 <= self.new_token_ratio <= 1.0
        if self.chunked is not None:
            assert self.chunked in self.running
            assert self.chunked.num_tokens - self.chunked.num_computed_tokens > 0
