"""The three figures of a single run's report (report.md, sim/report/run_report.py): drawn
here, or by sim.report.plot_workers in another process while the run writes its other files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sim.report.figures import plt, save_png
from sim.run.overview import StepOverview

CDF_POINTS = 20_000  # a longer run's CDF is drawn through this many of its points


def plot_latency_cdfs(requests: pd.DataFrame, path: Path) -> str:
    done = requests.loc[requests["status"] == "finished", ["ttft_s", "tpot_s", "e2el_s"]]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.16, top=0.86, wspace=0.28)
    for ax, (col, label) in zip(
        axes, [("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2el_s", "E2E latency")], strict=True
    ):
        ms = np.sort(done[col].dropna().to_numpy() * 1e3)
        if len(ms):
            shown = np.unique(np.linspace(0, len(ms) - 1, min(len(ms), CDF_POINTS)).astype(int))
            ax.plot(ms[shown], (shown + 1) / len(ms), color="C0")  # every point up to 20,000
            for p, style in ((50, ":"), (99, "--")):
                ax.axvline(np.percentile(ms, p), color="grey", ls=style, lw=1, label=f"p{p}")
        ax.set_xlabel(f"{label} (ms)")
        ax.set_ylim(0, 1.01)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("fraction of requests")
    axes[0].legend(loc="lower right")
    fig.suptitle("Latency distributions (finished requests)")
    return save_png(fig, path)


def plot_throughput_kv(view: StepOverview, num_blocks: int, path: Path) -> str:
    edges = view.edges
    width = edges[1] - edges[0]
    mids = (edges[:-1] + edges[1:]) / 2
    steps = view.sample
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.1, top=0.92, hspace=0.12)
    ax1.plot(mids, view.decode_tokens / width, label="decode (output) tokens/s")
    ax1.plot(mids, view.prefill_tokens / width, label="prefill tokens/s", alpha=0.7)
    ax1.set_ylabel("tokens / s")
    ax1.legend(loc="upper right")
    ax1.grid(alpha=0.3)
    ax2.step(
        steps["start_s"],
        steps["kv_blocks_used"] / max(num_blocks - 1, 1) * 100,
        where="post",
        lw=0.8,
    )
    ax2.set_ylabel("KV blocks in use (%)" + _every(view))
    ax2.set_xlabel("simulated time (s)")
    ax2.set_ylim(0, 100)
    ax2.grid(alpha=0.3)
    fig.suptitle("Throughput and KV-cache usage over time")
    return save_png(fig, path)


def _every(view: StepOverview) -> str:
    return "" if view.every == 1 else f"\n(every {view.every}th step)"


def plot_batch_composition(view: StepOverview, budget: int, path: Path) -> str:
    """Per step: requests by phase, tokens by phase (log scale), and the waiting queue."""
    steps = view.sample
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(11, 7), sharex=True)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.08, top=0.94, hspace=0.12)
    t = steps["start_s"].to_numpy()
    decode = steps["decode_tokens"].to_numpy()  # one token per decoding request
    prefill_reqs = steps["batch_size"].to_numpy() - decode
    ax1.fill_between(t, 0, decode, step="post", label="decoding", alpha=0.8)
    ax1.fill_between(t, decode, decode + prefill_reqs, step="post", label="prefilling", alpha=0.7)
    ax1.set_ylabel("requests in step")
    ax1.legend(loc="upper right")
    ax2.step(
        t,
        np.maximum(steps["prefill_tokens"], 0.8),
        where="post",
        lw=0.8,
        label="prefill tokens",
        color="C1",
    )
    ax2.step(t, np.maximum(decode, 0.8), where="post", lw=0.8, label="decode tokens", color="C0")
    ax2.axhline(budget, color="grey", ls="--", lw=1, label="token budget")
    ax2.set_yscale("log")
    ax2.set_ylim(bottom=0.8)
    ax2.set_ylabel("tokens in step")
    ax2.legend(loc="upper right")
    ax3.step(t, steps["num_waiting"], where="post", lw=0.8, color="C3")
    ax3.set_ylabel("waiting requests")
    ax3.set_xlabel("simulated time (s)")
    for ax in (ax1, ax2, ax3):
        ax.grid(alpha=0.3)
    fig.suptitle("Batch composition per step" + _every(view).replace("\n", " "))
    return save_png(fig, path)
