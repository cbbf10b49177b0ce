"""`python -m sim.importers KIND INPUT... --out cases.yaml`: case files from real results.

Kinds:
  silicon        AIConfigurator-style silicon CSV rows (mean TTFT and TPOT of a deployment at a
                 fixed concurrency and ISL/OSL): one closed-loop case per aggregated row
  bench_json     `vllm bench serve --save-result` files: the file is the workload and its
                 metrics are what was measured (name the engine, GPU and model with flags)
  llmservingsim  LLMServingSim bench_examples runs (vllm/meta.json + vllm/requests.jsonl): the
                 recorded arrivals replayed, TTFT and TPOT compared at mean, p50, p90 and p99
  guidellm       GuideLLM benchmark JSON: one case per benchmark (concurrent, constant, poisson
                 or throughput strategy; lengths fixed at the benchmark's mean token counts)
Paths in the written file are relative to its folder. Rows that cannot become a case (a
disaggregated deployment, a GuideLLM sweep step without a fixed rate) are skipped and counted.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from sim.errors import UserError
from sim.paths import MODEL_CATALOG_DIR

SYSTEMS = {
    "h100_sxm": "h100-sxm",
    "h200_sxm": "h200",
    "b200_sxm": "b200",
    "a100_sxm": "a100-80gb",
    "l40s": "l40s",
    "RTX4090": "rtx-4090",
    "RTXPRO6000": "rtx-pro-6000",
}


def block_scaled_fp8(hf_id: str) -> bool:
    """Whether a checkpoint's FP8 weights are scaled per 128 x 128 block, as their model cards
    say of DeepSeek's V3/R1 and Qwen's -FP8 releases (priced from the fp8_block tables; other
    FP8 runs, such as ModelOpt checkpoints or online quantization, are per-tensor)."""
    return hf_id.startswith("deepseek-ai/") or (hf_id.startswith("Qwen/") and "FP8" in hf_id)


PRECISIONS = {"fp8": "fp8", "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4", "bf16": "bf16"}
# Checkpoints of one architecture the catalogue lists under another name.
SAME_ARCHITECTURE = {"deepseek-r1": "deepseek-v3"}


def catalogue_model(hf_id: str) -> tuple[str, str | None]:
    """(catalogue name, note) for a HuggingFace id; the id itself when nothing matches (the
    case then fails with the catalogue's list)."""
    names = {p.stem for p in MODEL_CATALOG_DIR.glob("*.json")}
    base = hf_id.split("/")[-1].lower()
    for suffix in ("-fp8", "-instruct-2507", "-instruct", "-hf", "-2507"):
        if base in names:
            break
        base = base.removesuffix(suffix)
    if base in names:
        return base, None
    if base in SAME_ARCHITECTURE:
        name = SAME_ARCHITECTURE[base]
        return name, f"{hf_id} has {name}'s architecture"
    for name in sorted(names, key=len, reverse=True):  # llama-3.1-8b-instruct -> llama-3.1-8b
        if base.startswith(name):
            return name, None
    return hf_id, None


def _rel(path: Path, out: Path) -> str:
    return os.path.relpath(os.path.abspath(path), os.path.abspath(out.parent))


def closed_loop_requests(concurrency: int) -> int:
    """Requests per closed-loop case: three waves of the concurrency (at least 16); the first
    wave is warm-up (`warmup_requests`), so the metrics describe the steady state. With fixed
    lengths every later wave repeats the second, so more waves cost time and add nothing."""
    return max(3 * concurrency, 16)


# ---- silicon CSV ------------------------------------------------------------------------------
def silicon(path: Path, out: Path, backends=None, systems=None) -> tuple[list[dict], dict]:
    try:
        df = pd.read_csv(path)
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text; save the CSV as UTF-8") from None
    except pd.errors.EmptyDataError:
        raise UserError(f"{path}: not a readable CSV (the file is empty)") from None
    except (ValueError, OverflowError) as exc:  # unparseable
        raise UserError(f"{path}: not a readable CSV ({exc.__class__.__name__})") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read the file ({exc.strerror})") from None
    need = {"id", "backend", "backend_version", "model_path", "system", "mode", "isl", "osl"}
    need |= {"batch_size", "tp_size", "silicon_ttft_ms", "silicon_tpot_ms"}
    missing = need - set(df.columns)
    if missing:
        raise UserError(f"{path}: not a silicon CSV (missing {', '.join(sorted(missing))})")
    skipped: dict[str, int] = {}
    cases = []
    for row in df.itertuples(index=False):
        if backends and row.backend not in backends:
            continue
        if systems and row.system not in systems:
            continue
        if row.mode != "agg":
            skipped["disaggregated prefill/decode (not modelled)"] = (
                skipped.get("disaggregated prefill/decode (not modelled)", 0) + 1
            )
            continue
        if not isinstance(row.backend_version, str) or not row.backend_version.strip():
            skipped["no engine version recorded"] = skipped.get("no engine version recorded", 0) + 1
            continue
        ttft, tpot = _float(row.silicon_ttft_ms), _float(row.silicon_tpot_ms)
        if not (ttft > 0 and tpot > 0):
            skipped["no measured TTFT/TPOT"] = skipped.get("no measured TTFT/TPOT", 0) + 1
            continue
        model, note = catalogue_model(str(row.model_path))
        notes = [note] if note else []
        where = f"{path}: row {row.id}"
        tp = _count(row.tp_size, f"{where}: tp_size")
        parallel = {"tp": tp, "pp": _int(getattr(row, "pp_size", 1))}
        ep = _int(getattr(row, "moe_ep_size", 1))
        if ep > 1:
            if ep == tp:
                parallel["ep"] = ep
            else:
                notes.append(f"moe_ep_size {ep} != tp {tp}: simulated with experts split by TP")
        adp = _int(getattr(row, "attention_dp_size", 1))
        if adp > 1:
            notes.append(f"attention_dp_size {adp} (DP attention) simulated as TP")
        c = _count(row.batch_size, f"{where}: batch_size")
        isl, osl = _count(row.isl, f"{where}: isl"), _count(row.osl, f"{where}: osl")
        # Little's law for a closed loop: requests/s = concurrency / mean E2E latency
        e2e_s = (ttft + (osl - 1) * tpot) / 1e3
        notes.append("output_throughput derived by Little's law: concurrency x OSL / mean E2E")
        precision = str(getattr(row, "precision", "bf16"))
        dtype = PRECISIONS.get(precision, "bf16")
        if dtype == "fp8" and block_scaled_fp8(str(row.model_path)):
            dtype = "fp8_block"
            notes.append(f"{row.model_path}'s FP8 weights are block-scaled (128 x 128)")
        flags = []
        hw = SYSTEMS.get(row.system, str(row.system))
        gpus = tp * parallel["pp"]
        share = prefill_share_of_peak(model, hw, dtype, c, isl, e2e_s, gpus)
        if share is not None and share >= IMPLAUSIBLE_PREFILL_SHARE:
            flags.append("prefill_above_peak")
            notes.append(
                f"the measured rate implies prefill alone at {100 * share:.0f}% of each GPU's "
                f"dense {PEAK_DTYPE.get(dtype, 'bf16')} peak, with decode still to run: the run "
                "must have reused cached prompt prefixes, which the row does not record"
            )
        cases.append(
            {
                "id": f"aic-{row.id}",
                "engine": f"{row.backend}@{row.backend_version}",
                "hardware": hw,
                "model": model,
                "dtype": dtype,
                "parallel": parallel,
                "workload": {
                    "closed_loop": {
                        "concurrency": c,
                        "num_requests": closed_loop_requests(c),
                        "warmup_requests": c,
                        "input_len": isl,
                        "output_len": osl,
                    }
                },
                "measured": {
                    "mean_ttft_ms": round(ttft, 4),
                    "mean_tpot_ms": round(tpot, 4),
                    "output_throughput": round(c * osl / e2e_s, 2),
                },
                "source": f"{path.name} row {row.id}: {getattr(row, 'silicon_data_source', '')}"[
                    :300
                ],  # the column is optional
                "notes": "; ".join(notes),
                **({"flags": flags} if flags else {}),
            }
        )
    return cases, skipped


# A closed loop whose measured throughput needs at least this share of the GPUs' dense tensor
# peak for its prompts' linear layers alone (no attention, no decode) cannot have prefilled
# every prompt: the best measured GEMMs reach about 70% of peak.
IMPLAUSIBLE_PREFILL_SHARE = 0.6
PEAK_DTYPE = {
    "fp8": "fp8",
    "fp8_block": "fp8",
    "fp4": "fp8",
    "int4": "bf16",
    "bf16": "bf16",
}  # Hopper has no fp4 MMA


def prefill_share_of_peak(model, hardware, dtype, concurrency, isl, e2e_s, gpus) -> float | None:
    """Share of the GPUs' dense peak that the prompts' linear-layer FLOPs need at the measured
    request rate (Little's law: concurrency / E2E), or None for a model or GPU not catalogued."""
    per_token = _linear_flops_and_peak(model, hardware, PEAK_DTYPE.get(dtype, "bf16"))
    if per_token is None:
        return None
    flops, peak = per_token
    return flops * isl * concurrency / e2e_s / (peak * gpus)


@functools.cache
def _linear_flops_and_peak(model: str, hardware: str, peak_dtype: str):
    """(linear-layer FLOPs per token, the GPU's dense peak at `peak_dtype`), loaded once per
    model and GPU; None when either is not catalogued."""
    from sim.specs.hardware import load_hardware
    from sim.specs.model_config import load_model

    try:
        m, hw = load_model(model), load_hardware(hardware)
        peak = hw.peak_flops_per_s(peak_dtype)
    except UserError:
        return None
    p = m.params
    return 2.0 * (p.active - p.embedding), peak


def _float(value) -> float:
    """A finite number from a JSON or CSV field, else NaN."""
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        return math.nan
    return v if math.isfinite(v) else math.nan


def _count(value, where: str) -> int:
    """A positive integer from a JSON or CSV field (1024, 1024.0, "1024")."""
    v = _float(value)
    if not (1 <= v < 2**63 and v == int(v)):
        raise UserError(f"{where} is {value!r:.40}; expected an integer >= 1")
    return int(v)


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def _read_json(path: Path):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text; save the file as UTF-8") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except (ValueError, RecursionError):
        raise UserError(f"{path}: not valid JSON (a number too long or nesting too deep)") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read the file ({exc.strerror})") from None


def _int(value) -> int:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return 1
    return int(v) if math.isfinite(v) and v >= 1 else 1


# ---- vllm bench serve JSON --------------------------------------------------------------------
def bench_json(paths, out: Path, engine: str, hardware: str, model: str, tp: int) -> list[dict]:
    cases = []
    for path in paths:
        data = _read_json(path)
        if not isinstance(data, dict) or "input_lens" not in data or "output_lens" not in data:
            raise UserError(f"{path}: not a `vllm bench serve --save-result` file")
        case = {
            "id": f"bench-{Path(path).stem}",
            "engine": engine,
            "hardware": hardware,
            "model": model or catalogue_model(str(data.get("model_id", "")))[0],
            "parallel": {"tp": tp},
            "workload": {"bench_json": _rel(path, out)},
            "source": str(path),
        }
        cases.append(case)
    return cases


# ---- LLMServingSim bench_examples ---------------------------------------------------------------
def llmservingsim(paths, out: Path) -> list[dict]:
    from sim.workload.bench_results import measured_requests

    runs = []
    for p in map(Path, paths):
        runs += [m.parent.parent for m in sorted(p.glob("**/vllm/meta.json"))]
    if not runs:
        raise UserError(f"no LLMServingSim runs (*/vllm/meta.json) under {', '.join(paths)}")
    cases = []
    for run in runs:
        meta = _read_json(run / "vllm" / "meta.json")
        if not isinstance(meta, dict):
            raise UserError(f"{run / 'vllm' / 'meta.json'}: expected a JSON object")
        kw, where = _mapping(meta.get("engine_kwargs")), f"{run / 'vllm' / 'meta.json'}: "
        requests = run / "vllm" / "requests.jsonl"
        hardware = SYSTEMS.get(run.parent.name, run.parent.name.lower())
        model, note = catalogue_model(str(meta.get("model", kw.get("model", ""))))
        notes = [note] if note else []
        args = {k: kw[k] for k in ("max_num_seqs", "max_num_batched_tokens") if kw.get(k)}
        if kw.get("max_model_len"):
            args["max_model_len"] = _count(kw["max_model_len"], f"{where}max_model_len")
        if kw.get("kv_cache_dtype", "auto") != "auto":
            args["kv_cache_dtype"] = kw["kv_cache_dtype"]
        cache = _mapping(meta.get("kv_cache"))
        if cache.get("gpu_memory_utilization"):
            args["gpu_memory_utilization"] = cache["gpu_memory_utilization"]
        if cache.get("num_gpu_blocks"):  # the pool the run had, not our estimate of it
            args["num_gpu_blocks_override"] = _count(
                cache["num_gpu_blocks"], f"{where}num_gpu_blocks"
            )
        parallel = {"tp": _count(kw.get("tensor_parallel_size", 1), f"{where}tensor_parallel_size")}
        dp = _count(kw.get("data_parallel_size", 1), f"{where}data_parallel_size")
        if dp > 1:
            parallel["dp"] = dp
            if kw.get("enable_expert_parallel"):  # experts over every rank's GPUs
                parallel["ep"] = parallel["tp"] * dp
        gpus = parallel["tp"] * parallel.get("dp", 1)
        link = _server_link(run / "config.json") if gpus > 1 else None
        if link:
            parallel |= link
            notes.append(
                f"GPU-to-GPU link from the run's config.json: "
                f"{link['link_bytes_per_s'] / 1e9:g} GB/s, {link['link_latency_s'] * 1e6:g} us"
            )
        got = measured_requests(str(requests))
        measured = {}
        for q in ("ttft", "tpot"):
            v = got[q] * 1e3
            if not len(v):  # no request with two tokens or more: no TPOT
                continue
            measured[f"mean_{q}_ms"] = round(float(np.mean(v)), 4)
            for pct in (50, 90, 99):
                measured[f"p{pct}_{q}_ms"] = round(float(np.percentile(v, pct)), 4)
        cases.append(
            {
                "id": f"llmservingsim-{run.parent.name}-{run.name}",
                "engine": f"vllm@{meta.get('vllm_version', '')}",
                "hardware": hardware,
                "model": model,
                "dtype": "bf16" if kw.get("dtype") in ("bfloat16", "bf16") else "auto",
                "entry_point": "offline",
                "parallel": parallel,
                "engine_args": args,
                "workload": {"trace": _rel(requests, out)},
                "measured": measured,
                "requests": _rel(requests, out),
                "source": f"{_rel(run, out)} (LLMServingSim bench_examples, vLLM offline engine)",
                "notes": "; ".join(notes),
            }
        )
    return cases


def _server_link(path: Path) -> dict | None:
    """The GPU-to-GPU link an LLMServingSim cluster config records for the server the run used
    (`link_bw` GB/s, `link_latency` ns), or None."""
    try:
        cfg = json.loads(path.read_text())
        bw, lat = float(cfg["link_bw"]), float(cfg.get("link_latency", 0.0))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not bw > 0 or lat < 0:
        return None
    return {"link_bytes_per_s": bw * 1e9, "link_latency_s": lat * 1e-9}


# ---- GuideLLM ---------------------------------------------------------------------------------
GUIDELLM_METRICS = {  # GuideLLM metric -> (summary.json key stem, scale to ms)
    "time_to_first_token_ms": ("ttft", 1.0),
    # GuideLLM's inter-token latency is each request's (last - first token) / (tokens - 1):
    # vllm bench's TPOT. (Its time_per_output_token includes the TTFT from 0.4 on.)
    "inter_token_latency_ms": ("tpot", 1.0),
    "request_latency": ("e2el", 1e3),  # seconds
}


def guidellm(paths, out: Path, engine: str, hardware: str, model: str, tp: int) -> tuple:
    """Cases from GuideLLM results of every schema generation: 0.2-0.3 (`args` and
    `request_totals` on each benchmark), 0.4-0.6 (`config.strategy`, `metrics.request_totals`),
    0.7-0.8 (`metadata.version` 2, the same benchmark layout)."""
    cases, skipped = [], {}
    for path in paths:
        data = _read_json(path)
        benchmarks = data.get("benchmarks") if isinstance(data, dict) else None
        if not isinstance(benchmarks, list):
            raise UserError(f"{path}: not a GuideLLM result (no `benchmarks` list)")
        for i, b in enumerate(benchmarks):
            case, why = _guidellm_case(b, i, Path(path), engine, hardware, model, tp)
            if case is None:
                skipped[why] = skipped.get(why, 0) + 1
            else:
                cases.append(case)
    return cases, skipped


def _successful(metrics: dict, name: str) -> dict:
    return _mapping(_mapping(metrics.get(name)).get("successful"))


def _guidellm_case(b: dict, i: int, path: Path, engine, hardware, model, tp):
    b = _mapping(b)
    strategy = _mapping(_mapping(b.get("config") or b.get("args")).get("strategy"))
    kind = strategy.get("type_") or strategy.get("type")
    kind = kind if isinstance(kind, str) else None
    metrics = _mapping(b.get("metrics"))
    totals = _mapping(metrics.get("request_totals") or b.get("request_totals"))
    n = _float(totals.get("successful"))
    prompt = _float(_successful(metrics, "prompt_token_count").get("mean"))
    output = _float(_successful(metrics, "output_token_count").get("mean"))
    if not (1 <= n < 2**63 and prompt > 0 and output > 0):
        return None, "no successful requests"
    n = int(n)
    lengths = {"input_len": max(round(prompt), 1), "output_len": max(round(output), 1)}
    if kind == "concurrent":
        streams = _float(strategy.get("streams"))
        streams = int(streams) if 0 <= streams < 2**63 else 0
        workload = {"closed_loop": {"concurrency": streams, "num_requests": n, **lengths}}
    elif kind in ("constant", "poisson"):
        rate = _float(strategy.get("rate"))
        workload = {kind: {"rate": 0.0 if rate != rate else rate, "num_requests": n, **lengths}}
    elif kind == "throughput":
        workload = {"burst": {"num_requests": n, **lengths}}
    else:
        return None, f"{kind or 'unknown'} strategy (no fixed rate or concurrency)"
    measured = {}
    for name, (stem, scale) in GUIDELLM_METRICS.items():
        st = _successful(metrics, name)
        pct = _mapping(st.get("percentiles"))
        for key, value in (
            (f"mean_{stem}_ms", st.get("mean")),
            (f"median_{stem}_ms", st.get("median")),
            *((f"p{p}_{stem}_ms", pct.get(f"p{p}")) for p in (90, 99)),
        ):
            value = _float(value) * scale
            if value and math.isfinite(value):
                measured[key] = round(value, 4)
    for name, key in (
        ("output_tokens_per_second", "output_throughput"),
        ("requests_per_second", "request_throughput"),
    ):
        mean = _float(_successful(metrics, name).get("mean"))  # time-weighted: its mean only
        if mean and math.isfinite(mean):
            measured[key] = round(mean, 4)
    case = {
        "id": f"guidellm-{path.stem}-{i}",
        "engine": engine,
        "hardware": hardware,
        "model": model,
        "parallel": {"tp": tp},
        "workload": workload,
        "measured": measured,
        "source": f"{path.name} benchmark {i} ({kind})",
        "notes": "lengths fixed at the benchmark's mean prompt and output token counts",
    }
    return case, None


# ---- command line -----------------------------------------------------------------------------
def write_cases(cases: list[dict], out: Path, header: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    body = yaml.safe_dump({"cases": cases}, sort_keys=False, width=100, allow_unicode=True)
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    out.write_text(comment + body)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.importers", description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=("silicon", "bench_json", "llmservingsim", "guidellm"))
    ap.add_argument("inputs", nargs="+", help="files or folders to import")
    ap.add_argument("--out", required=True, help="the case file to write")
    ap.add_argument("--backend", action="append", help="silicon: only these backends")
    ap.add_argument("--system", action="append", help="silicon: only these systems")
    ap.add_argument("--engine", help="bench_json / guidellm: engine spec, e.g. vllm@0.10.2")
    ap.add_argument("--hardware", help="bench_json / guidellm: catalogue GPU name")
    ap.add_argument("--model", help="bench_json / guidellm: catalogue model or config.json")
    ap.add_argument("--tp", type=int, default=1)
    args = ap.parse_args(argv)
    out = Path(args.out)
    try:
        skipped = {}
        if args.kind == "silicon":
            cases = []
            for p in args.inputs:
                got, skip = silicon(Path(p), out, args.backend, args.system)
                cases += got
                for k, v in skip.items():
                    skipped[k] = skipped.get(k, 0) + v
        elif args.kind == "llmservingsim":
            cases = llmservingsim(args.inputs, out)
        else:
            if not (args.engine and args.hardware):
                raise UserError(f"{args.kind}: give --engine and --hardware (and --model)")
            if args.kind == "bench_json":
                cases = bench_json(
                    args.inputs, out, args.engine, args.hardware, args.model, args.tp
                )
            else:
                cases, skipped = guidellm(
                    args.inputs, out, args.engine, args.hardware, args.model, args.tp
                )
    except (UserError, OSError, ValueError) as exc:
        print(f"sim.importers: error: {exc}", file=sys.stderr)
        return 2
    header = (
        f"Written by `python -m sim.importers {args.kind}` from "
        f"{', '.join(_rel(p, out) for p in args.inputs)}.\n"
        "Measured values are the source's; paths are relative to this file."
    )
    write_cases(cases, out, header)
    print(f"wrote {len(cases)} cases to {out}")
    for why, count in sorted(skipped.items()):
        print(f"  skipped {count}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
