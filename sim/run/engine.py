"""One replica of a serving engine: scheduler + KV cache + cost model, stepped by a driver.

Engine.step(now) plans a step, prices it, applies its outcome as of now + dt and returns dt;
Engine.advance(now, horizon) may instead jump over a run of decode-only steps
(sim/run/fast_forward.py). The engine knows nothing of simpy, so a plain loop can drive it as well
as the simpy driver. With
pipeline parallelism a step is a micro-batch: start_step plans and prices it, finish_step
applies it when it leaves the last stage, and up to pp micro-batches are in flight.
"""

from __future__ import annotations

from dataclasses import replace

from sim.cost.first_use import FirstUse
from sim.cost.step import CostModel, StepCost
from sim.engines.settings import EngineSettings
from sim.engines.speculative import drafts_per_step
from sim.kv.manager import KVCacheManager
from sim.kv.memory import MemoryPlan
from sim.kv.offload import tiers_for
from sim.run.fast_forward import Feed, fast_forward
from sim.run.metrics import StepLog
from sim.run.phases import PhaseLog
from sim.schedulers.base import Scheduler, SchedulerOptions, StepPlan
from sim.schedulers.sglang import SglangScheduler
from sim.schedulers.teaching import OrcaScheduler, StaticScheduler
from sim.schedulers.trtllm import TrtllmScheduler
from sim.schedulers.vllm_v0 import VllmV0Scheduler
from sim.schedulers.vllm_v1 import VllmV1Scheduler
from sim.workload.generate import Workload
from sim.workload.request import Request, Status

SCHEDULERS: dict[str, type[Scheduler]] = {
    "vllm_v0": VllmV0Scheduler,
    "vllm_v1": VllmV1Scheduler,
    "sglang": SglangScheduler,
    "trtllm": TrtllmScheduler,
    "orca": OrcaScheduler,
    "static": StaticScheduler,
}
PP_SCHEDULERS = ("vllm_v1",)  # families whose pipeline-parallel scheduling is modelled


class Engine:
    """One replica, whole from its constructor: its scheduler family (settings.scheduler) over a
    KV cache manager of memory.num_blocks (with offload tiers when the settings ask), priced by
    `cost`, recording its steps into `steps` (and each request's phases into `phases` when a
    run is traced: then every step is simulated one by one)."""

    def __init__(
        self,
        settings: EngineSettings,
        memory: MemoryPlan,
        cost: CostModel,
        steps: StepLog,
        replica: int = 0,
        pp: int = 1,
        fast_forward: bool = True,
        host_bytes_per_s: float = 0.0,
        options: SchedulerOptions = SchedulerOptions(),
        phases: PhaseLog | None = None,
    ):
        assert pp == 1 or settings.scheduler in PP_SCHEDULERS  # checked in Setup (check_parallel)
        lower = tiers_for(settings, memory.bytes_per_block, host_bytes_per_s)
        kv = KVCacheManager(
            memory.num_blocks,
            memory.block_size,
            settings.enable_prefix_caching,
            lower,
            memory if memory.windows else None,
        )
        self.scheduler: Scheduler = SCHEDULERS[settings.scheduler](
            settings, kv, memory.bytes_per_block, options
        )
        self.kv = kv
        self.cost = cost
        self.steps = steps
        self.replica = replica
        self.pp = pp
        self.max_model_len = settings.max_model_len
        self.phases = phases
        # kernels compiled while serving, charged to the step that first needs each
        # (sim/cost/first_use.py); None where the release compiles nothing while serving
        self.first_use = FirstUse.of(settings, cost.pricer.hardware, cost.terms, cost.dense_dtype)
        # fast-forward replays one token a step: not with speculative decoding, nor when each
        # step is handed to the phase log, nor when a step may compile a kernel
        self.fast_forward = (
            fast_forward
            and pp == 1
            and not drafts_per_step(settings)
            and phases is None
            and self.first_use is None
        )
        self.num_fast_forwarded_steps = 0  # steps simulated inside fast-forwarded runs
        # whether a run may go on past a finish, and follow a step in the same call: its
        # driver sets it when a finish is no event to anyone else (no concurrency cap waits
        # for it, no time limit can fall between the finish and the run's end) and it does
        # nothing between steps; the scheduler has its say too (finish_inside_runs)
        self.finish_inside_runs = False

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    def cached_prefix_tokens(self, req: Request) -> int:
        """Tokens of `req`'s prompt this replica's prefix cache holds now."""
        return self.kv.get_computed_blocks(req, admit=False)[1]

    def add_request(self, req: Request) -> bool:
        """Queue `req`; False (and REJECTED, with the reason) when the engine refuses it:
        prompt + output exceed max_model_len, as the OpenAI server refuses such a request, or
        the scheduler can never run it (say, a prompt over TensorRT-LLM's max_num_tokens
        without chunked context)."""
        reason = None
        if req.prompt_len + req.max_output_len > self.max_model_len:
            reason = (
                f"prompt {req.prompt_len} + output {req.max_output_len} tokens exceed "
                f"max_model_len {self.max_model_len}"
            )
        else:
            reason = self.scheduler.admission_error(req)
        if reason is not None:
            req.status = Status.REJECTED
            req.reject_reason = reason
            return False
        self.scheduler.add_request(req)
        return True

    def start_step(self, now: float) -> tuple[StepPlan, StepCost]:
        """Plan and price the next step (or micro-batch) starting at `now`."""
        plan = self.scheduler.schedule(now)
        cost = self.cost.step_cost(plan)
        if self.first_use is not None:  # host time on the step's critical path
            tokens = plan.num_prefill_tokens + plan.num_decode_tokens
            seconds = self.first_use.charge(tokens, plan.num_prefill_tokens == 0, now)
            if seconds:
                cost = replace(cost, cpu_serial_s=cost.cpu_serial_s + seconds)
        return plan, cost

    def finish_step(self, plan: StepPlan, cost: StepCost, start_s: float, end_s: float):
        """Apply a step's outcome as of `end_s`; return the requests it finished."""
        sched = self.scheduler
        finished = sched.update_from_output(plan, end_s)
        if self.phases is not None:
            self.phases.record(self.replica, plan, start_s, end_s)
        self.steps.record(
            self.replica,
            start_s,
            end_s - start_s,
            cost,
            plan,
            self.kv.num_used_blocks,
            len(sched.running),
            len(sched.waiting),
        )
        return finished

    @property
    def takes_arrivals(self) -> bool:
        """Whether fast-forwarded runs can admit requests that arrive while they go on (the
        driver then hands this replica its arrivals: `feed` in advance). Asked before the run
        starts; a run that cannot admit for now (Scheduler.admits_in_runs, asked again at each
        advance and as a run's batch grows) stops before the next arrival, as without a feed."""
        return self.fast_forward and self.scheduler.admits_in_runs(0)

    def advance(
        self, now: float, horizon: float, feed: Feed | None = None
    ) -> tuple[list[float], list[Request]]:
        """Run one step from `now`, or, with fast-forward on, a run of decode-only steps that
        all start before `horizon` (the next event from outside this replica): (the steps'
        durations, the requests they finished). Both give the same results to the bit. With
        `feed` (takes_arrivals: one replica, no concurrency cap, no time limit), the requests
        that arrive before a step starts are sent by the feed and seen by that step, so runs
        go on past arrivals."""
        if not self.fast_forward:
            dt, finished = self.step(now)
            return [dt], finished
        run = fast_forward(self, now, horizon, feed)
        if run is not None:
            return run
        dt, finished = self.step(now)  # (an admission, say) and a run may follow it at once
        # where the driver does nothing between two steps but record finishes (not the
        # disaggregated one: its decode replicas admit KV transfers after every step)
        if not self.finish_inside_runs or now + dt >= horizon:
            return [dt], finished
        run = fast_forward(self, now + dt, horizon, feed)
        if run is None:
            return [dt], finished
        return [dt, *run[0]], finished + run[1]

    def step(self, now: float) -> tuple[float, list[Request]]:
        """Run one step starting at `now`: (its duration, the requests it finished)."""
        plan, cost = self.start_step(now)
        if plan.batch_size == 0 and plan.num_preempted == 0:
            raise RuntimeError(f"engine {self.replica} has work but scheduled nothing at {now}")
        dt = cost.total_s
        return dt, self.finish_step(plan, cost, now, now + dt)


def warm_prefix_caches(engines: list[Engine], workload: Workload) -> None:
    """workload.cache_warm: each replica's prefix cache as an earlier run of the same prompts
    left it, sent in the workload's order; with several replicas the earlier run is taken as
    routed round robin (replica k holds requests k, k + n, ...), which an actual router of
    idle replicas in a uniform workload comes close to."""
    n = len(engines)
    for k, engine in enumerate(engines):
        for i in range(k, len(workload), n):
            engine.kv.warm(workload.request(i))
