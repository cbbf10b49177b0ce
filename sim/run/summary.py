"""What a run hands back (RunResult) and the summary.json fields every driver fills the same
way: the bench fields over the measured requests, goodput, a closed loop's full-loop
throughputs, the account of the requests, and the bench header."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.config import SimConfig
from sim.run.metrics import bench_summary, full_loop_throughputs, goodput
from sim.run.overview import StepOverview, of_frame
from sim.run.setup import Setup
from sim.workload.generate import Workload


@dataclass(frozen=True, slots=True)
class RunResult:
    setup: Setup
    workload: Workload
    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: dict
    itl: tuple[np.ndarray, np.ndarray]  # distinct gaps between a request's tokens, counts
    phases: pd.DataFrame | None = (
        None  # each request's phases (sim/report/timeline.py), when traced
    )
    # streamed: every step went to steps.parquet as the run went; `steps` is then a sample
    # of them and this the report's view (sim/run/overview.py)
    streamed: StepOverview | None = None

    @property
    def overview(self) -> StepOverview:
        return self.streamed or of_frame(self.steps)

    @property
    def itl_s(self) -> np.ndarray:
        """Every gap between consecutive tokens of a measured request, pooled (ascending)."""
        return np.repeat(*self.itl)


def headline(cfg: SimConfig, workload: Workload, requests: pd.DataFrame, itl):
    """The bench fields over the measured requests (warm-up ones left out), goodput under the
    SLOs set, and a closed loop's full-loop throughputs: (summary, measured requests, the
    full-loop window or None)."""
    measured = requests[requests["request_id"] >= workload.warmup] if workload.warmup else requests
    summary = bench_summary(measured, itl)
    if targets := cfg.slo.targets():
        summary |= goodput(measured, summary["duration"], targets)
        summary["slo"] = {f"{m}_ms": v for m, v in targets.items()}
    window = None
    if workload.warmup and workload.concurrency:
        full = full_loop_throughputs(requests, workload.warmup)
        if full is not None:
            window = full.pop("window_s")
            summary |= full
    return summary, measured, window


def requests_record(requests: pd.DataFrame, workload: Workload, window, outcome, tally) -> dict:
    """summary.json `sim`'s account of the requests: how many ended how, the time limit, the
    conservation tally."""
    statuses = requests["status"].value_counts().to_dict()
    finished, rejected = int(statuses.get("finished", 0)), int(statuses.get("rejected", 0))
    return {
        "requests": len(requests),
        "warmup_requests": workload.warmup,
        "throughput_window_s": window,
        "finished": finished,
        "rejected": rejected,
        "unfinished_at_time_limit": len(requests) - finished - rejected,
        "stopped_at_s": outcome.end_s if outcome.stopped_early else None,
        "conservation": tally,
    }


def offload_record(engines) -> dict | None:
    """The offload tiers' figures summed over the replicas (None: no offloading)."""
    tiers = [e.kv.pool.lower for e in engines if e.kv.pool.lower is not None]
    if not tiers:
        return None
    records = [t.record() for t in tiers]
    return {k: sum(r[k] for r in records) for k in records[0]}


def bench_header(cfg: SimConfig, setup: Setup, workload: Workload) -> dict:
    """The descriptive fields of a vllm bench serve result."""
    w = cfg.workload
    rate = w.rate if w.kind in ("poisson", "gamma", "constant") else "inf"
    return {
        "backend": f"sim:{setup.settings.engine}@{setup.settings.version}",
        "model_id": setup.model.name,
        "num_prompts": len(workload),
        "request_rate": rate,
        "burstiness": w.burstiness if w.burstiness is not None else 1.0,
        "max_concurrency": workload.concurrency,
    }
