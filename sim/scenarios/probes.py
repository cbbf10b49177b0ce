"""Probes: one configuration simulated with several seeds and judged against latency SLOs.

What scenario=capacity and scenario=disagg share. A probe simulates a configuration with seeds
cfg.seed, cfg.seed + 1, ... (seed_figures: what each run keeps) and computes per seed the
margin = the worse of p99 / target over the SLOs set (margin). With a Student t interval of
the margins at a confidence, the probe *meets* the SLOs when the whole interval is below 1,
*fails* when it is above, and is *unclear* otherwise (verdict); settle adds seeds while it is
unclear and returns the seeds' figures with the verdict over them (Seeded).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from scipy import stats

from sim.config import SimConfig
from sim.run.disagg_driver import TTFT_PARTS
from sim.run.findings import merge_records
from sim.run.simulate import simulate

OPEN_LOOP = ("poisson", "gamma", "constant", "trace")  # the workloads with a request rate
KEPT = (
    "p99_ttft_ms",
    "p99_tpot_ms",
    "p99_e2el_ms",
    "median_ttft_ms",
    "median_tpot_ms",
    "mean_ttft_ms",
    "mean_tpot_ms",
    "request_throughput",
    "output_throughput",
    "completed",
    "failed",
    "total_output_tokens",
)

# "overloaded": a rate above what the replicas serve flat out, not simulated (scenario=capacity)
Verdict = Literal["meets", "fails", "unclear", "overloaded"]


def seed_figures(cfg: SimConfig) -> dict[str, float]:
    """One simulation (in a fan_out worker): the figures a probe keeps, by name; a
    disaggregated run adds the mean TTFT parts, the pools' busy fractions and the transfers."""
    s = simulate(cfg).summary
    kept = {k: s[k] for k in KEPT} | {"audit": s["audit"]}  # (the physics audit: not a figure)
    if (d := s.get("disagg")) is not None:
        kept |= {f"ttft_{p}_ms": d["ttft_split_ms"][p]["mean"] for p in TTFT_PARTS}
        kept |= {f"{pool}_busy": d[pool]["busy_fraction"] for pool in ("prefill", "decode")}
        kept["transfer_mean_ms"] = d["transfer"]["mean_ms"]
        kept["transfer_mean_bytes"] = d["transfer"]["mean_bytes"]
    return kept


def margin(figures: dict[str, float], targets_ms: dict[str, float]) -> float:
    """The worse p99 / target over the SLOs set: <= 1 when the p99 request meets them all."""
    return max(figures[f"p99_{m}_ms"] / t for m, t in targets_ms.items())


def verdict(margins: list[float], confidence: float) -> tuple[Verdict, float, float]:
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


@dataclass(frozen=True, slots=True)
class Seeded:
    """The per-seed figures of one configuration tried and the verdict over them."""

    runs: tuple[dict[str, float], ...]  # seed_figures of each seed, in seed order
    verdict: Verdict
    margin: float  # the mean over the seeds of the worse p99 / target
    margin_half_width: float  # of its t interval (NaN with one seed in all)

    @property
    def seeds(self) -> int:
        return len(self.runs)

    def mean(self, key: str) -> float:
        return float(np.mean([r[key] for r in self.runs])) if self.runs else math.nan

    def record(self) -> dict:
        return {
            "seeds": self.seeds,
            "verdict": self.verdict,
            "margin": self.margin,
            "margin_half_width": self.margin_half_width,
        }


OVERLOADED = Seeded((), "overloaded", math.nan, math.nan)


def probes_audit(seeded: list[Seeded]) -> dict:
    """The physics audit of every run behind these configurations (summary.json `audit`)."""
    return merge_records([run.get("audit") for s in seeded for run in s.runs])


def settle(
    run: Callable[[list[SimConfig]], list[dict[str, float]]],
    cfg: SimConfig,
    targets_ms: dict[str, float],
    seeds: int,
    max_seeds: int,
    confidence: float,
) -> Seeded:
    """Simulate `cfg` with seeds cfg.seed, cfg.seed + 1, ... (`run(configs)` returns their
    seed_figures) until the verdict is clear or `max_seeds` are in, doubling the seeds each
    time. With one seed in all there is no interval: the margin decides."""
    runs: list[dict[str, float]] = []
    want = seeds
    while True:
        runs += run([replace(cfg, seed=cfg.seed + s) for s in range(len(runs), want)])
        margins = [margin(r, targets_ms) for r in runs]
        if len(margins) == 1 and max_seeds == 1:
            state: Verdict = "meets" if margins[0] < 1 else "fails"
            mean, half = margins[0], math.nan
        else:
            state, mean, half = verdict(margins, confidence)
        if state != "unclear" or want >= max_seeds:
            return Seeded(tuple(runs), state, mean, half)
        want = min(max_seeds, want * 2)
