"""The AIConfigurator silicon importer: one closed-loop case per aggregated row of a silicon
CSV (mean TTFT and TPOT of a deployment at a fixed concurrency and ISL/OSL), with the output
throughput by Little's law, and a flag on rows whose measured rate needs more prefill compute
than the GPUs have."""

from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd

from sim.cost.routing import power_law_touched
from sim.engines.versions import version_tuple
from sim.errors import UserError
from sim.scenarios.validate.importers.catalogue import SYSTEMS, catalogue_model
from sim.scenarios.validate.importers.fields import count, count_or_one, finite_float
from sim.scenarios.validate.importers.reused_prompts import (
    benchmark_run,
    fp8_kv_checkpoint,
    replay_reused_prompts,
)
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model
from sim.user_files import RESULTS_BYTES, guarded, refuse_duplicate_columns

COLUMNS = {"id", "backend", "backend_version", "model_path", "system", "mode", "isl", "osl"}
COLUMNS |= {"batch_size", "tp_size", "silicon_ttft_ms", "silicon_tpot_ms"}
PRECISIONS = {"fp8": "fp8", "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4", "bf16": "bf16"}
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


def silicon(path: Path, out: Path, backends=None, systems=None) -> tuple[list[dict], dict]:
    """(cases, rows skipped by reason) of the rows of `backends` on `systems` (all if None)."""
    df = _read_csv(path)
    missing = COLUMNS - set(df.columns)
    if missing:
        raise UserError(f"{path}: not a silicon CSV (missing {', '.join(sorted(missing))})")
    skipped: dict[str, int] = {}
    cases, runs = [], []
    for row in df.itertuples(index=False):
        if backends and row.backend not in backends:
            continue
        if systems and row.system not in systems:
            continue
        why = _skipped_because(row)
        if why:
            skipped[why] = skipped.get(why, 0) + 1
            continue
        cases.append(_case(row, path))
        runs.append(benchmark_run(row))
    replay_reused_prompts(cases, runs)
    return cases, skipped


def _read_csv(path: Path) -> pd.DataFrame:
    refuse_duplicate_columns(path)
    try:
        with guarded(path, "CSV", RESULTS_BYTES) as fh:
            return pd.read_csv(fh)
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text; save the CSV as UTF-8") from None
    except pd.errors.EmptyDataError:
        raise UserError(f"{path}: not a readable CSV (the file is empty)") from None
    except (ValueError, OverflowError) as exc:  # unparseable
        raise UserError(f"{path}: not a readable CSV ({exc.__class__.__name__})") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read the file ({exc.strerror})") from None


def _skipped_because(row) -> str | None:
    """Why a row cannot become a case, or None."""
    if row.mode != "agg":
        return "disaggregated prefill/decode (not modelled)"
    if not isinstance(row.backend_version, str) or not row.backend_version.strip():
        return "no engine version recorded"
    ttft, tpot = finite_float(row.silicon_ttft_ms), finite_float(row.silicon_tpot_ms)
    if not (ttft > 0 and tpot > 0):
        return "no measured TTFT/TPOT"
    if _moe_gpus(row) > _attention_gpus(row):
        # vLLM's data-parallel attention: the experts span dp x tp GPUs (moe_tp_size), the
        # attention tp_size of them; the simulator splits experts over the replica's TP only
        return "experts over more GPUs than the attention's TP (data-parallel attention)"
    return None


def _moe_gpus(row) -> int:
    """GPUs the row's experts span: moe_tp_size x moe_ep_size."""
    return _count(row, "moe_tp_size") * _count(row, "moe_ep_size")


def _attention_gpus(row) -> int:
    """GPUs of the row's attention: tp_size x pp_size x attention_dp_size."""
    return _count(row, "tp_size") * _count(row, "pp_size") * _count(row, "attention_dp_size")


def _count(row, key: str) -> int:
    return count_or_one(getattr(row, key, 1))


def _case(row, path: Path) -> dict:
    ttft, tpot = finite_float(row.silicon_ttft_ms), finite_float(row.silicon_tpot_ms)
    model, note = catalogue_model(str(row.model_path))
    notes = [note] if note else []
    where = f"{path}: row {row.id}"
    parallel = _parallel(row, where, notes)
    c = count(row.batch_size, f"{where}: batch_size")
    isl, osl = count(row.isl, f"{where}: isl"), count(row.osl, f"{where}: osl")
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
    gpus = parallel["tp"] * parallel["pp"]
    share = prefill_share_of_peak(model, hw, dtype, c, isl, e2e_s, gpus)
    if share is not None and share >= IMPLAUSIBLE_PREFILL_SHARE:
        flags.append("prefill_above_peak")
        notes.append(
            f"the measured rate implies prefill alone at {100 * share:.0f}% of each GPU's "
            f"dense {PEAK_DTYPE.get(dtype, 'bf16')} peak, with decode still to run: the run "
            "must have reused cached prompt prefixes, which the row does not record"
        )
    floor_ms = decode_floor_ms(model, hw, dtype, c, isl + osl // 2, gpus)
    if floor_ms is not None and tpot < floor_ms:
        flags.append("decode_below_floor")
        notes.append(
            f"the measured TPOT {tpot:.3g} ms is below {floor_ms:.3g} ms, the time to read "
            f"{c} sequences' KV at their mean context and the weights they touch once at the "
            "GPUs' HBM peak: the server ran fewer requests at a time than the concurrency, "
            "through a limit the row does not record"
        )
    launch = launch_args(str(row.backend), c, isl, osl, str(row.backend_version))
    if launch:
        notes.append(LAUNCH_NOTES[str(row.backend)])
    if launch and fp8_kv_checkpoint(str(row.model_path)):  # vLLM's fp8, SGLang's fp8_e4m3
        launch["kv_cache_dtype"] = "fp8"  # AIConfigurator's choice for FP8 checkpoints
        notes.append("with an FP8 KV cache, as AIConfigurator launches FP8 checkpoints")
    return {
        "id": f"aic-{row.id}",
        "engine": f"{row.backend}@{row.backend_version}",
        "hardware": hw,
        "model": model,
        "dtype": dtype,
        "parallel": parallel,
        **({"engine_args": launch} if launch else {}),
        # what no row records, assumed: the band also runs the engine's defaults
        **(
            {"launch": {"source": LAUNCH_SOURCES[row.backend], "engine_args": launch}}
            if launch
            else {}
        ),
        "workload": {
            "closed_loop": {
                "concurrency": c,
                "num_requests": closed_loop_requests(c),
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


def _parallel(row, where: str, notes: list[str]) -> dict:
    """The case's `parallel` mapping; what cannot be simulated as recorded goes into `notes`."""
    tp = count(row.tp_size, f"{where}: tp_size")
    parallel = {"tp": tp, "pp": _count(row, "pp_size")}
    ep = _count(row, "moe_ep_size")
    if ep > 1:
        if ep == tp:
            parallel["ep"] = ep
        else:
            notes.append(f"moe_ep_size {ep} != tp {tp}: simulated with experts split by TP")
    adp = _count(row, "attention_dp_size")
    if adp > 1:
        notes.append(f"attention_dp_size {adp} (DP attention) simulated as TP")
    return parallel


def closed_loop_requests(concurrency: int) -> int:
    """Requests per closed-loop case: ten per client (at least 16), every one counted, the
    first wave included, as AIConfigurator's benchmark runners measure (ai-dynamo/aiconfigurator
    src/aiconfigurator/eval/benchmarks: genai_perf_runner.py sends --request-count 10 x
    concurrency after a warm-up of 2 x concurrency, which AIPerf, genai-perf's successor, lets
    drain before it measures (ai-dynamo/aiperf docs/tutorials/warmup.md); bench_serving_runner.py
    sends 10 x concurrency prompts with no warm-up). Either way every client starts the measured
    run at once, and that burst is in the means: AIConfigurator's own queueing model
    (docs/design/queueing_model.md) compares its silicon TTFT as a mean blended over the run's
    N requests, the initial burst included. The rows do not say which runner measured them;
    both send 10 per client."""
    return max(10 * concurrency, 16)


LAUNCH_SOURCE = (
    "AIConfigurator's generator, rule_plugin/benchmark/vllm.rule (ai-dynamo/aiconfigurator "
    "2b264ba) and config/backend_config_mapping.yaml (043c66c)"
)
LAUNCH_SOURCES = {
    "vllm": LAUNCH_SOURCE,
    "sglang": (
        "AIConfigurator's generator, rule_plugin/benchmark/sglang.rule (ai-dynamo/aiconfigurator "
        "5559575), config/backend_config_mapping.yaml (dbb322e), backend_templates/sglang/"
        "cli_args.j2"
    ),
}
LAUNCH_NOTES = {
    "vllm": (
        "launched as AIConfigurator's generator launches a benchmark worker (max_num_seqs "
        "= concurrency, max_num_batched_tokens = concurrency + ISL + 1500, max_model_len = "
        "ISL + OSL + 1500; the prefix cache left on)"
    ),
    "sglang": (
        "launched as AIConfigurator's generator launches a benchmark worker "
        "(max_running_requests = concurrency, max_prefill_tokens = ISL + 1500, "
        "enable_mixed_chunk; the radix cache left on)"
    ),
}


def decode_floor_ms(model, hardware, dtype, concurrency, context, gpus) -> float | None:
    """The least time one decode step of `concurrency` sequences at `context` tokens can take:
    their KV (windowed layers at their window) and the weights they touch read once at the
    GPUs' HBM peak, spread over `gpus`; a MoE touches the experts the cost model's routing
    touches (sim/cost/routing.py: AIConfigurator's power law, which reads fewer than
    independent picks), and that share of the weights is a lower bound on the bytes read.
    None for a model or GPU not catalogued."""
    try:
        m, hw = load_model(model), load_hardware(hardware)
        weights = m.weight_bytes(dtype if dtype in ("bf16", "fp8", "fp4") else "auto")
    except UserError:
        return None
    if m.moe is not None:
        e = m.moe
        weights *= float(power_law_touched(concurrency, e.experts_per_token, e.num_experts))
        weights /= e.num_experts
    kv = concurrency * m.kv_bytes_for_sequence(context)
    return (weights + kv) / gpus / hw.hbm_bytes_per_s * 1e3


def launch_args(backend: str, concurrency: int, isl: int, osl: int, version: str = "") -> dict:
    """The engine arguments of a silicon row's server, as AIConfigurator's config generator
    launches an aggregated vLLM worker for a benchmark of `concurrency` clients
    (ai-dynamo/aiconfigurator src/aiconfigurator/generator/rule_plugin/benchmark/vllm.rule at
    2b264ba: max_batch_size = the concurrency, max_num_tokens = max_batch_size + ISL + 1500,
    max_seq_len = ISL + OSL + 1500, cuda_graph_batch_sizes = 1..max_batch_size; mapped to vLLM's
    flags by generator/config/backend_config_mapping.yaml at 043c66c: --max-num-seqs,
    --max-num-batched-tokens, --max-model-len, --cudagraph-capture-sizes; its
    disable_prefix_cache key, mapped to --no-enable-prefix-caching, is set only to false when
    the workload shares a prefix and by no default (backend_templates/vllm/cli_args.0.12.0.j2
    writes the flag only when it is true; rendering/engine.py; at 095f58a), so vLLM's own prefix
    caching stays on). The rows come from AIConfigurator's automated gap analysis, which deploys
    what its generator writes; the token budget decides how many prompts share a prefill step,
    which is most of a closed loop's TTFT. The capture sizes 1..concurrency are left at vLLM's
    own list: on the 282 vLLM rows they moved no median by more than 0.1 point. An SGLang worker
    (rule_plugin/benchmark/ sglang.rule at 5559575, flags by the same mapping at dbb322e and
    backend_templates/sglang/ cli_args.j2) gets --max-running-requests = the concurrency,
    --max-prefill-tokens = ISL + 1500, --enable-mixed-chunk (decodes ride in the prefill steps:
    sim/schedulers/sglang.py) and, as vLLM, no flag that turns the radix cache off; its
    chunked_prefill_size stays SGLang's own (the rule sets no max_num_tokens) and its
    --cuda-graph-bs 1..concurrency is left at SGLang's list, as vLLM's. Which rows the generator
    launched is not recorded: it supports SGLang from 2025-12-04 (95ddf24) and turns on mixed
    chunks from 2026-01-19 (fa895ff, 07a3779), so releases out before it (0.5.1.post1: its wheel
    is of 2025-08-24) keep SGLang's defaults, as the visible rows say (the 78 Qwen3-32B H100
    rows of 0.5.1.post1: median |error| of TTFT 19.9% and TPOT 7.0% with the defaults, 63.3% and
    31.4% launched so; the 46 Llama-3.1-8B H200 rows of 0.5.6.post2: 218% and 19.8% with the
    defaults, 31.7% and 15.0% launched so). Other engines' rows keep their defaults."""
    if backend == "sglang":
        if version_tuple(version) < (0, 5, 6):
            return {}
        return {
            "max_num_seqs": concurrency,
            "max_prefill_tokens": isl + 1500,
            "enable_mixed_chunk": True,
        }
    if backend != "vllm":
        return {}
    return {
        "max_num_seqs": concurrency,
        "max_num_batched_tokens": concurrency + isl + 1500,
        "max_model_len": isl + osl + 1500,
    }


def block_scaled_fp8(hf_id: str) -> bool:
    """Whether a checkpoint's FP8 weights are scaled per 128 x 128 block, as their model cards
    say of DeepSeek's V3/R1 and Qwen's -FP8 releases (priced from the fp8_block tables; other
    FP8 runs, such as ModelOpt checkpoints or online quantization, are per-tensor)."""
    return hf_id.startswith("deepseek-ai/") or (hf_id.startswith("Qwen/") and "FP8" in hf_id)


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
    try:
        m, hw = load_model(model), load_hardware(hardware)
        peak = hw.peak_flops_per_s(peak_dtype)
    except UserError:
        return None
    p = m.params
    return 2.0 * (p.active - p.embedding), peak
