"""Fitting one GPU's cost profile from its measured kernel tables (`python -m sim.calibrate`).

For each GPU with tables in the data folder and each kernel family (engine@version, or a
measurement source), fit one Surface of log(measured / roofline) per kernel class and key,
measure its error on rows it never saw, and write calibration/profiles/<gpu>.json and
calibration/fit-report.md. Held-out rows: a seeded 20% of each kernel table; for per-layer
tables of several models, whole models (fit on some models, test on the others), plus a
leave-one-model-out pass reported for every model.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sim.calibrate.check import mape_pct, predict
from sim.calibrate.fitting import HELD_OUT_FRACTION, SEED, SMOOTHING, fit_family, pricer_for, split
from sim.calibrate.kernel_tables import read_tables
from sim.calibrate.peaks import data_errors, summarise
from sim.calibrate.report import held_out_errors, round_error
from sim.cost.measured_moe import shape_key
from sim.engines.versions import release_key
from sim.specs.hardware import load_hardware
from sim.user_files import load_yaml


@dataclass(frozen=True, slots=True)
class Source:
    """Where one GPU's tables live, and which models each per-layer source holds out."""

    gpu: str
    folders: tuple[str, ...]  # relative to the data root
    held_out_models: tuple[str, ...] = ()
    default_family: str = ""


SOURCES = (
    Source(
        "h100-sxm",
        (
            "aiconfigurator/perf_data/h100_sxm",
            "vidur/profiling/compute/h100",
            "vidur/profiling/network/h100_dgx",
        ),
        ("Llama-2-7b-hf",),
        "vllm@0.24.0",
    ),
    Source("h200", ("aiconfigurator/perf_data/h200_sxm",), (), "vllm@0.24.0"),
    Source(
        "a100-80gb",
        (
            "aiconfigurator/perf_data/a100_sxm",
            "vidur/profiling/compute/a100",
            "vidur/profiling/network/a100_dgx",
        ),
        ("Meta-Llama-3-8B", "Meta-Llama-3-70B"),
        "vllm@0.14.0",
    ),
    Source("a40", ("vidur/profiling/compute/a40",), ("Llama-2-7b-hf",), "vidur"),
    Source(
        "rtx-pro-6000",
        ("LLMServingSim/profiler_perf_RTXPRO6000_Llama-3.1-8B_bf16",),
        (),
        "vllm@0.19.0",
    ),
)

# A family's measured surface that does not describe the kernel its release ran, replaced by
# the same kernel class measured for the next release that has it, with the evidence.
SUPERSEDED = {
    ("vllm@0.14.0", "gemm/fp8"): (
        "the 0.14 collection times per-tensor FP8 GEMMs (vLLM's CUTLASS scaled_mm, its only "
        "per-tensor FP8 path on Hopper since 0.5) up to 2x slower than its own BF16 GEMMs at "
        "decode shapes (m <= 64; n=8192, k=1024: 15.3 us against 8.4 us on the H100), while "
        "every later collection (0.18, 0.19, 0.24, whose kernel_source names "
        "CutlassFP8ScaledMMLinearKernel) times the same kernel at or under BF16, as half the "
        "weight bytes predict; FP8 decodes of the releases it priced ran faster than it "
        "predicts (issue 43)"
    ),
}

# torch@ is calibration/profile_gpu.py; TensorRT-LLM's attention tables are its TRTLLM backend
FAMILIES = ("vllm@", "sglang@", "trtllm@", "vidur", "torch@")
REUSE_ENGINES = ("vllm", "sglang", "trtllm")
MOE_SHAPE = ("dtype", "hidden", "inter", "topk", "experts")  # measured_moe's curve keys


def _supersede(families: dict) -> None:
    """Replace each SUPERSEDED surface by the next measured release's, noting why."""
    for (family, key), why in SUPERSEDED.items():
        fam = families.get(family)
        if fam is None or key not in fam["surfaces"]:
            continue
        engine = family.split("@")[0]
        later = sorted((f for f in families if f.startswith(engine + "@") and f != family
                        and key in families[f]["surfaces"] and _release(f) > _release(family)),
                       key=_release)  # fmt: skip
        if not later:
            continue
        fam["surfaces"][key] = families[later[0]]["surfaces"][key]
        fam["notes"][key] = f"{later[0]}'s surface, not this collection's: {why}"


def _release(family: str) -> tuple:
    return release_key(family.split("@")[1])


def _cross_model(hw, obs, source: Source, base: dict | None) -> list[dict]:
    """Leave one model out, for per-layer tables holding several models."""
    per_layer = obs[(obs["family"] == "vidur") & obs["op"].isin(["gemm", "elementwise"])]
    out = []
    for model in sorted(per_layer["model"].unique()):
        held = (per_layer["model"] == model).to_numpy()
        fam = fit_family(hw, per_layer.reset_index(drop=True), held, base)
        test = per_layer[held]
        pred = predict(test, pricer_for(hw, fam))
        gemm = (test["op"] == "gemm").to_numpy()
        out.append(
            {
                "model": model,
                "gemm_mape_pct": round_error(
                    mape_pct(pred[gemm], test["latency_s"].to_numpy()[gemm])
                ),
                "rows": int(gemm.sum()),
                "designated": model in source.held_out_models,
            }
        )
    return out


def _aliases(data_root: Path, folders) -> dict:
    """Releases whose tables were copied from another release (reuse.yaml)."""
    out = {}
    for folder in folders:
        for engine in REUSE_ENGINES:
            for reuse in sorted((data_root / folder).rglob(f"{engine}/*/reuse.yaml")):
                data = load_yaml(reuse)
                entries = data.get("reuse", []) if isinstance(data, dict) else []
                if entries:
                    out[f"{engine}@{reuse.parent.name}"] = f"{engine}@{entries[0]['from_version']}"
    return out


def measured_moe(rows: pd.DataFrame) -> dict:
    """The timed curves of a family's MoE rows (kernel_tables' frame: op moe), the median time
    per shape and token count, as the profile holds them (sim/cost/measured_moe.py)."""
    if rows.empty:
        return {}
    grid = np.unique(rows["tokens"].to_numpy(dtype=np.float64))
    at = {t: i for i, t in enumerate(grid)}
    curves = {}
    median = rows.groupby([*MOE_SHAPE, "tokens"], sort=True)["latency_s"].median()
    for shape, curve in median.groupby(level=list(range(len(MOE_SHAPE)))):
        values = np.full(len(grid), np.nan, dtype="<f4")
        for (*_, tokens), seconds in curve.items():
            values[at[float(tokens)]] = seconds
        if np.isfinite(values).sum() >= 2:
            curves[shape_key(*shape)] = base64.b64encode(values.tobytes()).decode("ascii")
    return {"tokens": grid.tolist(), "curves": curves} if curves else {}


def calibrate_gpu(source: Source, data_root: Path, out_dir: Path, log=print) -> dict:
    hw = load_hardware(source.gpu)
    obs = pd.concat(
        [read_tables(data_root / f) for f in source.folders if (data_root / f).exists()],
        ignore_index=True,
    )
    obs = obs[obs["family"].str.startswith(FAMILIES) & (obs["latency_s"] > 0)]
    # a table whose framework column names another engine than its folder is left out: SGLang
    # 0.5.6.post2's custom all-reduce table says TRTLLM (TensorRT-LLM's kernel inside SGLang)
    engine = obs["family"].str.split("@").str[0]
    folder = obs["source"].str.extract(r"/(vllm|sglang|trtllm)/[^/]+/[^/]+$", expand=False)
    obs = obs[folder.isna() | folder.eq(engine)]
    # weight formats the simulator has no name for (SGLang's int8 weight-only GEMMs) are left out
    obs = obs[~(obs["op"].isin(["gemm", "moe"]) & obs["dtype"].isna())]
    # rows faster than the GPU's peaks allow are data errors: left out, and named in the report
    errors = data_errors(hw, obs)
    obs = obs.drop(index=errors.index)
    families, report = {}, {"gpu": source.gpu, "families": {}}
    report["data_errors"] = summarise(errors, data_root)
    if len(errors):
        log(f"  {source.gpu}: {len(errors):,} measured rows faster than the GPU's peaks allow, "
            "left out of the fit (fit-report.md names each table and its worst row)")  # fmt: skip
    order = sorted(obs["family"].unique(), key=lambda f: (f == "vidur", f))  # kernel tables first
    for family in order:
        rows = obs[obs["family"] == family]
        started = time.perf_counter()
        rows = rows.reset_index(drop=True)
        held = split(rows, source.held_out_models)
        base = families.get(source.default_family, {}).get("surfaces")
        fam = fit_family(hw, rows, held, base if family == "vidur" else None)
        sources = sorted(
            {
                str(Path(s).relative_to(data_root)) if str(s).startswith(str(data_root)) else str(s)
                for s in rows["source"].unique()
            }
        )
        held_models = sorted(set(rows.loc[held, "model"]) & set(source.held_out_models))
        fam["source"] = f"{family} kernels measured on {hw.display_name}: " + "; ".join(
            sorted({s.split("/")[0] for s in sources})
        )
        fam["tables"] = sources
        fam["held_out_models"] = held_models
        fam["errors"] = held_out_errors(hw, rows, held, fam)
        fam["moe_measured"] = measured_moe(rows[rows["op"] == "moe"])
        families[family] = fam
        report["families"][family] = fam["errors"]
        report.setdefault("notes", {})[family] = fam["notes"]
        log(
            f"  {source.gpu} {family}: {len(rows)} rows, {len(fam['surfaces'])} surfaces, "
            f"{time.perf_counter() - started:.1f}s"
        )
    _supersede(families)
    if any(obs["family"] == "vidur"):
        base = families.get(source.default_family, {}).get("surfaces")
        report["cross_model"] = _cross_model(hw, obs.reset_index(drop=True), source, base)
    profile = {
        "gpu": source.gpu,
        "generated_by": "python -m sim.calibrate",
        "default_family": source.default_family,
        "aliases": _aliases(data_root, source.folders),
        "fit": {"smoothing": SMOOTHING, "held_out_fraction": HELD_OUT_FRACTION, "seed": SEED},
        "families": families,
    }
    path = out_dir / "profiles" / f"{source.gpu}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(profile, separators=(",", ":")) + "\n")
    return report
