"""scenario=kernel_check: the cost model's kernel prices against a measured table
(sim/calibrate/check.py prices it): summary.json, report.md and kernel_check.png."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sim.calibrate.check import layer_rows, mape_pct, price_table
from sim.config import SimConfig
from sim.errors import UserError
from sim.report.console import ProgressBar, outputs_line
from sim.report.escape import md_code, md_row, md_text
from sim.report.figures import plt, save_png
from sim.report.html import write_report
from sim.run.outputs import write_json


@dataclass(frozen=True)
class KernelCheckResult:
    summary: dict  # timings, hardware, cost_profile, kernel_family, ..., kernel_check: scores
    rows: pd.DataFrame  # the table's observations
    predicted_s: np.ndarray  # each row's price (NaN: a kernel class not modelled)


class KernelCheck:
    counts = "tables"

    def check(self, cfg: SimConfig) -> None:
        if cfg.kernel_check.timings is None:
            raise UserError(
                "scenario=kernel_check needs kernel_check.timings=PATH (a kernel table, "
                "a per-layer CSV, a layer-profile folder, or a folder of them)"
            )

    def run(self, cfg: SimConfig, out_dir: Path, bar: ProgressBar) -> KernelCheckResult:
        self.check(cfg)
        kc = cfg.kernel_check
        return KernelCheckResult(
            *price_table(kc.timings, cfg.hardware, cfg.cost_profile, kc.family)
        )

    def write(self, result: KernelCheckResult, out_dir: Path) -> None:
        write_outputs(result.summary, result.rows, result.predicted_s, out_dir)

    def brief(self, result: KernelCheckResult, out_dir: Path, sweeping: bool) -> None:
        r = result.summary
        kc = r["kernel_check"]
        print(
            f"kernel_check: {kc['num_rows']} rows of {r['timings']} on {r['hardware']} "
            f"({r['cost_profile']}): overall MAPE {kc['overall_mape_pct']:.2f}%"
        )
        for op, mape in kc["per_op"].items():
            print(f"  {op:<20} {mape:6.2f}%")
        if r["hardware"] not in r["table_gpus"]:
            print(f"  note: the table was measured on {', '.join(r['table_gpus'])}")
        print(outputs_line(out_dir))


def run_kernel_check(cfg: SimConfig, out_dir: Path) -> dict:
    """Price cfg.kernel_check.timings on cfg.hardware and write the outputs (tests, scripts)."""
    scenario = KernelCheck()
    result = scenario.run(cfg, out_dir, ProgressBar(False))
    scenario.write(result, out_dir)
    return result.summary


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
    return save_png(fig, path, dpi=100)


def write_outputs(result: dict, obs: pd.DataFrame, pred: np.ndarray, out_dir: Path) -> None:
    image = plot(obs, pred, out_dir / "kernel_check.png")
    write_json(out_dir / "summary.json", result)
    kc = result["kernel_check"]
    # the table, its operators' names and the GPU are a user's files and what they hold
    lines = [md_row((op, f"{v:.2f}")) for op, v in kc["per_op"].items()]
    detail = [md_row((op, f"{v:.2f}")) for op, v in kc["per_operator"].items()]
    table, gpu, profile = (md_code(result[k]) for k in ("timings", "hardware", "cost_profile"))
    family, source = md_code(result["kernel_family"]), md_text(result["source"])
    priced = md_text(", ".join(f"{k} <- {v}" for k, v in result["priced_with"].items()))
    text = f"""# Kernel check

Table: {table} ({kc["num_rows"]} rows priced, {kc["num_rows_not_modelled"]} of
kernel classes the cost model does not price). GPU {gpu}; cost profile
{profile} (kernel family {family}: {source}).

Overall MAPE: **{kc["overall_mape_pct"]:.2f}%**

| kernel class | MAPE (%) |
|---|---|
{chr(10).join(lines)}

| operator | MAPE (%) |
|---|---|
{chr(10).join(detail)}

![predicted vs measured]({image})

Priced with: {priced}.
"""
    write_report(out_dir, text)
