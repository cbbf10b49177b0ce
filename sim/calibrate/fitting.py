"""Fitting one kernel family's efficiency surfaces and collective tables from measured rows.

For each kernel class and key (dtype; attention backend and KV dtype; elementwise kind) one
Surface of log(measured / roofline) over the class's shape features (sim/cost/roofline.py), by
penalised least squares. Attention kernels also get a launch floor, paid once per step.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sim.cost.kernels import AttentionShape, CommTable, KernelPricer
from sim.cost.prior import CostProfile
from sim.cost.profiles import GpuProfile
from sim.cost.roofline import (
    DECODE_FEATURES,
    ELEMENTWISE_FEATURES,
    GEMM_FEATURES,
    MOE_FEATURES,
    PREFILL_FEATURES,
    WEIGHT_BYTES,
    attention_dtype,
    compute_dtype,
    decode_shape,
    gemm_shape,
    moe_shape,
    prefill_shape,
)
from sim.cost.surface import Surface, data_bounds, grid
from sim.specs.hardware import Hardware

SMOOTHING = 0.3

HELD_OUT_FRACTION = 0.2

SEED = 0

KNOTS = {
    "gemm": [
        np.arange(0, 15.5, 0.5),
        np.arange(5, 18, 2),
        np.arange(5, 18, 2),
        np.linspace(0, 1, 5),
    ],
    "attention_prefill": [
        np.arange(0, 15, 2),
        np.arange(0, 15, 2),
        np.arange(0, 15, 2),
        np.arange(6, 10),
        np.arange(0, 7, 3),
    ],
    "attention_decode": [
        np.arange(0, 18),
        np.arange(0, 15, 2),
        np.arange(6, 10),
        np.arange(0, 7, 2),
    ],
    "moe": [np.arange(-10, 15, 1), np.arange(0, 11, 2), np.arange(18, 31, 1)],
    "elementwise": [np.arange(8, 35, 2)],
}


# ---- targets: log(measured / roofline) and features per kernel class -----------------------
def roofline(hw: Hardware, op: str, rows: pd.DataFrame, key: str):
    """(features, roofline seconds) of rows of one kernel class and key: the least time the
    GPU's datasheet peaks allow each call (a batch of attention: its sequences' sum)."""
    f = {c: rows[c].to_numpy(dtype=np.float64) for c in rows.columns if rows[c].dtype.kind in "fi"}
    if op == "gemm":
        flops, nbytes, x = gemm_shape(hw, f["m"], f["n"], f["k"], key)
        peak = hw.peak_flops_per_s(compute_dtype(hw, key))
        return x, np.maximum(flops / peak, nbytes / hw.hbm_bytes_per_s)
    if op == "moe":
        # the experts the table's routing touched, as a served batch's (sim/cost/routing.py)
        flops, nbytes, x = moe_shape(
            hw, f["tokens"], f["hidden"], f["inter"], f["topk"], f["experts"], key
        )
        peak = hw.peak_flops_per_s(compute_dtype(hw, key))
        return x, np.maximum(flops / peak, nbytes / hw.hbm_bytes_per_s)
    if op == "elementwise":
        return np.log2(f["nbytes"])[:, None], f["nbytes"] / hw.hbm_bytes_per_s
    kv_dtype = key.split("/")[1]
    shape = (f["heads"], f["kv_heads"], f["head_dim"], np.nan_to_num(f["window"]), False,
             WEIGHT_BYTES[kv_dtype])  # fmt: skip
    if op == "attention_prefill":
        flops, nbytes, x = prefill_shape(hw, f["q"], f["ctx"], f["batch"], *shape)
    else:
        flops, nbytes, x = decode_shape(hw, f["ctx"], f["batch"], *shape)
    peak = hw.peak_flops_per_s(attention_dtype(hw, kv_dtype))
    return x, f["batch"] * np.maximum(flops / peak, nbytes / hw.hbm_bytes_per_s)


def _targets(hw: Hardware, op: str, rows: pd.DataFrame, key: str):
    """(features, y) for fitting one surface on rows of one kernel class and key."""
    x, roof = roofline(hw, op, rows, key)
    t = rows["latency_s"].to_numpy(dtype=np.float64)
    if op.startswith("attention"):  # the launch floor is paid once a step, apart
        t = np.maximum(t - attention_floor(t), 0.1 * t)
    return x, np.log(t / roof)


def attention_floor(latency_s: np.ndarray) -> float:
    """An attention kernel's launch floor: just under the fastest measured calls."""
    return float(0.9 * np.percentile(latency_s, 1))


FEATURES = {
    "gemm": GEMM_FEATURES,
    "attention_prefill": PREFILL_FEATURES,
    "attention_decode": DECODE_FEATURES,
    "moe": MOE_FEATURES,
    "elementwise": ELEMENTWISE_FEATURES,
}


def _fit_surface(hw: Hardware, op: str, key: str, rows: pd.DataFrame) -> dict:
    x, y = _targets(hw, op, rows, key)
    ok = np.isfinite(y) & np.all(np.isfinite(x), axis=1)
    surface = grid(FEATURES[op], KNOTS[op]).fitted(x[ok], y[ok], SMOOTHING)
    return surface.to_dict() | {"train_rows": int(ok.sum())}


def key_of(op: str, rows: pd.DataFrame) -> pd.Series:
    if op in ("gemm", "moe"):
        return rows["dtype"]
    if op.startswith("attention"):
        return rows["backend"] + "/" + rows["kv_dtype"]
    return rows["kind"]


def _comm_tables(rows: pd.DataFrame, kind: str) -> dict:
    out = {}
    for gpus, g in rows[rows["op"] == kind].groupby("num_gpus"):
        med = g.groupby("nbytes")["latency_s"].median()
        sizes = med.index.to_numpy(float)
        pick = np.unique(np.searchsorted(sizes, np.geomspace(sizes[0], sizes[-1], 48)))
        pick = np.unique(np.clip(pick, 0, len(sizes) - 1))
        out[f"{kind}/{int(gpus)}"] = CommTable(sizes[pick], med.to_numpy()[pick]).to_dict()
    return out


def split(obs: pd.DataFrame, held_out_models: tuple[str, ...]) -> np.ndarray:
    """True for held-out rows: a seeded share of each kernel table; whole models of per-layer
    tables; of a layer profile's mixed prefill+decode batches, all but a seeded share (the
    fit learns mixed batches from that share, single-phase batches from the rest)."""
    draw = np.random.default_rng(SEED).random(len(obs))
    held = draw < HELD_OUT_FRACTION
    per_layer = obs["family"].eq("vidur") & obs["op"].isin(["gemm", "elementwise"])
    held = np.where(per_layer, obs["model"].isin(held_out_models), held)
    both = obs["op"].eq("attention_mixed") & (obs["prefill_chunk"] > 0) & (obs["n_decode"] > 0)
    return np.where(both, draw >= HELD_OUT_FRACTION, held)


def _as_fit_rows(obs: pd.DataFrame) -> pd.DataFrame:
    """Layer-profile attention rows of one phase become ordinary prefill / decode rows."""
    mixed = obs[obs["op"] == "attention_mixed"]
    pre = mixed[(mixed["n_decode"] == 0) & (mixed["prefill_chunk"] > 0)].assign(
        op="attention_prefill",
        q=lambda d: d["prefill_chunk"],
        ctx=lambda d: d["kv_prefill"],
        batch=1.0,
    )
    dec = mixed[(mixed["prefill_chunk"] == 0) & (mixed["n_decode"] > 0)].assign(
        op="attention_decode", ctx=lambda d: d["kv_decode"], batch=lambda d: d["n_decode"]
    )
    rest = obs[obs["op"] != "attention_mixed"]
    return pd.concat([rest, pre, dec])


def _fit_mixed_decode(hw: Hardware, mixed: pd.DataFrame, family: dict) -> dict:
    """Decodes that share a kernel with a prefill chunk run without split-KV and without GQA
    packing on some backends: fit their own surface on what the mixed batches leave after
    the prefill part and the launch floor."""
    out = {}
    pricer = pricer_for(hw, family)
    for (backend, kv_dtype), rows in mixed.groupby(["backend", "kv_dtype"]):
        f = {
            c: rows[c].to_numpy(dtype=np.float64)
            for c in (
                "prefill_chunk",
                "kv_prefill",
                "n_decode",
                "kv_decode",
                "heads",
                "kv_heads",
                "head_dim",
                "latency_s",
            )
        }
        shape = AttentionShape(
            f["heads"], f["kv_heads"], f["head_dim"], kv_dtype=kv_dtype, backend=backend
        )
        floor = pricer.attention_floor_s("attention_prefill", shape)
        pre = pricer.prefill_s(f["prefill_chunk"], f["kv_prefill"], 1.0, shape)
        rest = np.maximum(f["latency_s"] - floor - pre, 0.05 * f["latency_s"])
        flops, nbytes, x = decode_shape(
            hw,
            f["kv_decode"],
            f["n_decode"],
            f["heads"],
            f["kv_heads"],
            f["head_dim"],
            0.0,
            False,
            WEIGHT_BYTES[kv_dtype],
        )
        peak = hw.peak_flops_per_s(attention_dtype(hw, kv_dtype))
        roof = f["n_decode"] * np.maximum(flops / peak, nbytes / hw.hbm_bytes_per_s)
        surface = grid(DECODE_FEATURES, KNOTS["attention_decode"]).fitted(
            x, np.log(rest / roof), SMOOTHING
        )
        out[f"attention_decode_mixed/{backend}/{kv_dtype}"] = surface.to_dict() | {
            "train_rows": len(rows)
        }
    return out


def fit_family(hw: Hardware, obs: pd.DataFrame, held: np.ndarray, base: dict | None = None) -> dict:
    """Surfaces and comm tables of one kernel family, fitted on the rows not held out.
    `base`: the GPU's kernel-table GEMM surfaces, which per-layer tables may build on."""
    train = _as_fit_rows(obs[~held])
    surfaces, floors, notes = {}, {}, {}
    for op in FEATURES:
        rows = train[train["op"] == op]
        if not len(rows):
            continue
        for key, group in rows.groupby(key_of(op, rows)):
            if len(group) < 5:
                continue
            name = f"{op}/{key}"
            if op == "gemm" and base and name in base and group["model"].nunique() > 1:
                surfaces[name], notes[name] = _per_layer_gemm(hw, key, group, base[name])
            else:
                surfaces[name] = _fit_surface(hw, op, key, group)
            if op.startswith("attention"):
                floors[name] = attention_floor(group["latency_s"].to_numpy())
    comm = _comm_tables(obs[~held], "allreduce") | _comm_tables(obs[~held], "sendrecv")
    family = {"surfaces": surfaces, "floors": floors, "comm": comm, "notes": notes}
    mixed = obs[
        ~held & obs["op"].eq("attention_mixed") & (obs["prefill_chunk"] > 0) & (obs["n_decode"] > 0)
    ]
    if len(mixed) >= 20:
        surfaces |= _fit_mixed_decode(hw, mixed, family)
    return family


def _per_layer_gemm(hw: Hardware, key: str, rows: pd.DataFrame, base: dict):
    """GEMMs of a per-layer table cover few (n, k) shapes per model. Two candidates: a
    surface of their own, or the GPU's kernel-table surface (dense in n and k) plus a
    correction for the measurement source; pick by leave-one-model-out over these models."""
    base_surface = Surface.from_dict(base)
    x, y = _targets(hw, "gemm", rows, key)
    models = rows["model"].to_numpy()
    scores = {}
    for variant in ("own", "kernel-table base + correction"):
        errs = []
        for model in np.unique(models):
            train, test = models != model, models == model
            fit = _gemm_variant(variant, x[train], y[train], base_surface)
            errs.append(np.mean(np.abs(np.expm1(fit(x[test]) - y[test]))))
        scores[variant] = float(np.mean(errs) * 100)
    best = min(scores, key=scores.get)
    final = _gemm_variant(best, x, y, base_surface)
    note = (
        f"{best} (leave-one-model-out MAPE "
        + ", ".join(f"{v}: {e:.2f}%" for v, e in scores.items())
        + ")"
    )
    return final.to_dict() | {"train_rows": len(rows)}, note


def _gemm_variant(variant: str, x, y, base: Surface) -> Surface:
    empty = grid(GEMM_FEATURES, KNOTS["gemm"])
    if variant == "own":
        return empty.fitted(x, y, SMOOTHING)
    correction = empty.fitted(x, y - base(x), 1.0)
    bounds = data_bounds(x, base.bounds)
    return Surface(base.features, base.knots, base.coef + correction.coef, bounds)


def pricer_for(hw: Hardware, family: dict) -> KernelPricer:
    profile = GpuProfile(hw.name, "f", {"f": family}, Path("<fit>"))
    return profile.pricer(hw, CostProfile.load("prior"), "f")
