"""Planning a step while the one before runs: SGLang's overlap scheduler and vLLM V1's async
scheduling (PlanAhead, a mixin of both families' schedulers).

Both engines plan step n + 1 as step n starts, so a request that reaches them after step n
started is first seen by the plan of step n + 2:

  * SGLang (managers/scheduler.py event_loop_overlap): receive, plan and launch step n + 1,
    then wait for step n's result and send its tokens;
  * vLLM V1 with async scheduling (on by default from 0.14.0: config/vllm.py
    VllmConfig.__post_init__; v1/engine/core.py EngineCore.step_with_batch_queue, read in the
    0.18.0 wheel): a batch queue of two (the executor's max_concurrent_batches, 2 with async
    scheduling and one pipeline stage, else the pipeline's depth, whose own model covers it):
    schedule and launch the next batch, then block on the oldest, reading the input queue in
    between.
    LLMServingSim's vLLM 0.19.0 runs show it in their per-request timestamps: a request is
    scheduled as soon as the engine reads it between steps, and its first token comes a
    median 2.6 running TPOTs later (Qwen3-30B-A3B on an RTX PRO 6000, 253 requests; 2.9 for
    Llama-3.1-8B): the step already running and its own (docs/validation.md, Issue 43).

A client's next request, sent as its last token leaves, reaches the engine after the step
already planned and after the plan made as the next one starts (the client and the tokenizer
take their time; the engine plans at once): its first token comes three steps after the send,
one without planning ahead. When a plan finds nothing to run, nothing was launched then: the
engine plans as requests come, first with what was sent before that moment, then, still
nothing, with everything (an idle engine woken by an arrival or a burst). Whatever a plan saw
waiting stays visible to the next one.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.engines.settings import EngineSettings
from sim.kv.manager import KVCacheManager
from sim.schedulers.base import SchedulerOptions, StepPlan
from sim.workload.request import Request


class PlanAhead:
    """The planning state and rules, mixed in before SchedulerBase; a family calls _plan_step
    from schedule() and asks visible() of each waiting request it would admit. On with
    settings.async_scheduling and one pipeline stage (with more, vLLM's batch queue holds the
    pipeline's micro-batches, which the driver models); off, every request is visible at once."""

    plans_ahead = False
    last_start: float | None = None  # when the last step that ran something started
    planned_at: float | None = None  # when this step was planned (None: seeing all)
    open_plan = False  # the last step was planned seeing every waiting request
    plan_now = False  # this step is planned as it starts (nothing was launched before)

    def __init__(
        self,
        settings: EngineSettings,
        kv: KVCacheManager,
        bytes_per_block: int = 0,
        options: SchedulerOptions = SchedulerOptions(),
    ):
        super().__init__(settings, kv, bytes_per_block, options)  # type: ignore[call-arg]
        self.plans_ahead = settings.async_scheduling and options.pp == 1
        self.arrived: set[int] = set()  # requests added since the last step was planned

    def add_request(self, req: Request) -> None:
        super().add_request(req)  # type: ignore[misc]
        if self.plans_ahead:
            self.arrived.add(req.request_id)

    def _plan_step(
        self,
        now: float,
        plan: Callable[[float], StepPlan],
        replan: Callable[[float], StepPlan | None] | None = None,
    ) -> StepPlan:
        """The step starting at `now`, planned by `plan(now)` as the step before started;
        when that runs nothing, planned again by `replan(now)` (a StepPlan, or None for
        nothing new; `plan` by default) with what was sent before `now`, then with all."""
        replan = replan or plan
        self.planned_at = self.last_start if self.plans_ahead else None
        self.plan_now = False
        step = plan(now)
        if self.planned_at is not None and step.batch_size == 0 and not step.num_preempted:
            self.planned_at, self.plan_now = now, True
            step = replan(now) or step
            if step.batch_size == 0 and not step.num_preempted:
                self.planned_at = None
                step = replan(now) or step
        self.last_start = now if step.batch_size > 0 else None
        self.open_plan = self.planned_at is None
        if self.plans_ahead and self.arrived:
            self.arrived = set()
        return step

    def visible(self, req: Request) -> bool:
        """Whether this step's plan sees waiting `req`: what was sent before the step before
        started and has reached the engine since (a front end may hold it longer), or what
        that step's plan saw waiting; a step planned as it starts sees what was sent before."""
        t = self.planned_at
        if t is None:
            return True
        if self.plan_now:
            return req.arrival_s < t
        return self._sees(req, t)

    def sees_next(self, req: Request) -> bool:
        """Whether the next step's plan, made as the last step started, sees waiting `req`
        (visible() before schedule() is called: a fast-forwarded run's first step)."""
        return self.last_start is None or self._sees(req, self.last_start)

    def _sees(self, req: Request, t: float) -> bool:
        return req.request_id not in self.arrived and (self.open_plan or req.arrival_s < t)

    def ran_until(self, last_start: float, steps: int) -> None:
        """A fast-forwarded run of `steps` steps ran, the last starting at `last_start`: its
        steps were planned ahead, but a first one after an idle engine, which saw all."""
        if self.plans_ahead:
            self.open_plan = steps == 1 and self.last_start is None
            self.last_start = last_start
            self.arrived = set()
