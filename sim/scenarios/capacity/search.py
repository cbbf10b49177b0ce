"""scenario=capacity: the most load a configuration serves within latency SLOs, and its cost.

Rate search (capacity.rate=null). The saturated throughput (every request of the workload
queued at t=0) bounds it: no rate at or above it is sustainable, so a probe there is
"overloaded" without simulating (a finite run would only show how far the queue got). A
probe at rate r simulates the workload at r with several seeds (common to every probe: the
same draws scaled, so probes differ by the rate alone) and computes per seed the margin = the
worse of p99 TTFT / slo.ttft_ms and p99 TPOT / slo.tpot_ms (and p99 E2E latency /
slo.e2el_ms when set). With a Student t interval over the seeds at capacity.confidence, the
probe *meets* the SLOs when the whole interval is below 1, *fails* when it is above, and is
*unclear* otherwise; an unclear probe gets more seeds, up to capacity.max_seeds. The search
starts at half the saturated throughput, brackets the capacity between a rate that meets and
one that does not, then bisects until the bracket is capacity.tolerance wide. A probe still
unclear at max_seeds is not shown to meet and bisection continues below it (noise_limited:
true); two in a row mean the simulation's own noise hides finer steps, and the search stops
there rather than return digits it cannot support. The answer is a bracket: capacity_rate,
the highest rate shown to meet the SLOs, and capacity_rate_upper, the lowest shown to miss
them (or overloaded); rates in between (unclear_rates) are too close to call with this many
requests and seeds.

Replica search (capacity.rate=R): the fewest replicas (parallel.dp) serving R req/s within the
SLOs, by doubling then bisection over the replica count, with the same probes.

Cost per million output tokens: GPUs (tp x pp x dp) x the price of a GPU-hour (the hardware
catalogue's gpu_hour_usd, or capacity.gpu_hour_usd) over the output tokens per hour produced at
the capacity.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import replace

from sim.config import SimConfig
from sim.errors import UserError
from sim.run.setup import Setup
from sim.scenarios.capacity.result import (
    CapacityResult,
    Probe,
    RateAnswer,
    ReplicaAnswer,
    cost_figures,
)
from sim.scenarios.fanout import fan_out
from sim.scenarios.probes import OPEN_LOOP, OVERLOADED, seed_figures, settle
from sim.specs.hardware import load_hardware


class Search:
    """The simulations of one capacity search, capacity.jobs at a time (sim/scenarios/fanout.py),
    and the probes tried so far."""

    def __init__(self, cfg: SimConfig, progress: Callable[[int, int], None] | None = None):
        self.cfg = replace(cfg, output=replace(cfg.output, report=False, progress=False))
        self.targets_ms = cfg.slo.targets()
        self.progress = progress
        self.simulations = 0
        self.probes: list[Probe] = []
        check(cfg)

    def run(self, configs: list[SimConfig]) -> list[dict[str, float]]:
        c = self.cfg.capacity
        out = fan_out(seed_figures, [(cfg,) for cfg in configs], c.jobs)
        self.simulations += len(configs)
        if self.progress:
            self.progress(len(self.probes), c.max_probes)
        return out

    def at(self, rate: float, replicas: int) -> SimConfig:
        w = self.cfg.workload
        return replace(
            self.cfg,
            workload=replace(w, rate=rate),
            parallel=replace(self.cfg.parallel, dp=replicas),
        )

    def probe(self, rate: float, replicas: int) -> Probe:
        """Simulate `rate` on `replicas` with the first `seeds` seeds, adding seeds while the
        verdict is unclear (up to max_seeds). A rate at or above what the replicas serve
        flat out is "overloaded" without simulating: the queue grows without end there, and a
        finite run would only show how far it got."""
        c = self.cfg.capacity
        if rate >= self.saturated * replicas:
            seeded = OVERLOADED
        else:
            seeded = settle(self.run, self.at(rate, replicas), self.targets_ms, c.seeds,
                            c.max_seeds, c.confidence)  # fmt: skip
        p = Probe(rate, replicas, seeded)
        self.probes.append(p)
        return p

    @functools.cached_property
    def saturated(self) -> float:
        """One replica's request throughput with every request queued at t=0: no rate at or
        above it is sustainable, whatever the SLO."""
        w = self.cfg.workload
        burst = replace(w, kind="burst", rate=None, concurrency=None)
        if w.kind == "trace":
            burst = replace(burst, lengths=w.path, path=None)
        cfg = replace(self.cfg, workload=burst, parallel=replace(self.cfg.parallel, dp=1))
        (s,) = self.run([cfg])
        return s["request_throughput"]


def check(cfg: SimConfig) -> None:
    targets = cfg.slo.targets()
    if not {"ttft", "tpot"} & set(targets):
        raise UserError(
            "scenario=capacity needs latency targets: set slo.ttft_ms and/or slo.tpot_ms "
            "(e.g. slo.ttft_ms=2000 slo.tpot_ms=50)"
        )
    if cfg.workload.kind not in OPEN_LOOP:
        raise UserError(
            f"scenario=capacity varies the request rate; workload={cfg.workload.kind} has none "
            f"(use one of {', '.join(OPEN_LOOP)})"
        )
    if cfg.disagg.enabled and cfg.capacity.rate is not None:
        raise UserError(
            "scenario=capacity capacity.rate=R searches parallel.dp, which disaggregated pools "
            "do not use; size the pools with scenario=disagg (or search the rate: leave "
            "capacity.rate unset)"
        )
    if cfg.capacity.max_seeds < cfg.capacity.seeds:
        raise UserError(
            f"capacity.max_seeds={cfg.capacity.max_seeds} is below capacity.seeds="
            f"{cfg.capacity.seeds}; raise max_seeds"
        )


def search_rate(s: Search) -> RateAnswer:
    """Bracket, then bisect, the highest rate whose probe meets the SLOs."""
    c = s.cfg.capacity
    dp = s.cfg.parallel.dp
    saturated = s.saturated * dp
    lo = hi = None  # the highest rate shown to meet; the lowest not shown to
    r = saturated * 0.5
    while lo is None and len(s.probes) < c.max_probes:  # the lower end: a rate that meets
        p = s.probe(r, dp)
        if p.verdict == "meets":
            lo = p
        else:
            hi = p if hi is None or p.rate < hi.rate else hi
            if r < saturated / 256:
                break
            r /= 4
    r = saturated
    while lo is not None and hi is None and len(s.probes) < c.max_probes:  # the upper end
        p = s.probe(r, dp)
        if p.verdict == "meets":
            lo, r = p, r * 2
        else:
            hi = p
    unclear_in_a_row = 0
    stopped = "no rate meets the SLOs" if lo is None else "max_probes"
    while lo is not None and hi is not None and len(s.probes) < c.max_probes:
        if (hi.rate - lo.rate) / lo.rate <= c.tolerance:
            stopped = "tolerance"
            break
        p = s.probe((lo.rate + hi.rate) / 2, dp)
        if p.verdict == "meets":
            lo, unclear_in_a_row = p, 0
        else:  # fails, or within the noise even at max_seeds: not shown to meet
            hi = p
            unclear_in_a_row = unclear_in_a_row + 1 if p.verdict == "unclear" else 0
            if unclear_in_a_row == 2:  # twice in a row: finer steps are below the noise
                stopped = "noise"
                break
    return _rate_answer(s, lo, stopped)


def _rate_answer(s: Search, lo: Probe | None, stopped: str) -> RateAnswer:
    above = [p.rate for p in s.probes if lo is None or p.rate > lo.rate]
    fails = [
        p.rate
        for p in s.probes
        if p.verdict in ("fails", "overloaded") and (lo is None or p.rate > lo.rate)
    ]
    return RateAnswer(
        saturated_rate_per_replica=s.saturated,
        replicas=s.cfg.parallel.dp,
        at_capacity=lo,
        capacity_rate_upper=min(fails) if fails else None,
        lowest_rate_not_shown_to_meet=min(above) if above else None,
        unclear_rates=tuple(sorted(p.rate for p in s.probes if p.verdict == "unclear")),
        stopped_by=stopped,
    )


def search_replicas(s: Search, rate: float) -> ReplicaAnswer:
    """The fewest replicas whose probe at `rate` meets the SLOs (an unclear probe counts as
    not meeting them: the answer errs towards enough replicas). None up to
    capacity.max_replicas: a UserError saying what they miss."""
    c = s.cfg.capacity
    good: Probe | None = None
    bad: Probe | None = None
    n = 1
    while good is None and n <= c.max_replicas:
        p = s.probe(rate, n)
        if p.verdict == "meets":
            good = p
        else:
            bad = p
            n *= 2
    if good is None:
        last = bad.replicas if bad else 0
        raise UserError(
            f"capacity.rate={rate:g}: even {last} replicas miss the SLOs "
            f"({_miss(bad, s.targets_ms)}); raise capacity.max_replicas or relax slo.*"
        )
    while bad is not None and good.replicas - bad.replicas > 1:
        p = s.probe(rate, (good.replicas + bad.replicas) // 2)
        if p.verdict == "meets":
            good = p
        else:
            bad = p
    return ReplicaAnswer(
        rate=rate,
        saturated_rate_per_replica=s.saturated,
        at_capacity=good,
        unclear_replicas=tuple(sorted(p.replicas for p in s.probes if p.verdict == "unclear")),
    )


def _miss(p: Probe | None, targets_ms: dict[str, float]) -> str:
    if p is None:
        return "no probe ran"
    if p.verdict == "overloaded":
        return "the rate is above what they serve flat out"
    over = [
        f"p99 {m.upper()} {p.seeded.mean(f'p99_{m}_ms'):,.0f} ms > {t:g}"
        for m, t in targets_ms.items()
        if p.seeded.mean(f"p99_{m}_ms") > t
    ]
    return ", ".join(over) or "too close to call"


def run_capacity(
    cfg: SimConfig, progress: Callable[[int, int], None] | None = None
) -> CapacityResult:
    started = time.perf_counter()
    setup = Setup.from_config(cfg)  # a configuration that cannot run fails here, once
    s = Search(cfg, progress)
    rate = cfg.capacity.rate
    answer = search_rate(s) if rate is None else search_replicas(s, rate)
    hardware = load_hardware(cfg.hardware)
    at = answer.at_capacity
    cost = cost_figures(cfg, hardware, answer.replicas, answer.capacity_rate,
                        at.output_throughput_at_rate if at is not None else None)  # fmt: skip
    return CapacityResult(
        answer=answer,
        cost=cost,
        targets_ms=s.targets_ms,
        confidence=cfg.capacity.confidence,
        tolerance=cfg.capacity.tolerance,
        probes=tuple(s.probes),
        simulations_run=s.simulations,
        model=setup.model.name,
        hardware=hardware.name,
        engine=f"{setup.settings.engine}@{setup.settings.version}",
        tp=cfg.parallel.tp,
        pp=cfg.parallel.pp,
        workload=cfg.workload.kind,
        num_requests=cfg.workload.num_requests,
        wall_time_s=time.perf_counter() - started,
    )
