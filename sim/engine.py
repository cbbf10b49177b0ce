"""One replica of a serving engine: scheduler + KV cache + cost model, stepped by a driver.

Engine.step(now) plans a step, prices it, applies its outcome as of now + dt and returns dt;
it knows nothing of simpy, so a plain loop can drive it as well as the simpy driver.
"""

from __future__ import annotations

from sim.cost import CostModel
from sim.kv_cache import KVCacheManager
from sim.memory import MemoryPlan
from sim.metrics import StepLog
from sim.request import Request, Status
from sim.scheduler import VllmV1Scheduler
from sim.settings import EngineSettings


class Engine:
    def __init__(
        self,
        settings: EngineSettings,
        memory: MemoryPlan,
        cost: CostModel,
        steps: StepLog,
        replica: int = 0,
    ):
        kv = KVCacheManager(memory.num_blocks, settings.block_size, settings.enable_prefix_caching)
        self.scheduler = VllmV1Scheduler(settings, kv)
        self.kv = kv
        self.cost = cost
        self.steps = steps
        self.replica = replica
        self.max_model_len = settings.max_model_len

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    @property
    def load(self) -> int:
        """vLLM's data-parallel balancing score: waiting requests weigh four times running."""
        return 4 * len(self.scheduler.waiting) + len(self.scheduler.running)

    def add_request(self, req: Request) -> bool:
        """Queue `req`; False (and REJECTED) when prompt + output exceed max_model_len, as the
        OpenAI server refuses such a request."""
        if req.prompt_len + req.max_output_len > self.max_model_len:
            req.status = Status.REJECTED
            return False
        self.scheduler.add_request(req)
        return True

    def step(self, now: float) -> tuple[float, list[Request]]:
        """Run one step starting at `now`: (its duration, the requests it finished)."""
        sched = self.scheduler
        plan = sched.schedule(now)
        if plan.batch_size == 0 and plan.num_preempted == 0:
            raise RuntimeError(f"engine {self.replica} has work but scheduled nothing at {now}")
        cost = self.cost.step_cost(plan)
        dt = cost.total_s
        finished = sched.update_from_output(plan, now + dt)
        self.steps.record(
            self.replica,
            now,
            cost,
            plan,
            self.kv.num_used_blocks,
            len(sched.running),
            len(sched.waiting),
        )
        return dt, finished
