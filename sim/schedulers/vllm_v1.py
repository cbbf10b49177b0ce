"""vLLM V1's scheduler (0.8 and later): one token budget, running requests first, then
waiting ones (FCFS). Each step:
  1. running requests, oldest first, each gets min(remaining tokens, threshold, budget) new
     tokens; when the pool is out of blocks the newest running request is preempted (its blocks
     freed, num_computed_tokens reset, pushed to the front of the waiting queue), repeatedly,
     possibly the request itself;
  2. only if nothing was preempted: waiting requests in order while budget and max_num_seqs
     allow, each reusing its cached prefix and taking a chunk of what remains;
  3. after the step, every request whose computed tokens reached its known tokens samples one.
With policy=priority the waiting queue is ordered by (priority, arrival) and the victim is the
running request with the largest (priority, arrival), even one already scheduled this step.
A request whose tokens are all computed but not yet sampled (a micro-batch still in the
pipeline, pp > 1) has nothing to schedule and is skipped.
"""

from __future__ import annotations

from sim.schedulers.base import SchedulerBase, StepPlan
from sim.workload.request import Request, Status


class VllmV1Scheduler(SchedulerBase):
    def schedule(self, now: float) -> StepPlan:
        budget = self.max_num_batched_tokens
        reqs: list[Request] = []
        new_tokens: list[int] = []
        preempted_before = self.num_preemptions
        threshold = self.long_prefill_token_threshold
        kv = self.kv
        block_size, held, caching = kv.block_size, kv.req_blocks, kv.enable_caching
        running = self.running
        i = 0
        spec_k = self.spec_k
        while i < len(running) and budget > 0:
            req = running[i]
            c = req.num_computed_tokens
            n = req.prompt_len + req.num_output_tokens - c
            if spec_k and n == 1 and req.num_output_tokens:  # decoding: verify k drafts too,
                # none beyond the answer's last token
                n += min(spec_k, req.max_output_len - req.num_output_tokens - 1)
            if 0 < threshold < n:
                n = threshold
            if n > budget:
                n = budget
            if spec_k:
                req.num_drafts = n - 1 if req.num_output_tokens and c == req.num_tokens - 1 else 0
            if n == 0:  # its last tokens are still in flight (pipeline parallelism)
                i += 1
                continue
            end = c + n
            if (
                end > len(held[req.request_id]) * block_size
                or (caching and end // block_size > c // block_size)
            ) and not kv.grow(req, n):  # a new block the pool cannot give: preempt for it
                ok, returned = self._allocate_or_preempt(req, n, reqs, new_tokens)
                budget += returned
                if not ok:
                    break  # req preempted itself: nothing after it can run either
            reqs.append(req)
            new_tokens.append(n)
            budget -= n
            # fcfs victims come from the back, so req keeps its index; priority ones may not
            i = running.index(req) + 1 if self.priority else i + 1
        num_preempted = self.num_preemptions - preempted_before
        if num_preempted == 0:
            if self.ready:
                budget = self._admit_ready(now, budget, reqs, new_tokens)
            self._admit_waiting(now, budget, reqs, new_tokens)
        plan = self._plan(reqs, new_tokens, num_preempted)
        if kv.pool.lower is not None:
            plan.load_s = kv.pool.lower.take_load_s()
        return plan

    def chunked_run(self) -> bool:
        # nothing can be admitted: no one waits, or no sequence slot is free
        return not (self.waiting or self.ready) or len(self.running) >= self.max_num_seqs

    def finish_inside_runs(self) -> bool:
        # a finish frees a sequence slot and blocks: only the waiting queue could use them,
        # and a disaggregated prefill replica keeps a finished request's blocks to send them
        return not (self.waiting or self.ready) and self.sending is None

    def decode_run(self) -> bool:
        batch = len(self.running)
        if batch > self.max_num_batched_tokens:
            return False  # the budget would cut the batch
        # waiting requests are admitted only with a sequence slot and budget left
        waiting = self.waiting or self.ready
        return not waiting or batch >= min(self.max_num_seqs, self.max_num_batched_tokens)

    def _allocate_or_preempt(
        self, req: Request, n: int, reqs: list, new_tokens: list
    ) -> tuple[bool, int]:
        """Make room for n more tokens of running `req` by preempting running requests (the
        newest, or by priority): (False if `req` itself had to go, budget tokens handed back
        by victims already scheduled this step, which are taken out of it)."""
        returned = 0
        while self.kv.allocate_slots(req, n) is None:
            victim = self._pick_victim()
            if self.priority and victim in reqs:
                j = reqs.index(victim)
                returned += new_tokens[j]
                del reqs[j], new_tokens[j]
            self._preempt(victim)
            if victim is req:
                return False, returned
        return True, returned

    def _admit_ready(self, now: float, budget: int, reqs: list, new_tokens: list) -> int:
        """Requests whose KV came from a prefill replica, in arrival order: each computes its
        last prompt token. They hold their blocks already, so they go before the waiting
        queue: a request preempted here and waiting for blocks at its head would otherwise
        wait for blocks that only these can free (vLLM keeps one queue and can stall there)."""
        while self.ready and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.ready.popleft()
            self.running.append(req)
            req.status = Status.RUNNING
            req.num_computed_tokens = req.prompt_len - 1
            req.num_drafts = 0
            reqs.append(req)
            new_tokens.append(1)
            budget -= 1
        return budget

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
            self._admitted(req, num_hit_tokens, n, now, reqs, new_tokens)
            budget -= n

    def check_invariants(self) -> None:
        super().check_invariants()
        held = {r.request_id for r in self.held_requests()}
        assert set(self.kv.req_blocks) <= held, "blocks held by no request"
        if self.priority:
            ranks = [self._rank(r) for r in self.waiting]
            assert ranks == sorted(ranks)
        else:  # preempted requests go back to the front, new ones join the back
            statuses = [req.status for req in self.waiting]
            assert statuses == sorted(statuses, key=lambda s: s is Status.WAITING), statuses
