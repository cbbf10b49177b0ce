"""scenario=validate: the simulator against real benchmark runs, case by case.

A case file holds real runs, each with what the simulator needs to replay it and what was
measured:

    cases:
      - id: any-unique-string
        engine: vllm@0.8.3
        hardware: a100-40gb
        model: llama-3.1-70b            # catalogue name or a config.json path
        dtype: bf16                     # optional; kv_cache_dtype: fp8 optional
        parallel: {tp: 8, pp: 1, dp: 1, ep: 1}
        engine_args: {gpu_memory_utilization: 0.95}
        workload:                       # exactly one of:
          closed_loop: {concurrency: 16, num_requests: 80, input_len: 1024, output_len: 1024}
          poisson: {rate: 4.0, num_requests: 200, lengths: PATH}
          burst: {num_requests: 5000, lengths: PATH}
          bench_json: PATH              # its metrics are the default `measured`
          trace: PATH                   # extensions: replay recorded arrivals and lengths,
          constant: {rate: 4.0, num_requests: 200, input_len: 512, output_len: 128}  # or rate
        measured: {mean_ttft_ms: 121.4, mean_tpot_ms: 13.2}   # any summary.json keys
        requests: PATH                  # optional: per-request measurements, for KS tests

Other keys a case may carry: entry_point (server | offline), seed, cost_profile, notes, source,
flags (data-quality marks an importer sets, e.g. prefill_above_peak).
Relative paths resolve against the case file's folder. A case that cannot be simulated (a
schema error, an unknown model, a model that does not fit, a missing file) becomes an error row
with its reason; the other cases still run. Cases run in parallel (joblib, one process each).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import yaml

from sim.config import SimConfig, WorkloadConfig
from sim.errors import UserError

SLICES = ("hardware", "engine", "workload", "model")
# Data-quality flags an importer may set on a case, and what each means.
FLAG_MEANINGS = {
    "prefill_above_peak": "the measured rate needs more prefill compute than the GPUs have: "
    "cached prompt prefixes the source does not record",
}
WORKLOAD_KINDS = ("closed_loop", "poisson", "burst", "bench_json", "trace", "constant")
REQUIRED = ("id", "engine", "hardware", "model", "workload")
KNOWN = (
    *REQUIRED,
    "dtype",
    "kv_cache_dtype",
    "parallel",
    "engine_args",
    "measured",
    "requests",
    "entry_point",
    "seed",
    "cost_profile",
    "notes",
    "source",
    "flags",
)
PARALLEL_KEYS = (
    "tp",
    "pp",
    "dp",
    "ep",
    "router",
    "dp_lockstep",
    "link_bytes_per_s",
    "link_latency_s",
)
WORKLOAD_FIELDS = {f.name for f in fields(WorkloadConfig)}
PATH_KEYS = ("lengths", "path")
# summary.json keys of a vllm bench serve result that count as its measured metrics
BENCH_METRICS = tuple(
    [
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        *(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median")),
        *(f"p{p}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for p in (50, 90, 99)),
    ]
)


@dataclass(frozen=True)
class Case:
    id: str
    file: str
    data: dict  # the case as written
    config: SimConfig | None = None
    measured: dict = field(default_factory=dict)  # metric -> value
    requests: str | None = None  # per-request measurements
    error: str | None = None

    @property
    def slices(self) -> dict:
        w = self.data.get("workload")
        kind = next(iter(w), "?") if isinstance(w, dict) else "?"
        return {
            "hardware": str(self.data.get("hardware", "?")),
            "engine": str(self.data.get("engine", "?")),
            "workload": kind,
            "model": str(self.data.get("model", "?")),
        }

    @property
    def flags(self) -> tuple[str, ...]:
        f = self.data.get("flags") or ()
        return tuple(str(x) for x in f) if isinstance(f, list) else ()


def load_cases(paths, base: SimConfig) -> list[Case]:
    """Every case of every file; per-case problems become cases with `error` set."""
    cases: list[Case] = []
    seen: set[str] = set()
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise UserError(f"validate.cases: {path} does not exist")
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise UserError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list):
            raise UserError(f"{path}: expected a mapping with a list under `cases:`")
        for i, data in enumerate(doc["cases"]):
            case_id = str(data.get("id")) if isinstance(data, dict) and "id" in data else None
            label = case_id or f"{path.name}#{i + 1}"
            try:
                if case_id in seen:
                    raise UserError(f"duplicate case id {case_id!r}")
                case = _build(data, path, base)
            except UserError as exc:
                raw = data if isinstance(data, dict) else {"id": label}
                case = Case(label, str(path), raw, error=str(exc))
            seen.add(case.id)
            cases.append(case)
    return cases


def _build(data, path: Path, base: SimConfig) -> Case:
    if not isinstance(data, dict):
        raise UserError("a case must be a mapping")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise UserError(f"missing key(s) {', '.join(missing)}")
    here = path.parent
    model = str(data["model"])
    if model.endswith(".json"):
        model = str(_resolve(here, model))
    parallel = data.get("parallel") or {}
    if not isinstance(parallel, dict) or set(parallel) - set(PARALLEL_KEYS):
        raise UserError(f"parallel: expected a mapping of {', '.join(PARALLEL_KEYS)}")
    engine_args = dict(data.get("engine_args") or {})
    if "kv_cache_dtype" in data:
        engine_args["kv_cache_dtype"] = data["kv_cache_dtype"]
    workload, measured_default, requests = _workload(data["workload"], here)
    measured = data.get("measured", measured_default)
    if not isinstance(measured, dict) or not measured:
        raise UserError("measured: expected a mapping of summary.json keys to values")
    for key, value in measured.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise UserError(f"measured.{key}={value!r}: expected a number > 0")
    if "requests" in data:
        requests = str(_resolve(here, str(data["requests"])))
    mapping = {
        k: v for k, v in asdict(base).items() if k not in ("workload", "validate", "engine_args")
    }
    mapping |= {
        "task": "simulate",
        "engine": str(data["engine"]),
        "hardware": str(data["hardware"]),
        "model": model,
        "dtype": str(data.get("dtype", "auto")),
        "entry_point": str(data.get("entry_point", "server")),
        "seed": data.get("seed", base.seed),
        "cost_profile": str(data.get("cost_profile", base.cost_profile)),
        "parallel": {**asdict(base.parallel), **{k: 1 for k in ("tp", "pp", "dp", "ep")}}
        | parallel,
        "engine_args": engine_args,
        "workload": workload,
        "output": {"report": False, "progress": False},
    }
    config = SimConfig.from_mapping(mapping)
    return Case(str(data["id"]), str(path), data, config, dict(measured), requests)


def _resolve(here: Path, value: str) -> Path:
    p = Path(value).expanduser()
    p = p if p.is_absolute() else here / p
    if not p.exists():
        raise UserError(f"{value}: no such file (resolved to {p})")
    return p


def _workload(spec, here: Path) -> tuple[dict, dict, str | None]:
    """(WorkloadConfig mapping, default measured metrics, per-request file) of a case."""
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in WORKLOAD_KINDS:
        raise UserError(f"workload: expected exactly one of {', '.join(WORKLOAD_KINDS)}")
    kind, body = next(iter(spec.items()))
    if kind in ("bench_json", "trace"):
        if not isinstance(body, str):
            raise UserError(f"workload.{kind}: expected a file path")
        path = _resolve(here, body)
        out = {"kind": kind, "path": str(path), "num_requests": None, "rate": None}
        if kind == "bench_json":
            return out, bench_metrics(path), str(path)
        return out, {}, None
    if not isinstance(body, dict):
        raise UserError(f"workload.{kind}: expected a mapping")
    unknown = sorted(set(body) - WORKLOAD_FIELDS)
    if unknown:
        raise UserError(f"workload.{kind}: unknown key {unknown[0]}")
    need = {
        "closed_loop": ("concurrency", "num_requests"),
        "poisson": ("rate", "num_requests"),
        "constant": ("rate", "num_requests"),
    }
    need = need.get(kind, ("num_requests",))
    missing = [k for k in need if k not in body]
    if missing:
        raise UserError(f"workload.{kind}: missing {', '.join(missing)}")
    if "lengths" not in body and not {"input_len", "output_len"} <= set(body):
        raise UserError(f"workload.{kind}: give input_len and output_len, or lengths: PATH")
    out = {"kind": kind, "length_dist": "fixed", "rate": None, **body}
    for key in PATH_KEYS:
        if key in out and out[key] is not None:
            out[key] = str(_resolve(here, str(out[key])))
    return out, {}, None


def bench_metrics(path: Path) -> dict:
    """The metrics a vllm bench serve result reports, as summary.json keys."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not a JSON file ({exc})") from None
    return {
        k: float(data[k])
        for k in BENCH_METRICS
        if isinstance(data.get(k), (int, float)) and not isinstance(data.get(k), bool) and data[k]
    }


# ---- per-request measurements ----------------------------------------------------------------
def measured_requests(path: str) -> dict[str, np.ndarray]:
    """Per-request TTFT and TPOT (and pooled ITL where recorded), in seconds, from an
    LLMServingSim requests.jsonl or a vllm bench serve result saved with details."""
    p = Path(path)
    if p.suffix == ".jsonl":
        rows = [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
        start = np.array([r.get("queued_ts", r.get("arrival_time")) for r in rows], dtype=float)
        first = np.array([r["first_token_ts"] for r in rows], dtype=float)
        last = np.array([r["last_token_ts"] for r in rows], dtype=float)
        out = np.array([r["output_toks"] for r in rows], dtype=float)
        tpot = np.where(out > 1, (last - first) / np.maximum(out - 1, 1), np.nan)
        return {"ttft": first - start, "tpot": tpot[np.isfinite(tpot)]}
    data = json.loads(p.read_text())
    got = {}
    if data.get("ttfts"):
        got["ttft"] = np.asarray(data["ttfts"], dtype=float)
    if data.get("itls"):
        got["itl"] = np.concatenate([np.asarray(x, dtype=float) for x in data["itls"] if x])
    return got


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
    from sim.run import simulate

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
        except (OSError, ValueError, KeyError, json.JSONDecodeError) as exc:
            out["ks_error"] = f"{case.requests}: {exc}"
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
