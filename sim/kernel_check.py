"""`scenario=kernel_check`: the cost model's kernel prices against a measured table.

Any table sim.kernel_tables reads works, for whatever models it holds: every row is priced by
the same KernelPricer the simulator's step costs use, from the shape in the row's own columns.
Layer profiles also get a whole-layer check: for each mixed prefill+decode attention row, the
measured layer (attention + every dense operator at the batch's token count) against the
predicted one.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd

from sim.kernels import AttentionShape, KernelPricer

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from sim.html_report import write_report
from sim.outputs import atomic_write, write_json

PNG_META = {"Software": None}


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


def plot(obs: pd.DataFrame, pred: np.ndarray, path: Path) -> str:
    cols = ["op", "latency_s", "pred_s"]
    layers = layer_rows(obs, pred)
    frame = obs.assign(pred_s=pred)[cols]
    if len(layers):
        frame = pd.concat([frame, layers[cols]], ignore_index=True)
    frame = frame[np.isfinite(frame["pred_s"])]
    ops = sorted(frame["op"].unique())
    cols = min(3, max(len(ops), 1))
    rows = -(-len(ops) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 4 * rows), squeeze=False)
    for ax, op in zip(axes.ravel(), ops, strict=False):
        g = frame[frame["op"] == op]
        meas, est = g["latency_s"].to_numpy() * 1e6, g["pred_s"].to_numpy() * 1e6
        ax.loglog(meas, est, ".", ms=2, alpha=0.4)
        lo, hi = min(meas.min(), est.min()), max(meas.max(), est.max())
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set_title(f"{op}: MAPE {mape_pct(est, meas):.1f}% ({len(g)} rows)", fontsize=9)
        ax.set_xlabel("measured (us)")
        ax.set_ylabel("predicted (us)")
        ax.grid(alpha=0.3, which="both")
    for ax in axes.ravel()[len(ops) :]:
        ax.axis("off")
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=100, metadata=PNG_META))
    plt.close(fig)
    return path.name


def write_outputs(result: dict, obs: pd.DataFrame, pred: np.ndarray, out_dir: Path) -> None:
    image = plot(obs, pred, out_dir / "kernel_check.png")
    write_json(out_dir / "summary.json", result)
    kc = result["kernel_check"]
    lines = [f"| {op} | {v:.2f} |" for op, v in kc["per_op"].items()]
    detail = [f"| {op} | {v:.2f} |" for op, v in kc["per_operator"].items()]
    text = f"""# Kernel check

Table: `{result["timings"]}` ({kc["num_rows"]} rows priced, {kc["num_rows_not_modelled"]} of
kernel classes the cost model does not price). GPU `{result["hardware"]}`; cost profile
`{result["cost_profile"]}` (kernel family `{result["kernel_family"]}`: {result["source"]}).

Overall MAPE: **{kc["overall_mape_pct"]:.2f}%**

| kernel class | MAPE (%) |
|---|---|
{chr(10).join(lines)}

| operator | MAPE (%) |
|---|---|
{chr(10).join(detail)}

![predicted vs measured]({image})

Priced with: {", ".join(f"{k} <- {v}" for k, v in result["priced_with"].items())}.
"""
    write_report(out_dir, text)


def run_kernel_check(cfg, out_dir: Path) -> dict:
    """The kernel_check task: price every row of cfg.kernel_check.timings on cfg.hardware."""
    from sim.cost_profile import CostProfile
    from sim.errors import UserError
    from sim.gpu_profile import choose_pricer
    from sim.hardware import load_hardware
    from sim.kernel_tables import read_tables

    kc = cfg.kernel_check
    if kc.timings is None:
        raise UserError(
            "scenario=kernel_check needs kernel_check.timings=PATH (a kernel table, "
            "a per-layer CSV, a layer-profile folder, or a folder of them)"
        )
    hw = load_hardware(cfg.hardware)
    obs = read_tables(kc.timings).reset_index(drop=True)
    prior = CostProfile.load("prior")
    pred = np.full(len(obs), np.nan)
    choices = {}
    for family, idx in obs.groupby("family").groups.items():
        wanted = kc.family or family
        try:
            choice = choose_pricer(hw, cfg.cost_profile, prior, family=wanted)
        except UserError:  # the profile has no such family: its default prices the table
            choice = choose_pricer(hw, cfg.cost_profile, prior)
        pred[obs.index.get_indexer(idx)] = predict(obs.loc[idx], choice.pricer)
        choices[family] = choice
    first = next(iter(choices.values()))
    result = {
        "timings": str(kc.timings),
        "hardware": hw.name,
        "table_gpus": sorted(str(g) for g in obs["gpu"].unique()),
        "cost_profile": first.profile,
        "kernel_family": ", ".join(f"{k} -> {v.family}" for k, v in choices.items()),
        "source": "; ".join(sorted({v.source for v in choices.values()})),
        "priced_with": {k: v for c in choices.values() for k, v in c.pricer.used.items()},
        "kernel_check": score(obs, pred),
    }
    write_outputs(result, obs, pred, out_dir)
    return result
