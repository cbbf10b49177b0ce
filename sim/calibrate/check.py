"""The cost model's kernel prices against a measured table: every row of any table
sim/calibrate/kernel_tables.py reads, priced by the same KernelPricer the simulator's step costs
use, from the shape in the row's own columns. Layer profiles also get a whole-layer check: for
each mixed prefill+decode attention row, the measured layer (attention + every dense operator
at the batch's token count) against the predicted one. scenario=kernel_check writes the
outcome (sim/scenarios/kernel_check.py); the calibration report scores held-out rows with it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.calibrate.kernel_tables import read_tables
from sim.cost.kernels import AttentionShape, KernelPricer
from sim.cost.prior import CostProfile
from sim.cost.profiles import choose_pricer
from sim.errors import UserError
from sim.specs.hardware import load_hardware


def _groups(obs: pd.DataFrame, keys: list[str]):
    by = keys if len(keys) > 1 else keys[0]
    for key, idx in obs.groupby(by, dropna=False, sort=True).groups.items():
        yield (key if isinstance(key, tuple) else (key,)), idx


def predict(obs: pd.DataFrame, pricer: KernelPricer) -> np.ndarray:
    """Predicted seconds for every observation (NaN for kernel classes not modelled)."""
    out = np.full(len(obs), np.nan)
    pos = pd.Series(np.arange(len(obs)), index=obs.index)

    def put(idx, values):
        out[pos[idx].to_numpy()] = values

    def col(idx, name):
        return obs.loc[idx, name].to_numpy(dtype=np.float64)

    for (op,), idx in _groups(obs, ["op"]):
        if op == "gemm":
            for (dtype,), sub in _groups(obs.loc[idx], ["dtype"]):
                put(sub, pricer.gemm_s(col(sub, "m"), col(sub, "n"), col(sub, "k"), dtype))
        elif op in ("attention_prefill", "attention_decode", "attention_mixed"):
            for (backend, kv_dtype), sub in _groups(obs.loc[idx], ["backend", "kv_dtype"]):
                put(sub, _attention(obs.loc[sub], pricer, op, backend, kv_dtype))
        elif op == "moe":
            for (dtype,), sub in _groups(obs.loc[idx], ["dtype"]):
                put(
                    sub,
                    pricer.moe_s(
                        col(sub, "tokens"),
                        col(sub, "hidden"),
                        col(sub, "inter"),
                        col(sub, "topk"),
                        col(sub, "experts"),
                        dtype,
                    ),
                )
        elif op in ("allreduce", "sendrecv"):
            for (gpus,), sub in _groups(obs.loc[idx], ["num_gpus"]):
                fn = pricer.allreduce_s if op == "allreduce" else pricer.sendrecv_s
                put(sub, fn(col(sub, "nbytes"), int(gpus)))
        elif op == "elementwise":
            for (kind,), sub in _groups(obs.loc[idx], ["kind"]):
                put(sub, pricer.elementwise_s(col(sub, "nbytes"), str(kind)))
    return out


def _attention(rows: pd.DataFrame, pricer: KernelPricer, op: str, backend, kv_dtype):
    backend = backend if isinstance(backend, str) else "FLASH_ATTN_FA2"
    kv_dtype = kv_dtype if isinstance(kv_dtype, str) else "bf16"
    shape = AttentionShape(
        *(rows[k].to_numpy(dtype=np.float64) for k in ("heads", "kv_heads", "head_dim")),
        window=rows["window"].fillna(0).to_numpy(dtype=np.float64),
        kv_dtype=kv_dtype,
        backend=backend,
    )
    floor_p = pricer.attention_floor_s("attention_prefill", shape)
    floor_d = pricer.attention_floor_s("attention_decode", shape)
    if op == "attention_prefill":
        batch = rows["batch"].to_numpy(dtype=np.float64)
        return floor_p + batch * pricer.prefill_s(rows["q"], rows["ctx"], batch, shape)
    if op == "attention_decode":
        batch = rows["batch"].to_numpy(dtype=np.float64)
        return floor_d + batch * pricer.decode_s(rows["ctx"], batch, shape)
    # a mixed batch: one kernel over the prefill chunk and the decodes, one launch floor
    p, c = rows["prefill_chunk"].to_numpy(float), rows["kv_prefill"].to_numpy(float)
    n, kv = rows["n_decode"].to_numpy(float), rows["kv_decode"].to_numpy(float)
    pre = np.where(p > 0, pricer.prefill_s(np.maximum(p, 1), c, 1.0, shape), 0.0)
    both = (p > 0) & (n > 0)
    alone = n * pricer.decode_s(kv, np.maximum(n, 1), shape)
    beside = n * pricer.decode_s(kv, np.maximum(n, 1), shape, mixed=True)
    dec = np.where(both, beside, np.where(n > 0, alone, 0.0))
    floor = np.maximum(np.where(p > 0, floor_p, 0.0), np.where(n > 0, floor_d, 0.0))
    return floor + pre + dec


def layer_rows(obs: pd.DataFrame, pred: np.ndarray) -> pd.DataFrame:
    """Whole-layer rows of a layer profile: each mixed attention row plus every dense operator
    measured (interpolated) and predicted at that batch's token count."""
    mixed = obs["op"] == "attention_mixed"
    dense = obs["tokens"].notna() & obs["op"].isin(["gemm", "elementwise"])
    if not mixed.any() or not dense.any():
        return pd.DataFrame()
    rows = obs[mixed]
    tokens = (rows["prefill_chunk"] + rows["n_decode"]).to_numpy(float)
    measured = rows["latency_s"].to_numpy(float).copy()
    predicted = pred[mixed.to_numpy()].copy()
    for _, group in obs[dense].groupby("label"):
        group = group.sort_values("tokens")
        t = group["tokens"].to_numpy(float)
        measured += np.interp(tokens, t, group["latency_s"].to_numpy(float))
        predicted += np.interp(tokens, t, pred[obs.index.get_indexer(group.index)])
    return pd.DataFrame(
        {
            "op": "layer",
            "label": "layer",
            "tokens": tokens,
            "latency_s": measured,
            "pred_s": predicted,
        }
    )


def mape_pct(pred: np.ndarray, meas: np.ndarray) -> float:
    ok = np.isfinite(pred) & (meas > 0)
    return (
        float(np.mean(np.abs(pred[ok] - meas[ok]) / meas[ok]) * 100) if ok.any() else float("nan")
    )


def score(obs: pd.DataFrame, pred: np.ndarray) -> dict:
    """kernel_check's figures: overall and per-operator MAPE over the priced rows."""
    frame = obs.assign(pred_s=pred)
    layers = layer_rows(obs, pred)
    priced = frame[np.isfinite(frame["pred_s"])]
    per_op = {
        op: mape_pct(g["pred_s"].to_numpy(), g["latency_s"].to_numpy())
        for op, g in priced.groupby("op")
    }
    per_label = {
        f"{op}/{label}": mape_pct(g["pred_s"].to_numpy(), g["latency_s"].to_numpy())
        for (op, label), g in priced.groupby(["op", "label"])
        if label != op
    }
    if len(layers):
        per_op["layer"] = mape_pct(layers["pred_s"].to_numpy(), layers["latency_s"].to_numpy())
    return {
        "overall_mape_pct": mape_pct(priced["pred_s"].to_numpy(), priced["latency_s"].to_numpy()),
        "per_op": per_op,
        "per_operator": per_label,
        "num_rows": len(priced),
        "num_rows_not_modelled": int(len(frame) - len(priced)),
    }


def price_table(timings, hardware: str, cost_profile: str, family: str | None):
    """Every row of the table `timings` priced on `hardware`: (the summary, the rows, their
    predicted seconds)."""
    hw = load_hardware(hardware)
    obs = read_tables(timings).reset_index(drop=True)
    prior = CostProfile.load("prior")
    pred = np.full(len(obs), np.nan)
    choices = {}
    for table_family, idx in obs.groupby("family").groups.items():
        wanted = family or table_family
        try:
            choice = choose_pricer(hw, cost_profile, prior, family=wanted)
        except UserError:  # the profile has no such family: its default prices the table
            choice = choose_pricer(hw, cost_profile, prior)
        pred[obs.index.get_indexer(idx)] = predict(obs.loc[idx], choice.pricer)
        choices[table_family] = choice
    first = next(iter(choices.values()))
    result = {
        "timings": str(timings),
        "hardware": hw.name,
        "table_gpus": sorted(str(g) for g in obs["gpu"].unique()),
        "cost_profile": first.profile,
        "kernel_family": ", ".join(f"{k} -> {v.family}" for k, v in choices.items()),
        "source": "; ".join(sorted({v.source for v in choices.values()})),
        "priced_with": {k: v for c in choices.values() for k, v in c.pricer.used.items()},
        "kernel_check": score(obs, pred),
    }
    return result, obs, pred
