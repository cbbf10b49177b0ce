"""What a run hands back (RunResult) and the summary.json fields every driver fills the same
way: the bench fields over the measured requests, goodput, a closed loop's full-loop
throughputs, the account of the requests, and the bench header."""

from __future__ import annotations

import time
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
        "overload": overload_record(requests, workload, outcome.end_s),
    }


SERVED_SHARE = 0.8  # overloaded: finished fewer than 80% of the requests that arrived meanwhile
WAIT_GROWTH = 3.0  # ... while the wait to be admitted grew at least threefold through the run
MIN_ARRIVALS = 50  # ... over at least this many arrivals (fewer: Poisson noise decides)


def overload_record(requests: pd.DataFrame, workload: Workload, end_s: float) -> dict:
    """Whether the offered load was well above what the run served (summary.json
    `sim.overload`). Over the second half of the arrivals (window [mid, last], cut at the end
    of the run) it compares the requests that arrived with those that finished: a system that
    keeps up finishes about as many as arrive (each one a lifetime later), an overloaded one
    finishes what it can and the rest pile up. A run of long answers still filling its batch
    finishes fewer too, so the queue must also grow: the median wait from arrival to first
    scheduled, of the last quarter of the arrivals against the first. `served_rate`, requests
    finished per second from the first arrival to the last finish, is then the simulated
    capacity on this traffic (an overloaded engine is busy all that time). Not judged
    (`overloaded` null, `not_judged` says why) for a closed loop, arrivals all at once, or too
    few to tell. Rejected requests are left out: they ask no work."""
    asked = requests[requests["status"] != "rejected"].sort_values("arrival_s", kind="stable")
    asked = asked[asked["arrival_s"] <= end_s]
    arrival = asked["arrival_s"].to_numpy(float)
    finish = asked["finish_s"].to_numpy(float)
    why = _not_judged(workload, arrival, finish)
    if why is not None:
        return {"overloaded": None, "not_judged": why}
    lo, hi = float(arrival[0] + arrival[-1]) / 2, float(arrival[-1])

    def in_flight(t: float) -> int:
        return int(np.count_nonzero(arrival <= t) - np.count_nonzero(finish <= t))

    arrived = int(np.count_nonzero(arrival > lo))
    finished = int(np.count_nonzero((finish > lo) & (finish <= hi)))
    # not yet scheduled when the run ended: waited at least until then
    wait_s = asked["first_scheduled_s"].fillna(end_s).to_numpy(float) - arrival
    quarter = len(arrival) // 4
    first, last = float(np.median(wait_s[:quarter])), float(np.median(wait_s[-quarter:]))
    return {
        "overloaded": finished < SERVED_SHARE * arrived and last >= WAIT_GROWTH * first,
        "offered_rate": arrived / (hi - lo),
        "served_rate": int(np.count_nonzero(finish >= 0)) / float(np.nanmax(finish) - arrival[0]),
        "window_s": [lo, hi],
        "arrived_in_window": arrived,
        "finished_in_window": finished,
        "in_flight_at_window_start": in_flight(lo),
        "in_flight_at_window_end": in_flight(hi),
        "median_wait_first_quarter_s": first,
        "median_wait_last_quarter_s": last,
        "criterion": CRITERION,
    }


CRITERION = (
    f"finished < {SERVED_SHARE:g} x arrived over the second half of the arrivals, and the median "
    f"wait to be scheduled >= {WAIT_GROWTH:g}x longer for the last quarter of the arrivals than "
    "for the first"
)


def _not_judged(workload: Workload, arrival: np.ndarray, finish: np.ndarray) -> str | None:
    """Why a run's load cannot be judged (None: it can)."""
    if workload.concurrency is not None:
        return "closed loop: each client waits for its answer, so the load follows the service"
    if len(arrival) < 2 or arrival[-1] <= arrival[0]:
        return "the requests arrive all at once"
    if (arrived := np.count_nonzero(arrival > (arrival[0] + arrival[-1]) / 2)) < MIN_ARRIVALS:
        return f"{arrived} arrivals in the second half, fewer than {MIN_ARRIVALS}"
    if np.isnan(finish).all():
        return "no request finished"
    return None


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


def clock() -> tuple[float, float]:
    """Now, as wall and CPU time, for elapsed()."""
    return time.perf_counter(), time.process_time()


def elapsed(started: tuple[float, float]) -> dict:
    """A run's wall time and this process's CPU time over it, since clock() gave `started`."""
    return {
        "wall_time_s": time.perf_counter() - started[0],
        "cpu_time_s": time.process_time() - started[1],
    }
