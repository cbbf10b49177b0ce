"""Measured rows faster than the GPU's peaks allow: data errors, named by table and row.

A kernel cannot beat its roofline (its FLOPs at the datasheet's tensor-core peak, its bytes at
the HBM peak). A measured row that does was measured on something else than what a forward pass
runs: most often a microbenchmark that calls one GEMM again and again on weights small enough
to stay in L2 (50 MB on an H100), which the layers of a model, each with its own weights,
cannot. Such rows are left out of the fit and listed in the fit report; the pricer never prices
under the roofline either way (sim/cost/kernels.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.calibrate.fitting import FEATURES, key_of, roofline
from sim.specs.hardware import Hardware

ROUNDING = 0.01  # the tables' latencies carry 3-4 significant digits: a 1% shortfall is rounding


def faster_than_peaks(hw: Hardware, obs: pd.DataFrame) -> pd.Series:
    """Measured time over the roofline for each kernel row (NaN where no roofline applies:
    collectives, mixed batches); a data error is a ratio under 1 - ROUNDING."""
    ratio = pd.Series(np.nan, index=obs.index)
    for op in FEATURES:
        rows = obs[obs["op"] == op]
        if not len(rows):
            continue
        for key, group in rows.groupby(key_of(op, rows)):
            _, roof = roofline(hw, op, group, key)
            ratio[group.index] = group["latency_s"].to_numpy(np.float64) / roof
    return ratio


def data_errors(hw: Hardware, obs: pd.DataFrame) -> pd.DataFrame:
    """The rows measured faster than the peaks allow, with their ratio (measured / least)."""
    ratio = faster_than_peaks(hw, obs)
    bad = ratio < 1 - ROUNDING
    return obs[bad].assign(measured_over_least=ratio[bad])


def summarise(errors: pd.DataFrame, data_root) -> list[dict]:
    """Per table: how many rows were left out, and the worst one (its row and shape)."""
    out = []
    for source, rows in errors.groupby("source", sort=True):
        worst = rows.loc[rows["measured_over_least"].idxmin()]
        what = worst.get("dtype") if pd.notna(worst.get("dtype")) else worst.get("kv_dtype")
        shape = ", ".join(
            f"{c}={worst[c]:g}"
            for c in (
                "m",
                "n",
                "k",
                "tokens",
                "hidden",
                "inter",
                "topk",
                "experts",
                "q",
                "ctx",
                "batch",
                "heads",
                "kv_heads",
                "head_dim",
                "window",
                "nbytes",
            )
            if c in rows.columns and pd.notna(worst.get(c))
        ) + (f" ({what})" if isinstance(what, str) else "")
        out.append({
            "table": _relative(str(source), data_root),
            "op": str(worst["op"]),
            "rows": len(rows),
            "worst_row": None if pd.isna(worst.get("row")) else int(worst["row"]),
            "worst_shape": shape,
            "worst_ratio": float(worst["measured_over_least"]),
        })  # fmt: skip
    return out


def _relative(source: str, root) -> str:
    root = str(root).rstrip("/") + "/"
    return source.removeprefix(root)
