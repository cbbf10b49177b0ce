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
Steps 1 and 3 run as array operations over the running set (sim/schedulers/lane.py) when
LANE_MIN or more requests run and no preemption is possible; otherwise request by request
(_schedule_objects, SchedulerBase.update_from_output). Both give the same plan and outcome.
"""

from __future__ import annotations

import numpy as np

from sim.schedulers.ahead import PlanAhead
from sim.schedulers.base import SchedulerBase, StepPlan
from sim.schedulers.lane import LANE_MIN, Lane
from sim.workload.request import Request, Status


class VllmV1Scheduler(PlanAhead, SchedulerBase):
    lane: Lane | None = None  # the running set as arrays, while it mirrors it (lane.py)
    _lane_plan: StepPlan | None = None  # the step the lane planned, until its outcome

    def schedule(self, now: float) -> StepPlan:
        # async scheduling plans a step ahead (ahead.py, PlanAhead.__init__ says when)
        return self._plan_step(now, self._schedule)

    def _schedule(self, now: float) -> StepPlan:
        running = self.running
        if len(running) >= LANE_MIN and not self.spec_k and self.kv.windowed is None:
            lane = self.lane
            if lane is None or lane.requests != running:
                if lane is not None:
                    lane.sync()
                lane = self.lane = Lane(running, self.kv.req_blocks, self.itl.measure_from)
            plan = self._schedule_lane(lane, now)
            if plan is not None:
                return plan
        self.sync_requests()
        self.lane = None
        return self._schedule_objects(now)

    def sync_requests(self) -> None:
        if self.lane is not None:
            self.lane.sync()

    def running_lane(self) -> Lane | None:
        lane = self.lane
        if lane is not None and lane.requests != self.running:  # stale: the next step would
            lane.sync()  # rebuild it
            lane = self.lane = None
        return lane

    def _schedule_lane(self, lane: Lane, now: float) -> StepPlan | None:
        """schedule() through the lane: the same plan, the same pool calls in the same order,
        or None (nothing changed) when the running requests' new blocks might not all be free
        (a preemption: the step goes through objects). (ndarray methods and ufuncs rather than
        numpy's Python-level functions: a step makes some twenty such calls.)"""
        kv = self.kv
        bs = kv.block_size
        running = self.running
        m = len(running)
        budget = self.max_num_batched_tokens
        c, held = lane.c, lane.held
        n = lane.t - c
        threshold = self.long_prefill_token_threshold
        if threshold > 0:
            np.minimum(n, threshold, out=n)
        cum = np.add.accumulate(n)
        if cum[-1] > budget:  # running order: each gets what the ones before left
            n = np.minimum(np.maximum(budget - (cum - n), 0), n)
            budget = 0
        else:
            budget -= int(cum[-1])
        end = c + n
        need = (end + (bs - 1)) // bs  # blocks each holds after the step
        calls = need > held
        if kv.enable_caching:  # a block filled: its hash cached
            calls |= end // bs > c // bs
        calls &= n > 0
        at = calls.nonzero()[0]
        if len(at):
            # (a request holds blocks for its computed tokens: no row adds a negative count)
            if int(np.add.reduce(np.maximum(need - held, 0))) > kv.pool.num_free_blocks:
                return None
            if bs > 1 and not np.count_nonzero(n[at] != 1):  # decodes: batched, the same calls
                takes = (need[at] > held[at]).tolist()
                kv.grow_decodes([running[i] for i in at.tolist()], takes, c[at].tolist())
            else:
                for i in at.tolist():
                    req = running[i]  # grow reads its counters: the lane's, written back
                    req.num_computed_tokens = int(c[i])
                    req.num_output_tokens = int(lane.out[i])
                    if not kv.grow(req, int(n[i])):  # (the blocks were counted free)
                        raise RuntimeError(f"request {req.request_id} found no block")
            np.maximum(held, need, out=held)
        ones = n == 1
        num_decode = np.count_nonzero(ones & (lane.out > 0))
        dec_c = c[ones]  # the cost model's split: one new token is a decode to it
        chunks = n > 1
        pre_q, pre_c = n[chunks].tolist(), c[chunks].tolist()
        lane.c = end
        if np.count_nonzero(n) == m:
            rows = None  # every running request
            reqs = list(running)
            new_tokens = n.tolist()
            contexts = c.tolist()
            preemptions = lane.npre.tolist()
        else:
            rows = n.nonzero()[0]
            reqs = [running[i] for i in rows.tolist()]
            new_tokens = n[rows].tolist()
            contexts = c[rows].tolist()
            preemptions = lane.npre[rows].tolist()
        if budget > 0:  # the waiting queue, as _plan plans the admitted
            if self.ready:
                budget = self._admit_ready(now, budget, reqs, new_tokens)
            self._admit_waiting(now, budget, reqs, new_tokens)
            admitted = reqs[len(contexts) :]
            if admitted:
                if rows is not None:
                    rows = np.concatenate((rows, np.arange(m, m + len(admitted))))
                more_dec = []
                for req, k in zip(admitted, new_tokens[len(contexts) :], strict=True):
                    x = req.num_computed_tokens
                    contexts.append(x)
                    if k == 1:
                        more_dec.append(x)
                        num_decode += req.num_output_tokens > 0
                    else:
                        pre_q.append(k)
                        pre_c.append(x)
                    req.num_computed_tokens = x + k
                    preemptions.append(req.num_preemptions)
                if more_dec:
                    dec_c = np.concatenate((dec_c, more_dec))
                lane.append(admitted, kv.req_blocks, self.itl.measure_from)
        plan = StepPlan(
            requests=reqs,
            num_new_tokens=new_tokens,
            num_context_tokens=contexts,
            num_prefill_tokens=sum(new_tokens) - int(num_decode),
            num_decode_tokens=int(num_decode),
            num_preempted=0,
            preemptions=tuple(preemptions),
            rows=rows,
            split=(pre_q, pre_c, dec_c),
        )
        if kv.pool.lower is not None:
            plan.load_s = kv.pool.lower.take_load_s()
        self._lane_plan = plan
        return plan

    def update_from_output(self, plan: StepPlan, end_s: float) -> list[Request]:
        lane = self.lane
        if plan is not self._lane_plan or lane is None or lane.requests != self.running:
            self.sync_requests()
            self.lane = self._lane_plan = None
            return super().update_from_output(plan, end_s)
        self._lane_plan = None
        lane_reqs = lane.requests
        rows = plan.rows  # None: the plan's rows are the whole lane
        if rows is None:
            caught = (lane.c >= lane.t).nonzero()[0]  # a token for each that caught up
        else:
            caught = rows[lane.c[rows] >= lane.t[rows]]
        whole = len(caught) == len(lane_reqs)
        out = lane.out if whole else lane.out[caught]
        last = lane.last if whole else lane.last[caught]
        odd = (out == 0) | (last != last)  # a first token, or none recorded yet: as objects
        measured = lane.measured if whole else lane.measured[caught]
        gaps = (end_s - last[~odd & measured]).tolist()
        out = out + 1
        if whole:
            lane.out = out
            lane.t += 1
            lane.last = np.full(len(out), end_s)
            reqs = lane_reqs
        else:
            lane.out[caught] = out
            lane.t[caught] += 1
            lane.last[caught] = end_s
            reqs = [lane_reqs[i] for i in caught.tolist()]
        if np.count_nonzero(odd):
            measure_from = self.itl.measure_from
            for j in odd.nonzero()[0].tolist():
                req = reqs[j]
                if req.first_token_s is None:
                    req.first_token_s = end_s
                elif req.request_id >= measure_from:
                    gaps.append(end_s - req.last_token_s)
        self.show_gaps(gaps)
        done = out >= (lane.limit if whole else lane.limit[caught])
        if not np.count_nonzero(done):
            return []
        gone = caught[done].tolist()
        finished = [lane_reqs[i] for i in gone]
        for req, i in zip(finished, gone, strict=True):  # its counters, then let go
            req.num_computed_tokens = int(lane.c[i])
            req.num_output_tokens = int(lane.out[i])
            req.last_token_s = end_s
            self.finish(req, end_s)
        running = self.running
        for i in reversed(gone):
            del running[i]
        lane.remove(gone)
        return finished

    def advance_decode_state(self, num_steps: int) -> None:
        # a fast-forwarded run moved the requests on and wrote every one back (it read the
        # lane's counters: running_lane): built again, without a sync
        self.lane = None

    def _schedule_objects(self, now: float) -> StepPlan:
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

    def admits_in_runs(self, batch: int) -> bool:
        # the waiting requests' admission as fast_forward.py plans it: FCFS, nothing to look up
        # (no prefix cache, no offload tiers), one chunk of min(threshold, budget) tokens in
        # blocks_for(n) = cdiv(n, block_size) new blocks; nothing arrives by the ready queue and
        # a finish frees its blocks at once (not a disaggregated prefill replica); fewer than
        # LANE_MIN running (from there on a step through the lane costs less than one a run
        # plans in Python, request by request)
        kv = self.kv
        return bool(
            batch < LANE_MIN
            and not (self.ready or self.priority or self.spec_k)
            and self.enable_chunked_prefill
            and self.sending is None
            and not kv.enable_caching
            and kv.pool.lower is None
            and kv.windowed is None
        )

    def decode_run_of(self, batch: int, waiting: bool) -> bool:
        if batch > self.max_num_batched_tokens:
            return False  # the budget would cut the batch
        # waiting requests are admitted only with a sequence slot and budget left
        return not waiting or batch >= min(self.max_num_seqs, self.max_num_batched_tokens)

    def admit_planned(self, req: Request, n: int, now: float) -> None:
        # _admit_waiting's calls for the head of the queue, which a run planned with n tokens
        assert self.waiting[0] is req
        hits, num_hit_tokens = self.kv.get_computed_blocks(req)
        if self.kv.allocate_slots(req, n, hits, num_hit_tokens, self.reserve_full_isl) is None:
            raise RuntimeError(f"fast-forward: request {req.request_id} found no block")
        self._admitted(req, num_hit_tokens, n, now, [], [])

    def finish_inside_runs(self) -> bool:
        # a finish frees a sequence slot and blocks: only the waiting queue could use them,
        # and a disaggregated prefill replica keeps a finished request's blocks to send them
        return not (self.waiting or self.ready) and self.sending is None

    def decode_run(self) -> bool:
        return self.decode_run_of(len(self.running), bool(self.waiting or self.ready))

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
        waiting = self.waiting
        ahead = self.planned_at is not None  # (ahead.py: requests this plan has not seen)
        i = 0
        while i < len(waiting) and budget > 0 and len(self.running) < self.max_num_seqs:
            req = waiting[i]
            if ahead and not self.visible(req):
                if not self.priority:
                    break  # FCFS: the ones behind it came later still
                i += 1  # by priority: the next one may have come earlier
                continue
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
        self.sync_requests()  # the objects' counters as the lane holds them
        super().check_invariants()
        if self.lane is not None and self.lane.requests == self.running:
            self.lane.check(self.running, self.kv.req_blocks)
        held = {r.request_id for r in self.held_requests()}
        assert set(self.kv.req_blocks) <= held, "blocks held by no request"
        if self.priority:
            ranks = [self._rank(r) for r in self.waiting]
            assert ranks == sorted(ranks)
        else:  # preempted requests go back to the front, new ones join the back
            statuses = [req.status for req in self.waiting]
            assert statuses == sorted(statuses, key=lambda s: s is Status.WAITING), statuses
