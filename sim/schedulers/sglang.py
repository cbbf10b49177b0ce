"""SGLang's scheduler: prefill first, conservative admission, retraction when decode runs dry.

Each step is either a prefill batch or a decode batch, never both, unless enable_mixed_chunk
(off by default) mixes them (see below):
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

With enable_mixed_chunk (and a chunked_prefill_size) a prefill step carries the running
requests' decodes (managers/scheduler.py get_new_batch_prefill, "Mixed-style chunked prefill":
the running batch is prepared for decode and mixed into the new prefill batch, then merged back
into the running batch). Its admission budget is shrunk by them first: PrefillAdder
(managers/schedule_policy.py) starts with the chunk and max_prefill_tokens less one token per
running request, and with that many tokens already counted against the pool. Decodes then no
longer stall behind a burst of prompts, so requests admitted one after another finish one after
another and a closed loop's clients drift apart. Read in the 0.5.1.post1, 0.5.6.post2 and 0.5.9
wheels (`pip download sglang==V --no-deps`); a step mixes only when the pool can hold the
decodes' next tokens (SGLang does not check; the simulator's pool must).
"""

from __future__ import annotations

from sim.engines import sglang as releases
from sim.engines.settings import EngineSettings
from sim.kv.manager import KVCacheManager, cdiv
from sim.schedulers.ahead import PlanAhead
from sim.schedulers.base import SchedulerBase, SchedulerOptions, StepPlan
from sim.workload.request import Request

CLIP_MAX_NEW_TOKENS = 4096  # SGLang's cap on max_new_tokens in admission estimates
RETRACT_DECODE_STEPS = 20  # decode steps the batch must be able to run after a retraction


class SglangScheduler(PlanAhead, SchedulerBase):
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
        # (getattr: EngineSettings gains the knob in issue 43; False until it does)
        self.mixed = settings.enable_mixed_chunk and self.chunk_size > 0
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
        # overlapped: this step was planned as the previous one started (ahead.py)
        plan = self._plan_step(now, lambda t: self._prefill(t) or self._decode(), self._prefill)
        if plan.batch_size == 0:  # idle
            self.new_token_ratio = self.init_ratio
        return plan

    def _visible(self) -> list[Request]:
        """The waiting requests this step's plan sees (PlanAhead.visible): under the overlap
        scheduler a client's next request, sent when its last token comes, has its first
        token three steps later, one without overlap."""
        if self.planned_at is None:
            return list(self.waiting)
        return [r for r in self.waiting if self.visible(r)]

    # ---- prefill --------------------------------------------------------------------------
    @staticmethod
    def _reserve(req: Request) -> int:
        return min(req.max_output_len - req.num_output_tokens, CLIP_MAX_NEW_TOKENS)

    def _prefill(self, now: float) -> StepPlan | None:
        visible = self._visible()
        if self.chunked is None and (self.batch_is_full or not visible):
            return None
        if self.chunked is None and len(self.running) >= self.max_num_seqs:
            self.batch_is_full = self.full_is_sticky
            return None
        base = self.kv.num_free_blocks * self.kv.block_size  # free + evictable
        total_off = sum(
            self._reserve(r) * self.new_token_ratio for r in self.running if r is not self.chunked
        )
        # mixed: the running requests' decodes ride in this step and come off its budgets
        decodes = [r for r in self.running if r is not self.chunked] if self.mixed else []
        mixed = len(decodes)
        total_off += mixed
        cur_off = mixed
        rem_chunk, rem_input = self.chunk_size - mixed, self.max_prefill_tokens - mixed
        reqs: list[Request] = []
        new_tokens: list[int] = []
        if self.chunked is not None:
            req = self.chunked
            # at least one token: a chunk smaller than the running batch is no real setting
            n = min(req.num_tokens - req.num_computed_tokens, max(rem_chunk, 1))
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
            for req in self._order(visible):
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
        if decodes and self._fits(decodes, 1):
            for req in decodes:
                self.kv.grow(req, 1)
            reqs, new_tokens = reqs + decodes, new_tokens + [1] * len(decodes)
        return self._plan(reqs, new_tokens, 0)

    def _order(self, queue: list[Request]) -> list[Request]:
        """The `queue` of waiting requests in the order the policy tries them."""
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
