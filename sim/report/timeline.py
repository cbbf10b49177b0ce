"""What each request was doing when, drawn: the timeline figure and the Perfetto / Chrome
trace, from the phases a traced run recorded (sim/run/phases.py) and its steps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from sim.report.figures import PNG_META, plt
from sim.run.outputs import atomic_write
from sim.run.phases import PHASES

COLOURS = {
    "queued": "#c8c8c8",
    "prefill": "#1f77b4",
    "decode": "#2ca02c",
    "preempted": "#d62728",
    "held": "#ffbf70",
}
GANTT_MAX = 100  # requests drawn one row each; more are left out of the strip (and said)


# ---- the figure --------------------------------------------------------------------------------
def plot_timeline(runs: list[tuple[str, pd.DataFrame, pd.DataFrame, int]], path: Path) -> list:
    """timeline.png and timeline.svg: one column per run (label, steps, phases, KV blocks):
    per step the prefill and decode tokens (stacked), batch size, KV blocks in use and the
    waiting queue, and below, one row per request (up to GANTT_MAX) coloured by phase."""
    cols = len(runs)
    n_req = max((p["request_id"].nunique() for _, _, p, _ in runs), default=0)
    gantt_h = min(max(n_req, 10), GANTT_MAX) * 0.055 + 1.0
    fig, axes = plt.subplots(
        5, cols, figsize=(7.2 * cols, 7.2 + gantt_h), squeeze=False, sharex="col",
        gridspec_kw={"height_ratios": [1.3, 0.8, 0.8, 0.8, gantt_h]},
    )  # fmt: skip
    horizon = max((_end(s, p) for _, s, p, _ in runs), default=1.0)
    for c, (label, steps, phases, num_blocks) in enumerate(runs):
        ax = axes[:, c]
        t = steps["start_s"].to_numpy()
        edges = np.append(t, t[-1] + steps["duration_s"].iloc[-1]) if len(t) else t
        pre = steps["prefill_tokens"].to_numpy()
        both = pre + steps["decode_tokens"].to_numpy()
        # each step a flat stretch over its own duration: one polygon per kind, not a bar each
        ax[0].stairs(pre, edges, fill=True, color=COLOURS["prefill"], label="prefill")
        ax[0].stairs(both, edges, baseline=pre, fill=True, color=COLOURS["decode"],
                     label="decode")  # fmt: skip
        ax[0].set_ylabel("tokens / step")
        ax[0].set_title(label, fontsize=10)
        ax[0].legend(fontsize=7, loc="upper right")
        for a, col, name in (
            (ax[1], "batch_size", "batch size"),
            (ax[2], "kv_blocks_used", "KV blocks used"),
            (ax[3], "num_waiting", "waiting"),
        ):
            a.stairs(steps[col].to_numpy(), edges, color="C7", lw=0.9)
            a.set_ylabel(name)
            a.grid(alpha=0.3)
        ax[2].axhline(num_blocks, color="red", lw=0.8, ls=":")
        _gantt(ax[4], phases)
        ax[4].set_xlabel("time (s)")
        ax[4].set_xlim(0, horizon * 1.01)
    for r in range(4):  # the same scale in every column, to compare at a glance
        top = max(axes[r, c].get_ylim()[1] for c in range(cols))
        for c in range(cols):
            axes[r, c].set_ylim(0, top)
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLOURS[p]) for p in PHASES]
    fig.legend(handles, PHASES, loc="lower center", ncol=len(PHASES), fontsize=8)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.set_layout_engine(None)  # the same bytes without a second draw per file (save_png)
    out = []
    for suffix, fmt in (("png", "png"), ("svg", "svg")):
        target = path.with_suffix(f".{suffix}")
        meta = PNG_META if fmt == "png" else {"Date": None, "Creator": None}
        # svg: fixed ids and no date, so the same run gives the same bytes
        with plt.rc_context({"svg.hashsalt": "sim", "svg.fonttype": "none"}):
            atomic_write(target, lambda tmp, f=fmt, m=meta: fig.savefig(tmp, format=f, dpi=100,
                                                                       metadata=m))  # fmt: skip
        out.append(target.name)
    plt.close(fig)
    return out


def _end(steps: pd.DataFrame, phases: pd.DataFrame) -> float:
    ends = [float((steps["start_s"] + steps["duration_s"]).max()) if len(steps) else 0.0]
    if len(phases):
        ends.append(float(phases["end_s"].max()))
    return max(ends)


def _gantt(ax, phases: pd.DataFrame) -> None:
    ids = sorted(phases["request_id"].unique())
    shown = ids[:GANTT_MAX]
    row = {rid: k for k, rid in enumerate(shown)}
    part = phases[phases["request_id"].isin(shown)]
    for phase in PHASES:
        p = part[part["phase"] == phase]
        if len(p):
            ax.barh([row[r] for r in p["request_id"]], (p["end_s"] - p["start_s"]).to_numpy(),
                    left=p["start_s"].to_numpy(), height=0.8, color=COLOURS[phase],
                    linewidth=0)  # fmt: skip
    ax.set_ylim(len(shown) - 0.5, -0.5)
    ax.set_ylabel("request (by arrival)" if len(shown) == len(ids) else
                  f"first {len(shown)} of {len(ids)} requests")  # fmt: skip
    ax.set_yticks([])


# ---- Perfetto / Chrome trace ----------------------------------------------------------------
REQUESTS_PID = 1_000_000  # the process holding one track per request


def trace_events(
    steps: pd.DataFrame, phases: pd.DataFrame, label: str = "", pid_base: int = 0
) -> list[dict]:
    """Chrome Trace Event Format events (microseconds): per replica a process with a "steps"
    track (one complete slice per step, its batch in args) and counters (KV blocks in use,
    waiting requests); a "requests" process with one track per request and its phases.
    `label` and `pid_base` keep several runs apart in one trace."""
    us = 1e6
    ev: list[dict] = []
    prefix = f"{label}: " if label else ""
    req_pid = REQUESTS_PID + pid_base
    for rep in sorted(steps["replica"].unique()) if len(steps) else []:
        pid = pid_base + int(rep) + 1
        ev.append(_meta("process_name", pid, 0, f"{prefix}replica {rep}"))
        ev.append(_meta("thread_name", pid, 1, "steps"))
        part = steps[steps["replica"] == rep]
        for r in part.itertuples(index=False):
            ts = round(r.start_s * us, 3)
            ev.append({
                "name": _step_name(r.prefill_tokens, r.decode_tokens), "cat": "step", "ph": "X",
                "ts": ts, "dur": round(r.duration_s * us, 3), "pid": pid, "tid": 1,
                "args": {
                    "batch_size": int(r.batch_size), "prefill_tokens": int(r.prefill_tokens),
                    "decode_tokens": int(r.decode_tokens), "preempted": int(r.num_preempted),
                    "gpu_ms": round(r.gpu_s * 1e3, 4), "cpu_ms": round(r.cpu_s * 1e3, 4),
                },
            })  # fmt: skip
            end = round((r.start_s + r.duration_s) * us, 3)
            kv = {"blocks": int(r.kv_blocks_used)}
            queue = {"waiting": int(r.num_waiting), "running": int(r.num_running)}
            ev.append(_counter("KV blocks in use", end, pid, kv))
            ev.append(_counter("queue", end, pid, queue))
    if len(phases):
        ev.append(_meta("process_name", req_pid, 0, f"{prefix}requests"))
        for rid in sorted(phases["request_id"].unique()):
            ev.append(_meta("thread_name", req_pid, int(rid) + 1, f"request {rid}"))
        for r in phases.itertuples(index=False):
            ev.append({
                "name": r.phase, "cat": "request", "ph": "X",
                "ts": round(r.start_s * us, 3), "dur": round((r.end_s - r.start_s) * us, 3),
                "pid": req_pid, "tid": int(r.request_id) + 1,
                "args": {"request_id": int(r.request_id), "replica": int(r.replica),
                         "tokens": int(r.tokens)},
            })  # fmt: skip
    return ev


def _step_name(prefill: int, decode: int) -> str:
    if prefill and decode:
        return "mixed step"
    return "prefill step" if prefill else "decode step"


def _counter(name: str, ts: float, pid: int, values: dict) -> dict:
    return {"name": name, "ph": "C", "ts": ts, "pid": pid, "tid": 1, "args": values}


def _meta(name: str, pid: int, tid: int, value: str) -> dict:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {"name": value}}


def write_trace(path: Path, events: list[dict], about: dict | None = None) -> Path:
    doc = {"traceEvents": events, "displayTimeUnit": "ms", "otherData": about or {}}
    return atomic_write(path, lambda tmp: tmp.write_text(json.dumps(doc, separators=(",", ":"))))
