"""The GuideLLM importer: one case per benchmark of a result file (concurrent, constant,
poisson or throughput strategy; lengths fixed at the benchmark's mean token counts), from every
schema generation: 0.2-0.3 (`args` and `request_totals` on each benchmark), 0.4-0.6
(`config.strategy`, `metrics.request_totals`), 0.7-0.8 (`metadata.version` 2, the same
benchmark layout). A sweep step without a fixed rate or concurrency is skipped."""

from __future__ import annotations

import math
from pathlib import Path

from sim.errors import UserError
from sim.scenarios.validate.importers.fields import finite_float, mapping, read_json

GUIDELLM_METRICS = {  # GuideLLM metric -> (summary.json key stem, scale to ms)
    "time_to_first_token_ms": ("ttft", 1.0),
    # GuideLLM's inter-token latency is each request's (last - first token) / (tokens - 1):
    # vllm bench's TPOT. (Its time_per_output_token includes the TTFT from 0.4 on.)
    "inter_token_latency_ms": ("tpot", 1.0),
    "request_latency": ("e2el", 1e3),  # seconds
}
RATES = (  # GuideLLM rate -> summary.json key
    ("output_tokens_per_second", "output_throughput"),
    ("requests_per_second", "request_throughput"),
)


def guidellm(paths, out: Path, engine: str, hardware: str, model: str, tp: int) -> tuple:
    """(cases, benchmarks skipped by reason) of every benchmark in the files `paths`."""
    cases, skipped = [], {}
    for path in paths:
        data = read_json(path)
        benchmarks = data.get("benchmarks") if isinstance(data, dict) else None
        if not isinstance(benchmarks, list):
            raise UserError(f"{path}: not a GuideLLM result (no `benchmarks` list)")
        for i, b in enumerate(benchmarks):
            case, why = _case(b, i, Path(path), engine, hardware, model, tp)
            if case is None:
                skipped[why] = skipped.get(why, 0) + 1
            else:
                cases.append(case)
    return cases, skipped


def _successful(metrics: dict, name: str) -> dict:
    return mapping(mapping(metrics.get(name)).get("successful"))


def _case(b: dict, i: int, path: Path, engine, hardware, model, tp):
    """(case, None), or (None, why the benchmark is skipped)."""
    b = mapping(b)
    strategy = mapping(mapping(b.get("config") or b.get("args")).get("strategy"))
    kind = strategy.get("type_") or strategy.get("type")
    kind = kind if isinstance(kind, str) else None
    metrics = mapping(b.get("metrics"))
    totals = mapping(metrics.get("request_totals") or b.get("request_totals"))
    n = finite_float(totals.get("successful"))
    prompt = finite_float(_successful(metrics, "prompt_token_count").get("mean"))
    output = finite_float(_successful(metrics, "output_token_count").get("mean"))
    if not (1 <= n < 2**63 and prompt > 0 and output > 0):
        return None, "no successful requests"
    n = int(n)
    lengths = {"input_len": max(round(prompt), 1), "output_len": max(round(output), 1)}
    if kind == "concurrent":
        streams = finite_float(strategy.get("streams"))
        streams = int(streams) if 0 <= streams < 2**63 else 0
        workload = {"closed_loop": {"concurrency": streams, "num_requests": n, **lengths}}
    elif kind in ("constant", "poisson"):
        rate = finite_float(strategy.get("rate"))
        workload = {kind: {"rate": 0.0 if rate != rate else rate, "num_requests": n, **lengths}}
    elif kind == "throughput":
        workload = {"burst": {"num_requests": n, **lengths}}
    else:
        return None, f"{kind or 'unknown'} strategy (no fixed rate or concurrency)"
    case = {
        "id": f"guidellm-{path.stem}-{i}",
        "engine": engine,
        "hardware": hardware,
        "model": model,
        "parallel": {"tp": tp},
        "workload": workload,
        "measured": _measured(metrics),
        "source": f"{path.name} benchmark {i} ({kind})",
        "notes": "lengths fixed at the benchmark's mean prompt and output token counts",
    }
    return case, None


def _measured(metrics: dict) -> dict:
    """summary.json keys of the benchmark's successful requests: latencies in ms at mean,
    median, p90 and p99, and the rates' means."""
    measured = {}
    for name, (stem, scale) in GUIDELLM_METRICS.items():
        st = _successful(metrics, name)
        pct = mapping(st.get("percentiles"))
        for key, value in (
            (f"mean_{stem}_ms", st.get("mean")),
            (f"median_{stem}_ms", st.get("median")),
            *((f"p{p}_{stem}_ms", pct.get(f"p{p}")) for p in (90, 99)),
        ):
            value = finite_float(value) * scale
            if value and math.isfinite(value):
                measured[key] = round(value, 4)
    for name, key in RATES:
        mean = finite_float(_successful(metrics, name).get("mean"))  # time-weighted: its mean only
        if mean and math.isfinite(mean):
            measured[key] = round(mean, 4)
    return measured
