"""scenario=long_context, the whole study: memory, the engine runs, other architectures and the
remedies, gathered into the summary (sim/scenarios/long_context/report.py writes it out).

Runs: the long request alone (its TTFT and TPOT), and for each chunked-prefill budget the
workload's traffic with and without it (common random numbers: the same co-tenants). The
co-tenants measured are those that arrive while the long request is in the engine.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from sim.config import SimConfig
from sim.errors import UserError
from sim.scenarios.long_context.arithmetic import (
    Fit,
    decode_at,
    flops_crossover_tokens,
    tp_choices,
    walk_prefill,
)
from sim.scenarios.long_context.remedies import remedies
from sim.scenarios.long_context.runs import (
    TAIL_S,
    Context,
    background_workload,
    chunk_tokens,
    cotenant_figures,
    fit_for_simulation,
    long_request_figures,
    prefill_split,
    run_all,
    sim_config,
    with_long_request,
)


@dataclass(frozen=True, slots=True)
class Study:
    summary: dict
    scaling: pd.DataFrame  # TTFT split by prompt length
    steps: pd.DataFrame | None  # the run with traffic at the engine's budget
    requests: pd.DataFrame | None
    long_index: int | None


def run_long_context(cfg: SimConfig, progress=None) -> Study:
    started = time.perf_counter()
    lc = cfg.long_context
    ctx = Context.of(cfg)
    given, fit = fit_for_simulation(ctx)
    memory = memory_section(ctx, given, fit)
    s = {
        "model": ctx.model.name,
        "hardware": ctx.hardware.name,
        "engine": _engine_label(ctx),
        "prompt_tokens": lc.prompt_tokens,
        "output_tokens": lc.output_tokens,
        "trained_context_tokens": ctx.trained_tokens,
        **memory,
    }
    at = fit or given  # where time is measured: the simulated fit, else the given config
    cost = ctx.cost_model(at.tp, at.pp)
    chunk = chunk_tokens(cost.settings, lc.prompt_tokens)
    split, scaling = prefill_split(cost, lc.prompt_tokens, chunk)
    dec = decode_at(cost, lc.prompt_tokens, at.kv_bytes_sequence_per_gpu, at.weights_bytes_per_gpu)
    s |= {
        "simulated": fit is not None,
        "simulated_parallel": at.parallel,
        "simulated_gpus": at.num_gpus,
        "chunk_tokens": chunk,
        "ttft_s": split["walk_ttft_s"],
        "ttft_breakdown_s": split["breakdown_s"],
        "prefill": {k: v for k, v in split.items() if k != "breakdown_s"},
        "flops_crossover_tokens": flops_crossover_tokens(ctx.model),
        "time_crossover_tokens": _time_crossover(scaling),
        "decode_ms_per_token": dec.total_s * 1e3,
        "decode": _in_ms(asdict(dec)),
    }
    steps = requests = long_index = None
    if fit is not None:
        runs = _engine_runs(ctx, fit, cost, dec.total_s, progress)
        s |= runs["summary"]
        steps, requests, long_index = runs["steps"], runs["requests"], runs["long_index"]
    s["architectures"] = [architecture_row(cfg, name) for name in lc.architectures or ()]
    s["remedies"] = remedies(ctx, at, split, dec, s)
    s["wall_time_s"] = time.perf_counter() - started
    return Study(s, pd.DataFrame(scaling), steps, requests, long_index)


def _in_ms(record: dict) -> dict:
    """A record's `*_s` fields as `*_ms`."""
    return {
        (k[:-2] + "_ms" if k.endswith("_s") else k): (v * 1e3 if k.endswith("_s") else v)
        for k, v in record.items()
    }


def _engine_label(ctx: Context) -> str:
    st = ctx.settings(ctx.cfg.parallel.tp)
    return f"{st.engine}@{st.version}"


def memory_section(ctx: Context, given: Fit, fit: Fit | None) -> dict:
    lc, m = ctx.cfg.long_context, ctx.model
    n = ctx.total_tokens
    par = ctx.cfg.parallel
    fp8 = ctx.fit(par.tp, par.pp, kv_cache_dtype="fp8")
    smallest = ctx.smallest_fit() if given.fits else fit  # fit: already the smallest
    return {
        "given_parallel": given.parallel,
        "given_gpus": given.num_gpus,
        "kv_bytes_per_token": m.kv_bytes_per_token(),
        "kv_bytes_per_token_by_kind": m.kv_bytes_per_token_by_kind(),
        "kv_bytes_per_token_fp8": m.kv_bytes_per_token("fp8"),
        "kv_bytes_sequence": m.kv_bytes_for_sequence(lc.prompt_tokens),
        "kv_bytes_sequence_fp8": m.kv_bytes_for_sequence(lc.prompt_tokens, "fp8"),
        "kv_bytes_sequence_per_gpu": given.kv_bytes_sequence_per_gpu,
        "weights_bytes_per_gpu": given.weights_bytes_per_gpu,
        "activation_bytes_per_gpu": given.activation_bytes,
        "kv_pool_bytes_per_gpu": given.kv_pool_bytes_per_gpu,
        "fits": given.fits,
        "fits_fp8_kv": fp8.fits,
        "why_not": given.why,
        "min_tp_to_fit": smallest.tp if smallest is not None and smallest.pp == 1 else None,
        "min_gpus_to_fit": smallest.num_gpus if smallest is not None else None,
        "min_fit_parallel": smallest.parallel if smallest is not None else None,
        "max_context_tokens": given.max_context_tokens,
        "max_context_tokens_fp8_kv": fp8.max_context_tokens,
        "total_tokens": n,
    }


def _time_crossover(scaling: list[dict]) -> int | None:
    """The first scaling length at which the attention part of TTFT exceeds the linear part."""
    return next((r["prompt_tokens"] for r in scaling if r["attention"] > r["linear"]), None)


def traffic_variants(ctx: Context, fit: Fit) -> list[dict]:
    """The engine settings the traffic runs compare: each chunked-prefill budget, and (vLLM)
    the engine's budget with a cap on one request's chunk (long_prefill_token_threshold) so
    that waiting prompts are admitted beside the long one."""
    settings = ctx.settings(fit.tp)
    budget = settings.max_num_batched_tokens
    rows = [
        {"budget": b, "long_prefill_token_threshold": settings.long_prefill_token_threshold}
        for b in sorted(set(ctx.cfg.long_context.budgets or ()) | {budget})
    ]
    if settings.scheduler.startswith("vllm") and not settings.long_prefill_token_threshold:
        rows.append({"budget": budget, "long_prefill_token_threshold": budget // 4})
    return rows


def _variant_chunk(cost, variant: dict, prompt_tokens: int) -> int:
    """The long prompt's chunk under a traffic variant's settings (chunk_tokens' rule)."""
    settings = replace(
        cost.settings,
        max_num_batched_tokens=variant["budget"],
        long_prefill_token_threshold=variant["long_prefill_token_threshold"],
    )
    return chunk_tokens(settings, prompt_tokens)


def _engine_runs(ctx: Context, fit: Fit, cost, step_s: float, progress):
    """The request alone, then each traffic variant with and without it (`cost`: the step
    cost model at fit's parallelism; `step_s`: a decode step alone at the prompt's context)."""
    cfg, lc = ctx.cfg, ctx.cfg.long_context
    settings = ctx.settings(fit.tp)
    engine = (settings.max_num_batched_tokens, settings.long_prefill_token_threshold)
    alone, _ = with_long_request(None, 0.0, lc.prompt_tokens, lc.output_tokens)
    jobs = [(sim_config(ctx, fit), ctx.model, alone, False)]
    variants = traffic_variants(ctx, fit) if lc.background else []
    if variants:  # traffic until the long request's slowest variant is surely done
        prefill_s = max(
            walk_prefill(cost, lc.prompt_tokens, _variant_chunk(cost, v, lc.prompt_tokens)).total_s
            for v in variants
        )
        life = 1.3 * prefill_s + 5 * lc.output_tokens * step_s  # decode beside the traffic
        background = background_workload(cfg, lc.arrival_s + life + TAIL_S)
        mixed, k = with_long_request(background, lc.arrival_s, lc.prompt_tokens, lc.output_tokens)
    for v in variants:
        ours = (v["budget"], v["long_prefill_token_threshold"]) == engine
        changes = {} if ours else {
            "max_num_batched_tokens": v["budget"],
            "long_prefill_token_threshold": v["long_prefill_token_threshold"],
        }  # fmt: skip
        c = sim_config(ctx, fit, **changes)
        jobs += [(c, ctx.model, mixed, ours), (c, ctx.model, background, False)]
    results = run_all(jobs, lc.jobs, progress)
    runs = {
        "simulations": len(results),
        "steps": sum(r["num_steps"] for r in results),
        "simulated_s": sum(r["sim_s"] for r in results),
    }
    solo = long_request_figures(results[0]["requests"], 0)
    out = {
        "ttft_s": solo["ttft_s"],  # the engine's, alone (equal to the walk's total)
        "decode_ms_per_token": solo["tpot_ms"],
        "memory_plan_simulated": results[0]["memory_plan"],
        "engine_runs": runs,
    }
    steps = requests = long_index = None
    rows = []
    for i, v in enumerate(variants):
        with_run, without_run = results[1 + 2 * i], results[2 + 2 * i]
        long = long_request_figures(with_run["requests"], k)
        ids = np.flatnonzero(
            (mixed.arrival_s >= lc.arrival_s) & (mixed.arrival_s <= long["finish_s"])
        )
        ids = ids[ids != k]
        row = {
            **v,
            "engine_default": (v["budget"], v["long_prefill_token_threshold"]) == engine,
            "long_ttft_s": long["ttft_s"],
            "long_tpot_ms": long["tpot_ms"],
            "with": cotenant_figures(with_run["requests"], ids),
            "without": cotenant_figures(without_run["requests"], ids - (ids > k)),
            "max_step_s": with_run["max_step_s"],
            "max_step_without_s": without_run["max_step_s"],
        }
        rows.append(row)
        if row["engine_default"]:
            steps, requests, long_index = with_run["steps"], with_run["requests"], k
            out["cotenant"] = {"with": row["with"], "without": row["without"]}
            out["ttft_with_traffic_s"] = long["ttft_s"]
    if variants:
        out["cotenant_by_budget"] = rows
        out["background"] = background.description
    return {"summary": out, "steps": steps, "requests": requests, "long_index": long_index}


def architecture_row(cfg: SimConfig, name: str) -> dict:
    """The same questions for another model at the same length, on the same GPUs (the
    largest tensor parallelism the model allows up to the given one)."""
    try:
        ctx = Context.of(cfg, name)
        tp = max(t for t in tp_choices(ctx.model, cfg.parallel.tp))
        settings = ctx.settings(tp)
        fit = ctx.fit(tp)
        cost = ctx.cost_model(tp)
    except UserError as exc:
        return {"model": name, "error": str(exc)}
    m, lc = ctx.model, cfg.long_context
    w = walk_prefill(cost, lc.prompt_tokens, chunk_tokens(settings, lc.prompt_tokens))
    dec = decode_at(
        cost, lc.prompt_tokens, fit.kv_bytes_sequence_per_gpu, fit.weights_bytes_per_gpu
    )
    kinds = sorted({layer.attention.value for layer in m.layers})
    return {
        "model": name,
        "attention": "+".join(kinds) + (" (sparse top-k)" if m.indexer else ""),
        "tp": tp,
        "kv_bytes_per_token": m.kv_bytes_per_token(),
        "kv_bytes_sequence": m.kv_bytes_for_sequence(lc.prompt_tokens),
        "kv_bytes_sequence_per_gpu": fit.kv_bytes_sequence_per_gpu,
        "weights_bytes_per_gpu": fit.weights_bytes_per_gpu,
        "ttft_s": w.total_s,
        "ttft_attention_share": w.attention_s / w.total_s,
        "decode_ms_per_token": dec.total_s * 1e3,
        "decode_kv_share": dec.kv_s / dec.total_s,
        "fits": fit.fits,
        "max_context_tokens": fit.max_context_tokens,
        "trained_context_tokens": ctx.trained_tokens,
        "why_not": fit.why,
    }
