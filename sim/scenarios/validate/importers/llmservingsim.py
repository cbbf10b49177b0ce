"""The LLMServingSim bench_examples importer: each run (vllm/meta.json + vllm/requests.jsonl)
becomes a case that replays the recorded arrivals, with TTFT and TPOT measured at mean, p50,
p90 and p99, and the per-request file for the KS tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sim.errors import UserError
from sim.scenarios.validate.engine_queue import ENGINE_QUEUE
from sim.scenarios.validate.importers.catalogue import SYSTEMS, catalogue_model
from sim.scenarios.validate.importers.fields import count, mapping, read_json, relative_path
from sim.user_files import load_json
from sim.workload.bench_results import measured_requests, ttft_from_engine_queue


def llmservingsim(paths, out: Path) -> list[dict]:
    """One case per run found under `paths` (folders of GPU/model/vllm/meta.json)."""
    runs = []
    for p in map(Path, paths):
        runs += [m.parent.parent for m in sorted(p.glob("**/vllm/meta.json"))]
    if not runs:
        raise UserError(f"no LLMServingSim runs (*/vllm/meta.json) under {', '.join(paths)}")
    return [_case(run, out) for run in runs]


def _case(run: Path, out: Path) -> dict:
    meta = read_json(run / "vllm" / "meta.json")
    if not isinstance(meta, dict):
        raise UserError(f"{run / 'vllm' / 'meta.json'}: expected a JSON object")
    kw, where = mapping(meta.get("engine_kwargs")), f"{run / 'vllm' / 'meta.json'}: "
    requests = run / "vllm" / "requests.jsonl"
    model, note = catalogue_model(str(meta.get("model", kw.get("model", ""))))
    notes = [note] if note else []
    args = _engine_args(meta, kw, where)
    parallel = {"tp": count(kw.get("tensor_parallel_size", 1), f"{where}tensor_parallel_size")}
    dp = count(kw.get("data_parallel_size", 1), f"{where}data_parallel_size")
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
    case = {
        "id": f"llmservingsim-{run.parent.name}-{run.name}",
        "engine": f"vllm@{meta.get('vllm_version', '')}",
        "hardware": SYSTEMS.get(run.parent.name, run.parent.name.lower()),
        "model": model,
        "dtype": "bf16" if kw.get("dtype") in ("bfloat16", "bf16") else "auto",
        "entry_point": "offline",
        "parallel": parallel,
        "engine_args": args,
        "workload": {"trace": relative_path(requests, out)},
        "measured": _measured(requests),
        "requests": relative_path(requests, out),
        "source": f"{relative_path(run, out)} (LLMServingSim bench_examples, vLLM offline engine)",
        "notes": "; ".join(notes),
    }
    if ttft_from_engine_queue(str(requests)):  # TTFT from queued_ts (engine_queue.py)
        case["ttft_from"] = ENGINE_QUEUE
    return case


def _engine_args(meta: dict, kw: dict, where: str) -> dict:
    """The engine arguments the run recorded that the simulator takes."""
    args = {k: kw[k] for k in ("max_num_seqs", "max_num_batched_tokens") if kw.get(k)}
    if kw.get("max_model_len"):
        args["max_model_len"] = count(kw["max_model_len"], f"{where}max_model_len")
    if kw.get("kv_cache_dtype", "auto") != "auto":
        args["kv_cache_dtype"] = kw["kv_cache_dtype"]
    cache = mapping(meta.get("kv_cache"))
    if cache.get("gpu_memory_utilization"):
        args["gpu_memory_utilization"] = cache["gpu_memory_utilization"]
    if cache.get("num_gpu_blocks"):  # the pool the run had, not our estimate of it
        args["num_gpu_blocks_override"] = count(cache["num_gpu_blocks"], f"{where}num_gpu_blocks")
    return args


def _measured(requests: Path) -> dict:
    """Mean, p50, p90 and p99 TTFT and TPOT (ms) of the run's requests."""
    got = measured_requests(str(requests))
    measured = {}
    for q in ("ttft", "tpot"):
        v = got[q] * 1e3
        if not len(v):  # no request with two tokens or more: no TPOT
            continue
        measured[f"mean_{q}_ms"] = round(float(np.mean(v)), 4)
        for pct in (50, 90, 99):
            measured[f"p{pct}_{q}_ms"] = round(float(np.percentile(v, pct)), 4)
    return measured


def _server_link(path: Path) -> dict | None:
    """The GPU-to-GPU link an LLMServingSim cluster config records for the server the run used
    (`link_bw` GB/s, `link_latency` ns), or None."""
    try:
        cfg = load_json(path)
        bw, lat = float(cfg["link_bw"]), float(cfg.get("link_latency", 0.0))
    except (UserError, ValueError, KeyError, TypeError, AttributeError):  # none recorded
        return None
    if not bw > 0 or lat < 0:
        return None
    return {"link_bytes_per_s": bw * 1e9, "link_latency_s": lat * 1e-9}
