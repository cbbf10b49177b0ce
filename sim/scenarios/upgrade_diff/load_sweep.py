"""upgrade_diff's load sweep: before and after at several loads around the before version's
capacity (request rates x its saturated throughput, or concurrencies x the configured one),
and the lowest load at which a metric's regression appears."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from sim.scenarios.upgrade_diff.outcomes import METRICS, adverse, pct_change, run_tasks
from sim.scenarios.upgrade_diff.plan import Plan
from sim.workload.traces import load_trace

APPEARS_PCT = 5.0  # a change smaller than this at a load does not count as appearing there


@dataclass(frozen=True, slots=True)
class LoadPoint:
    factor: float  # x the before version's capacity (rate) or the configured concurrency
    rate: float | None  # requests per second (when the rate is swept)
    concurrency: int | None  # requests in flight (when the concurrency is swept)
    before: dict[str, float]  # metric -> value
    after: dict[str, float]
    change_pct: dict[str, float]

    @property
    def summary(self) -> dict:
        load = {"rate": self.rate} if self.rate is not None else {"concurrency": self.concurrency}
        return (
            {"factor": self.factor}
            | load
            | {
                "before": dict(self.before),
                "after": dict(self.after),
                "change_pct": dict(self.change_pct),
            }
        )


@dataclass(frozen=True, slots=True)
class LoadSweep:
    swept: str  # "rate" | "concurrency"
    capacity_rps: float | None  # the before version's saturated throughput (rate sweeps)
    points: tuple[LoadPoint, ...]  # lowest load first
    simulations: int

    @property
    def summary(self) -> dict:
        return {
            "swept": self.swept,
            "capacity_rps": self.capacity_rps,
            "points": [p.summary for p in self.points],
            "simulations": self.simulations,
        }


def load_points(plan: Plan, factors) -> tuple[str, list[dict]]:
    """(what is swept, [{factor, workload}]) around the before version's capacity: request
    rates x its saturated throughput (open loop), or concurrencies x the configured one."""
    w = plan.cfg.workload
    if w.kind == "closed_loop" or (w.kind == "bench_json" and _bench_concurrency(plan)):
        base = w.concurrency or _bench_concurrency(plan)
        points = [
            {"factor": f, "concurrency": max(1, round(base * f))} for f in sorted(set(factors))
        ]
        return "concurrency", points
    return "rate", [{"factor": f} for f in sorted(set(factors))]


def _bench_concurrency(plan: Plan) -> int | None:
    if plan.cfg.workload.kind != "bench_json":
        return None
    return load_trace(plan.cfg.workload.path).max_concurrency


def point_configs(plan: Plan, points: list[dict], capacity: float | None) -> list:
    """The study's config at each load point (rates as `capacity` x the point's factor; each
    point's "rate" set on it)."""
    out = []
    for p in points:
        w = plan.cfg.workload
        if capacity is not None:
            p["rate"] = round(capacity * p["factor"], 4)
            w = _open_loop(w, p["rate"])
        else:
            w = replace(w, concurrency=p["concurrency"])
        out.append(replace(plan.cfg, workload=w))
    return out


def new_runs(plan: Plan, factors, capacity: float | None) -> int:
    """Simulations the sweep adds to the attribution's: two a load point, but for a point at
    the study's own load (a closed loop's configured concurrency, or an auto rate the sweep
    meets), whose pair is the attribution's first seed's. `capacity`: as load_sweep's (None
    for a concurrency sweep; for a rate sweep, an upper bound is 2 a point until it is known)."""
    what, points = load_points(plan, factors)
    if what == "rate" and capacity is None:
        return 2 * len(points)
    return 2 * sum(cfg != plan.cfg for cfg in point_configs(plan, points, capacity))


def _open_loop(w, rate: float):
    """The workload's requests at a Poisson `rate` (a trace keeps its lengths)."""
    if w.kind == "trace":
        return replace(w, kind="poisson", lengths=w.path, path=None, rate=rate)
    if w.kind == "bench_json":
        return replace(w, rate=rate, burstiness=1.0)
    kind = w.kind if w.kind in ("poisson", "gamma", "constant") else "poisson"
    return replace(w, kind=kind, rate=rate, concurrency=None)


def capacity_rps(plan: Plan, jobs, progress=None, cache: Path | None = None) -> float:
    """The before version's saturated request throughput: every request queued at t=0."""
    return capacity_outcome(plan, progress, cache)["request_throughput"]


def capacity_outcome(plan: Plan, progress=None, cache: Path | None = None) -> dict:
    """The before version's run with every request of the workload queued at t=0 (seed of
    plan's config): its request throughput is the capacity loads are scaled by."""
    w = plan.cfg.workload
    burst = replace(w, kind="burst", rate=None, concurrency=None)
    if w.kind in ("trace",):
        burst = replace(burst, lengths=w.path, path=None)
    if w.kind == "bench_json":
        burst = replace(w, rate=float("inf"), concurrency=None)
    cfg = replace(plan.cfg, workload=burst)
    (out,) = run_tasks([(cfg, ())], plan.before, plan.after, plan.changes, 1, progress, cache)
    return out


def load_sweep(
    plan: Plan,
    factors,
    jobs,
    progress=None,
    cache: Path | None = None,
    capacity: float | None = None,
) -> LoadSweep:
    """Before and after (seed of the first attribution seed) at each load. `capacity`: the
    before version's, when the caller has simulated it already (else a rate sweep runs it);
    either way a rate sweep counts it among its simulations."""
    what, points = load_points(plan, factors)
    if what == "rate" and capacity is None:
        capacity = capacity_rps(plan, jobs, cache=cache)
    if what != "rate":
        capacity = None
    everything = tuple(range(len(plan.changes)))
    tasks = []
    for cfg in point_configs(plan, points, capacity):
        tasks += [(cfg, ()), (cfg, everything)]
    out = run_tasks(tasks, plan.before, plan.after, plan.changes, jobs, progress, cache)
    rows = []
    for k, p in enumerate(points):
        b, a = out[2 * k], out[2 * k + 1]
        rows.append(
            LoadPoint(
                p["factor"],
                p.get("rate"),
                p.get("concurrency"),
                {m: b[m] for m in METRICS},
                {m: a[m] for m in METRICS},
                {m: pct_change(b[m], a[m]) for m in METRICS},
            )
        )
    # the capacity run its rates are scaled by (a point at the study's own load is the
    # attribution's first seed's pair, simulated and kept already: not counted again)
    runs = new_runs(plan, factors, capacity) + (capacity is not None)
    return LoadSweep(what, capacity, tuple(rows), runs)


def appears_at(sweep: LoadSweep, metric: str) -> LoadPoint | None:
    """The lowest load at which the metric got at least APPEARS_PCT worse."""
    for p in sweep.points:
        if adverse(metric, p.change_pct[metric]) >= APPEARS_PCT:
            return p
    return None
