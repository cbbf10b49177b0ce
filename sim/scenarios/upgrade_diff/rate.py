"""workload.rate=auto: the request rate an upgrade study runs at, chosen from the before
version's capacity on this workload.

The capacity is the before version's request throughput with every request of the workload
queued at once (its saturated throughput: the run the load sweep scales its rates by,
load_sweep.capacity_rps, simulated once and shared by both). The rate is
upgrade.auto_rate_fraction (0.7 by default) of it. It is the cheapest honest estimate: one
simulation of the very requests the study runs, on the first seed. scenario=capacity's search
(the highest rate whose p99 latencies meet SLOs) takes tens of simulations and needs SLOs;
the saturated throughput needs neither, and below it the queue stays bounded. With few
requests it errs low (the longest answers finish alone at the end, and weigh more in a short
run), so the rate chosen errs on the side of an unloaded engine. What workload.rate=auto
refuses (a workload without a rate, a recorded baseline) is checked by plan.make_plan.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.config import AUTO
from sim.scenarios.upgrade_diff.plan import Plan


@dataclass(frozen=True, slots=True)
class AutoRate:
    """The rate workload.rate=auto chose, and from what."""

    rate: float  # requests per second the study runs at
    fraction: float  # upgrade.auto_rate_fraction
    capacity_rps: float  # the before version's request throughput, every request queued
    of: str  # the before version, name@version
    requests: int  # requests in that run
    seed: int

    @property
    def words(self) -> str:
        return (
            f"workload.rate=auto: {self.rate:.2f} req/s, {self.fraction:g} x {self.of}'s "
            f"capacity of {self.capacity_rps:.2f} req/s (its request throughput with all "
            f"{self.requests:,} requests of this workload queued at once, seed {self.seed})"
        )

    @property
    def summary(self) -> dict:
        return {
            "asked": AUTO,
            "rate": self.rate,
            "fraction": self.fraction,
            "capacity_rps": self.capacity_rps,
            "of": self.of,
            "requests": self.requests,
            "seed": self.seed,
            "how": "the before version simulated with every request queued at once "
            "(load_sweep.capacity_rps); rate = fraction x its request throughput",
        }


def with_auto_rate(plan: Plan, capacity: float, requests: int) -> tuple[Plan, AutoRate]:
    """The plan at upgrade.auto_rate_fraction x `capacity` (the before version's saturated
    request throughput on plan's workload), with a note saying so."""
    fraction = plan.cfg.upgrade.auto_rate_fraction
    chosen = AutoRate(
        rate=round(capacity * fraction, 4),
        fraction=fraction,
        capacity_rps=capacity,
        of=f"{plan.before.engine}@{plan.before.version}",
        requests=requests,
        seed=plan.cfg.seed,
    )
    cfg = replace(plan.cfg, workload=replace(plan.cfg.workload, rate=chosen.rate))
    return replace(plan, cfg=cfg, notes=(*plan.notes, chosen.words)), chosen
