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
import math
import os
import time
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import stats

from sim.config import SimConfig
from sim.errors import UserError

OPEN_LOOP = ("poisson", "gamma", "constant", "trace")
KEPT = (
    "p99_ttft_ms",
    "p99_tpot_ms",
    "p99_e2el_ms",
    "median_ttft_ms",
    "median_tpot_ms",
    "request_throughput",
    "output_throughput",
    "completed",
    "failed",
    "total_output_tokens",
)


def margin(summary: dict, targets: dict[str, float]) -> float:
    """The worse p99 / target over the SLOs set: <= 1 when the p99 request meets them all."""
    return max(summary[f"p99_{m}_ms"] / t for m, t in targets.items())


def verdict(margins: list[float], confidence: float) -> tuple[str, float, float]:
    """("meets" | "fails" | "unclear", mean margin, half-width of its t interval)."""
    x = np.asarray(margins, dtype=np.float64)
    mean = float(x.mean())
    if len(x) < 2:
        return "unclear", mean, math.inf
    sd = float(x.std(ddof=1))
    half = float(stats.t.ppf(0.5 + confidence / 2, len(x) - 1)) * sd / math.sqrt(len(x))
    if mean + half < 1.0:
        return "meets", mean, half
    if mean - half > 1.0:
        return "fails", mean, half
    return "unclear", mean, half


def settle(p, run, cfg: SimConfig, targets: dict, seeds: int, max_seeds: int, confidence) -> None:
    """Simulate probe `p` (a Seeded) as `cfg`
    with seeds cfg.seed, cfg.seed + 1, ... (`run(configs)` returns their summaries) until its
    verdict is clear or `max_seeds` are in, doubling the seeds each time. With one seed in all
    there is no interval: the margin decides."""
    want = seeds
    while True:
        p.runs += run([replace(cfg, seed=cfg.seed + s) for s in range(len(p.runs), want)])
        margins = [margin(r, targets) for r in p.runs]
        if len(margins) == 1 and max_seeds == 1:
            p.verdict = "meets" if margins[0] < 1 else "fails"
            p.mean_margin, p.half_width = margins[0], math.nan
        else:
            p.verdict, p.mean_margin, p.half_width = verdict(margins, confidence)
        if p.verdict != "unclear" or want >= max_seeds:
            return
        want = min(max_seeds, want * 2)


@dataclass(kw_only=True)
class Seeded:
    """Per-seed summaries of one configuration tried and the verdict over them (settle fills
    them); scenario=capacity's and scenario=disagg's probes add what they vary."""

    runs: list[dict] = field(default_factory=list)
    verdict: str = "unclear"
    mean_margin: float = math.nan
    half_width: float = math.nan

    def mean(self, key: str) -> float:
        return float(np.mean([r[key] for r in self.runs])) if self.runs else math.nan

    def verdict_record(self) -> dict:
        return {
            "seeds": len(self.runs),
            "verdict": self.verdict,
            "margin": self.mean_margin,
            "margin_half_width": self.half_width,
        }


@dataclass
class Probe(Seeded):
    """One rate (or replica count) tried."""

    rate: float
    replicas: int

    def record(self) -> dict:
        return {
            "rate": self.rate,
            "replicas": self.replicas,
            **self.verdict_record(),
            "p99_ttft_ms": self.mean("p99_ttft_ms"),
            "p99_tpot_ms": self.mean("p99_tpot_ms"),
            "request_throughput": self.mean("request_throughput"),
            "output_throughput": self.mean("output_throughput"),
        }


def _summary(cfg: SimConfig) -> dict:
    """One simulation (in a joblib worker): the figures a probe needs."""
    from sim.run.simulate import simulate

    s = simulate(cfg).summary
    return {k: s[k] for k in KEPT}


class Search:
    """The simulations of one capacity search, run `jobs` at a time."""

    def __init__(self, cfg: SimConfig, progress=None):
        c = cfg.capacity
        self.cfg = replace(cfg, output=replace(cfg.output, report=False, progress=False))
        self.targets = {m: t for m, t in cfg.slo.targets().items()}
        self.jobs = c.jobs or os.cpu_count() or 1
        self.progress = progress
        self.simulations = 0
        self.probes: list[Probe] = []
        check(cfg)

    def run(self, configs: list[SimConfig]) -> list[dict]:
        from joblib import Parallel, delayed

        n = min(self.jobs, len(configs))
        if n <= 1:
            out = [_summary(c) for c in configs]
        else:
            out = list(Parallel(n_jobs=n)(delayed(_summary)(c) for c in configs))
        self.simulations += len(configs)
        if self.progress:
            self.progress(len(self.probes), self.cfg.capacity.max_probes)
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
        p = Probe(rate, replicas)
        if rate >= self.saturated * replicas:
            p.verdict = "overloaded"
            self.probes.append(p)
            return p
        settle(p, self.run, self.at(rate, replicas), self.targets, c.seeds, c.max_seeds,
               c.confidence)  # fmt: skip
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


def search_rate(s: Search) -> dict:
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
    return _rate_result(s, lo, saturated) | {"stopped_by": stopped}


def _rate_result(s: Search, lo: Probe | None, saturated: float) -> dict:
    above = [p.rate for p in s.probes if lo is None or p.rate > lo.rate]
    fails = [
        p.rate
        for p in s.probes
        if p.verdict in ("fails", "overloaded") and (lo is None or p.rate > lo.rate)
    ]
    unclear = sorted(p.rate for p in s.probes if p.verdict == "unclear")
    out = {
        "mode": "rate",
        "saturated_rate": saturated,
        "saturated_rate_per_replica": s.saturated,
        "capacity_rate": lo.rate if lo else 0.0,
        "capacity_rate_upper": min(fails) if fails else None,
        "lowest_rate_not_shown_to_meet": min(above) if above else None,
        "unclear_rates": unclear,
        "noise_limited": bool(unclear),
        "replicas": s.cfg.parallel.dp,
    }
    if lo is not None:
        out |= _at_capacity(lo)
    return out


def _at_capacity(p: Probe) -> dict:
    """Figures at the capacity. Served steadily at rate r, output tokens leave at r x the mean
    answer length; the run's own output_throughput (tokens over its whole duration, the drain
    at the end included) is kept beside it."""
    per_request = sum(r["total_output_tokens"] for r in p.runs) / max(
        sum(r["completed"] for r in p.runs), 1
    )
    return {
        "output_tokens_per_request": per_request,
        "output_throughput_at_capacity": p.rate * per_request,
        "measured_output_throughput_at_capacity": p.mean("output_throughput"),
        "request_throughput_at_capacity": p.mean("request_throughput"),
        "p99_ttft_ms_at_capacity": p.mean("p99_ttft_ms"),
        "p99_tpot_ms_at_capacity": p.mean("p99_tpot_ms"),
    }


def search_replicas(s: Search, rate: float) -> dict:
    """The fewest replicas whose probe at `rate` meets the SLOs (an unclear probe counts as
    not meeting them: the answer errs towards enough replicas)."""
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
            f"({_miss(bad, s.targets)}); raise capacity.max_replicas or relax slo.*"
        )
    while bad is not None and good.replicas - bad.replicas > 1:
        p = s.probe(rate, (good.replicas + bad.replicas) // 2)
        if p.verdict == "meets":
            good = p
        else:
            bad = p
    return {
        "mode": "replicas",
        "rate": rate,
        "saturated_rate_per_replica": s.saturated,
        "replicas": good.replicas,
        "capacity_rate": rate,
        "unclear_replicas": sorted(p.replicas for p in s.probes if p.verdict == "unclear"),
        "noise_limited": any(p.verdict == "unclear" for p in s.probes),
        "stopped_by": "bisection",
    } | _at_capacity(good)


def _miss(p: Probe | None, targets: dict) -> str:
    if p is None:
        return "no probe ran"
    if p.verdict == "overloaded":
        return "the rate is above what they serve flat out"
    over = [
        f"p99 {m.upper()} {p.mean(f'p99_{m}_ms'):,.0f} ms > {t:g}"
        for m, t in targets.items()
        if p.mean(f"p99_{m}_ms") > t
    ]
    return ", ".join(over) or "too close to call"


def cost_figures(cfg: SimConfig, hardware, result: dict) -> dict:
    """GPUs, requests per GPU and, with a price, dollars per million output tokens."""
    par = cfg.parallel
    gpus = par.tp * par.pp * result["replicas"]
    price = cfg.capacity.gpu_hour_usd or hardware.gpu_hour_usd
    out_tok_s = result.get("output_throughput_at_capacity")
    out = {
        "gpus": gpus,
        "capacity_rate_per_gpu": result["capacity_rate"] / gpus,
        "gpu_hour_usd": price,
        "price_source": (
            "capacity.gpu_hour_usd"
            if cfg.capacity.gpu_hour_usd
            else (f"hardware/{hardware.name}.yaml" if price else None)
        ),
        "cost_per_million_output_tokens": None,
    }
    if price and out_tok_s:
        out["cost_per_million_output_tokens"] = gpus * price / 3600.0 / out_tok_s * 1e6
    return out


@dataclass(frozen=True)
class CapacityResult:
    """scenario=capacity's answer: summary.json as a dict."""

    summary: dict


def run_capacity(cfg: SimConfig, progress=None) -> CapacityResult:
    from sim.run.setup import Setup
    from sim.specs.hardware import load_hardware

    started = time.perf_counter()
    setup = Setup.from_config(cfg)  # a configuration that cannot run fails here, once
    s = Search(cfg, progress)
    rate = cfg.capacity.rate
    result = search_rate(s) if rate is None else search_replicas(s, rate)
    hardware = load_hardware(cfg.hardware)
    result |= cost_figures(cfg, hardware, result)
    result |= {
        "slo": {f"{m}_ms": t for m, t in s.targets.items()},
        "confidence": cfg.capacity.confidence,
        "tolerance": cfg.capacity.tolerance,
        "probes": [p.record() for p in s.probes],
        "simulations_run": s.simulations,
        "model": setup.model.name,
        "hardware": hardware.name,
        "engine": f"{setup.settings.engine}@{setup.settings.version}",
        "parallel": {"tp": cfg.parallel.tp, "pp": cfg.parallel.pp},
        "workload": cfg.workload.kind,
        "num_requests": cfg.workload.num_requests,
        "wall_time_s": time.perf_counter() - started,
    }
    return CapacityResult(result)
