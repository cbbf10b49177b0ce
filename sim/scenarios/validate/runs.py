"""scenario=validate: the simulator against real benchmark runs, case by case.

The case file format, and how case files load, is in sim/scenarios/validate/cases.py. Cases run
in parallel (joblib, one process each); one that cannot be simulated becomes an error row with
its reason.
"""

from __future__ import annotations

import math
import os

import numpy as np

from sim.errors import UserError
from sim.scenarios.validate.cases import Case
from sim.workload.bench_results import measured_requests

SLICES = ("hardware", "engine", "workload", "model")
# Data-quality flags an importer may set on a case, and what each means.
FLAG_MEANINGS = {
    "prefill_above_peak": "the measured rate needs more prefill compute than the GPUs have: "
    "cached prompt prefixes the source does not record",
}


def ks(measured: np.ndarray, predicted: np.ndarray) -> dict:
    from scipy.stats import ks_2samp

    m = measured[np.isfinite(measured)]
    p = predicted[np.isfinite(predicted)]
    if len(m) < 2 or len(p) < 2:
        return {}
    r = ks_2samp(m, p)
    return {"statistic": float(r.statistic), "pvalue": float(r.pvalue), "n": [len(m), len(p)]}


# ---- running ----------------------------------------------------------------------------------
def run_case(case: Case) -> dict:
    """Simulate one case; its predicted metrics, KS tests and the facts that explain errors."""
    from sim.run.simulate import simulate

    out = {"id": case.id, "error": case.error}
    if case.error:
        return out
    try:
        result = simulate(case.config)
    except UserError as exc:
        out["error"] = str(exc)
        return out
    except Exception as exc:  # one broken case must not stop the others
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    s = result.summary
    out["predicted"] = {k: _lookup(s, k) for k in case.measured}
    out["facts"] = {
        "rule_set": result.setup.settings.rule_set,
        "version": result.setup.settings.version,
        "cost_profile": s["sim"]["cost_profile"],
        "calibrated": s["sim"]["cost_profile_calibrated"],
        "priced_with": s["sim"]["priced_with"],
        "moe": result.setup.model.moe is not None,
        "dtype": result.setup.model.resolve_weight_dtype(case.config.dtype),
        "preemptions": s["sim"]["preemptions"],
        "rejected": s["failed"],
        "kv_usage_peak": s["sim"]["kv_usage_peak"],
        "concurrency": case.config.workload.concurrency,
    }
    if case.requests:
        try:
            meas = measured_requests(case.requests)
        except UserError as exc:
            out["ks_error"] = str(exc)
            meas = {}
        pred = {
            "ttft": result.requests["ttft_s"].to_numpy(dtype=float),
            "tpot": result.requests["tpot_s"].to_numpy(dtype=float),
            "itl": result.itl_s,
        }
        out["ks"] = {k: r for k, v in meas.items() if (r := ks(v, pred[k]))}
    return out


def _lookup(summary: dict, key: str):
    value = summary
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return float(value) if isinstance(value, (int, float)) else None


def run_all(cases: list[Case], jobs: int | None, progress=None) -> list[dict]:
    """Every case's result, in case order, simulated `jobs` at a time."""
    from joblib import Parallel, delayed

    jobs = jobs or os.cpu_count() or 1
    todo = [c for c in cases if not c.error]
    results = {c.id: {"id": c.id, "error": c.error} for c in cases if c.error}
    if todo:
        runner = Parallel(n_jobs=min(jobs, len(todo)), return_as="generator_unordered")
        for res in runner(delayed(run_case)(c) for c in todo):
            results[res["id"]] = res
            if progress is not None:
                progress(len(results), len(cases))
    return [results[c.id] for c in cases]


# ---- errors -----------------------------------------------------------------------------------
def rows(cases: list[Case], results: list[dict]) -> list[dict]:
    """validation.csv: one row per (case, metric)."""
    out = []
    for case, res in zip(cases, results, strict=True):
        if res.get("error"):
            continue
        for metric, measured in case.measured.items():
            predicted = res["predicted"].get(metric)
            err = None
            if predicted is not None:
                err = 100.0 * (predicted - measured) / measured
            out.append(
                {
                    "case": case.id,
                    "metric": metric,
                    "measured": float(measured),
                    "predicted": predicted,
                    "error_pct": err,
                    **case.slices,
                    "flags": ",".join(case.flags),
                }
            )
    return out


def aggregate(table: list[dict]) -> dict:
    """Median and p90 absolute percent error per metric."""
    by_metric: dict[str, list[float]] = {}
    for r in table:
        if r["error_pct"] is not None and math.isfinite(r["error_pct"]):
            by_metric.setdefault(r["metric"], []).append(abs(r["error_pct"]))
    return {
        "median_abs_pct_error": {m: float(np.median(v)) for m, v in sorted(by_metric.items())},
        "p90_abs_pct_error": {m: float(np.percentile(v, 90)) for m, v in sorted(by_metric.items())},
        "num_values": {m: len(v) for m, v in sorted(by_metric.items())},
    }


def summarize(cases: list[Case], results: list[dict], table: list[dict]) -> dict:
    by_slice = {}
    for dim in SLICES:
        groups: dict[str, list[dict]] = {}
        for r in table:
            groups.setdefault(r[dim], []).append(r)
        by_slice[dim] = {
            value: {"num_cases": len({r["case"] for r in rs})} | aggregate(rs)
            for value, rs in sorted(groups.items())
        }
    overall = aggregate(table)
    return {
        "num_cases": len(cases),
        "num_failed": sum(1 for r in results if r.get("error")),
        "median_abs_pct_error": overall["median_abs_pct_error"],
        "p90_abs_pct_error": overall["p90_abs_pct_error"],
        "num_values": overall["num_values"],
        "by_slice": by_slice,
        "distributions": {r["id"]: r["ks"] for r in results if r.get("ks")},
        "failed": {r["id"]: r["error"] for r in results if r.get("error")},
    }


def likely_causes(case: Case, res: dict, metric: str, error_pct: float) -> str:
    """The facts of this case that most plausibly explain a large error."""
    f = res.get("facts", {})
    why = [FLAG_MEANINGS.get(flag, flag) for flag in case.flags]
    kind = case.slices["workload"]
    if "ttft" in metric and kind == "closed_loop":
        why.append(
            "closed-loop TTFT turns on how the clients' prompts group into prefill steps "
            "(all at once or one at a time), which the source does not record"
        )
    if not f.get("calibrated", True):
        why.append(f"no measured kernel tables for {case.data.get('hardware')}: roofline prior")
    # elementwise kernels are small beside GEMMs and attention: listed last
    prior = sorted(
        (k for k, v in f.get("priced_with", {}).items() if str(v).startswith("prior")),
        key=lambda k: (k == "elementwise", k),
    )
    if prior and f.get("calibrated", True):
        why.append(f"{', '.join(prior)} priced by the roofline prior (no measured table)")
    if f.get("dtype") in ("fp4", "int4"):
        why.append(f"{f['dtype']} weights: MoE/GEMM kernels of that format are sparsely measured")
    if f.get("rule_set") and f.get("rule_set") != f.get("version"):
        why.append(f"engine rules of {f['rule_set']} used for {f['version']}")
    if f.get("moe"):
        why.append("MoE: expert load imbalance and the fused-MoE kernel choice are not modelled")
    if "ttft" in metric and (f.get("concurrency") or 0) >= 64:
        why.append("TTFT at high concurrency is mostly queueing: step-time errors compound")
    if f.get("preemptions"):
        why.append(f"{f['preemptions']} preemptions in the simulation (KV pressure)")
    if not why:
        why.append("step time " + ("over" if error_pct > 0 else "under") + "-estimated")
    return "; ".join(why)
