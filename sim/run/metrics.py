"""Recording a run and summarising it with `vllm bench serve`'s field names and definitions.

During the run: flat growable arrays, one row per step (StepLog). After it: DataFrames and the
summary. Definitions follow vllm bench serve: TTFT from send to first token; TPOT =
(E2EL - TTFT) / (output tokens - 1) over requests with more than one output token; ITL every gap
between consecutive tokens, pooled over requests; duration from the first send to the last
finish; percentiles by numpy's linear interpolation; std with ddof=0.
"""

from __future__ import annotations

from array import array

import numpy as np
import pandas as pd

from sim.schedulers.base import StepPlan
from sim.workload.records import STATUSES, RequestRecords, weighted_stats
from sim.workload.request import Status

PERCENTILES = (50, 90, 99)
STEP_CHUNK_ROWS = 1 << 16  # steps per row group when a run streams its steps
STEP_COLUMNS = {
    "replica": "q",
    "start_s": "d",
    "duration_s": "d",
    "gpu_s": "d",
    "cpu_s": "d",
    "prefill_tokens": "q",
    "decode_tokens": "q",
    "batch_size": "q",
    "kv_blocks_used": "q",
    "num_running": "q",
    "num_waiting": "q",
    "num_preempted": "q",
}


class StepLog:
    """One row per engine step, in columns of typed arrays (cheap to append).

    With a `sink` (sim.run.outputs.ParquetChunks) every `chunk_rows` rows are written out as a
    row group and dropped, keeping only the running totals the summary needs: a run of any
    length then holds at most one chunk of steps in memory."""

    def __init__(self, sink=None, chunk_rows: int | None = None):
        self.columns = {name: array(code) for name, code in STEP_COLUMNS.items()}
        self.sink = sink
        self.chunk_rows = chunk_rows or STEP_CHUNK_ROWS
        self.flushed: list[dict] = []  # step_totals() of each chunk written out
        self.audit = None  # a PhysicsAudit (sim/run/audit.py) that checks each chunk written

    def __len__(self) -> int:
        return len(self.columns["start_s"]) + sum(t["steps"] for t in self.flushed)

    def record(
        self, replica, start_s, duration_s, cost, plan: StepPlan, kv_blocks_used, running, waiting
    ):
        c = self.columns
        c["replica"].append(replica)
        c["start_s"].append(start_s)
        c["duration_s"].append(duration_s)
        c["gpu_s"].append(cost.gpu_s)
        c["cpu_s"].append(cost.cpu_s)
        c["prefill_tokens"].append(plan.num_prefill_tokens)
        c["decode_tokens"].append(plan.num_decode_tokens)
        c["batch_size"].append(plan.batch_size)
        c["kv_blocks_used"].append(kv_blocks_used)
        c["num_running"].append(running)
        c["num_waiting"].append(waiting)
        c["num_preempted"].append(plan.num_preempted)
        if self.sink is not None and len(c["start_s"]) >= self.chunk_rows:
            self.flush()

    def record_run(self, replica, start_s, duration_s, rows: dict) -> None:
        """Rows for a fast-forwarded run of steps: start and duration arrays, and per step
        the arrays or lists in `rows` (gpu_s, cpu_s, prefill_tokens, decode_tokens, batch_size,
        kv_used, num_running and num_waiting: the KV blocks in use and the requests running
        and waiting after the step)."""
        n = len(start_s)
        c = self.columns
        c["replica"].extend(array("q", [replica]) * n)
        c["start_s"].extend(start_s)
        c["duration_s"].extend(duration_s)
        for name in ("gpu_s", "cpu_s", "prefill_tokens", "decode_tokens", "batch_size"):
            c[name].extend(rows[name])  # (arrays of the same type: copied whole)
        c["kv_blocks_used"].extend(rows["kv_used"])
        c["num_running"].extend(rows["num_running"])
        c["num_waiting"].extend(rows["num_waiting"])
        c["num_preempted"].extend(array("q", [0]) * n)
        if self.sink is not None and len(c["start_s"]) >= self.chunk_rows:
            self.flush()

    def frame(self) -> pd.DataFrame:
        """The steps held in memory (every step when nothing was streamed out): each column
        copied out of its array once, and not consolidated with the others (pandas would copy
        them all again into one block per type)."""
        return pd.DataFrame(
            {
                name: np.frombuffer(col, dtype=col.typecode).copy()
                for name, col in self.columns.items()
            },
            copy=False,
        )

    def flush(self) -> None:
        """Write the steps held to the sink and drop them, keeping their totals."""
        chunk = self.frame()
        self.flushed.append(step_totals(chunk))
        if self.audit is not None:
            self.audit.check_steps(chunk)
        self.sink.write(chunk)
        self.columns = {name: array(code) for name, code in STEP_COLUMNS.items()}

    def close(self) -> None:
        """Streamed: write what is left and finish the file."""
        if len(self.columns["start_s"]):
            self.flush()
        self.sink.close(self.frame())

    def figures(self, num_blocks: int) -> dict:
        """Simulator-side figures of every step: count, preemptions, KV usage, batch size."""
        parts = [*self.flushed, step_totals(self.frame())]
        total = {k: sum(p[k] for p in parts) for k in ("steps", "preemptions", "batch_sum")}
        usable = max(num_blocks - 1, 1)
        weights = sum(p["duration_sum"] for p in parts)
        n = total["steps"]
        return {
            "steps": n,
            "preemptions": total["preemptions"],
            "kv_usage_peak": max(p["kv_peak"] for p in parts) / usable,
            "kv_usage_mean": (
                sum(p["kv_weighted"] for p in parts) / usable / weights if weights > 0 else 0.0
            ),
            "mean_batch_size": total["batch_sum"] / n if n else 0.0,
            "sim_time_s": max(p["end_max"] for p in parts),
        }


def step_totals(steps: pd.DataFrame) -> dict:
    """Sums and maxima of a block of steps, from which StepLog.figures combines a whole run."""
    if not len(steps):
        return dict.fromkeys(
            ("steps", "preemptions", "batch_sum", "kv_peak", "kv_weighted", "duration_sum",
             "end_max"), 0
        )  # fmt: skip
    used = steps["kv_blocks_used"].to_numpy()
    weights = steps["duration_s"].to_numpy()
    return {
        "steps": len(steps),
        "preemptions": int(steps["num_preempted"].sum()),
        "batch_sum": float(steps["batch_size"].sum()),
        "kv_peak": int(used.max()),
        "kv_weighted": float(np.multiply(used, weights).sum()),
        "duration_sum": float(weights.sum()),
        "end_max": float((steps["start_s"] + steps["duration_s"]).max()),
    }


def requests_frame(records: RequestRecords, priority: np.ndarray | None = None) -> pd.DataFrame:
    """One row per request of the workload, from the run's records."""
    n = len(records)
    statuses = np.array([s.value for s in STATUSES], dtype=object)
    df = pd.DataFrame(
        {
            "request_id": np.arange(n, dtype=np.int64),
            "replica": records.replica,
            "status": statuses[records.status],
            "arrival_s": records.arrival_s,
            "first_scheduled_s": records.first_scheduled_s,
            "first_token_s": records.first_token_s,
            "finish_s": records.finish_s,
            "prompt_tokens": np.asarray(records.prompt_len, dtype=np.int64),
            "output_tokens": records.output_tokens,
            "max_output_tokens": np.asarray(records.max_output_len, dtype=np.int64),
            "cached_tokens": records.cached_tokens,
            "num_preemptions": records.num_preemptions,
        }
    )
    with_latencies(df)
    df["priority"] = np.zeros(n, dtype=np.int64) if priority is None else priority
    reasons = np.full(n, "", dtype=object)
    for i, why in records.reject_reason.items():
        reasons[i] = why
    df["reject_reason"] = reasons
    return df


def with_latencies(df: pd.DataFrame) -> pd.DataFrame:
    """Sets a requests frame's ttft_s, e2el_s and tpot_s from its arrival, first-token and
    finish times (in place; returns it)."""
    df["ttft_s"] = df["first_token_s"] - df["arrival_s"]
    df["e2el_s"] = df["finish_s"] - df["arrival_s"]
    decode_tokens = (df["output_tokens"] - 1).where(df["output_tokens"] > 1)
    df["tpot_s"] = (df["e2el_s"] - df["ttft_s"]) / decode_tokens
    return df


def _stats(name: str, values_s: np.ndarray) -> dict:
    ms = np.asarray(values_s, dtype=np.float64) * 1e3
    if len(ms) == 0:
        ms = np.zeros(1)  # vllm bench reports 0 when no sample exists
    out = {
        f"mean_{name}_ms": float(np.mean(ms)),
        f"median_{name}_ms": float(np.median(ms)),
        f"std_{name}_ms": float(np.std(ms)),
    }
    for p in PERCENTILES:
        out[f"p{p}_{name}_ms"] = float(np.percentile(ms, p))
    return out


def tokens_in_window(requests: pd.DataFrame, a: float, b: float) -> tuple[float, float, int]:
    """(output tokens, prompt tokens, completions) falling in [a, b]: a request's first token
    at its first-token time, the rest evenly up to its finish; its prompt when its first token
    comes; a completion at its finish."""
    first = requests["first_token_s"].to_numpy(dtype=np.float64)
    last = requests["finish_s"].to_numpy(dtype=np.float64)
    n_out = requests["output_tokens"].to_numpy(dtype=np.float64)
    ok = np.isfinite(first) & np.isfinite(last)
    first, last, n_out = first[ok], last[ok], n_out[ok]
    prompts = requests["prompt_tokens"].to_numpy(dtype=np.float64)[ok]
    in_first = (first >= a) & (first <= b)
    span = last - first
    overlap = np.clip(np.minimum(last, b) - np.maximum(first, a), 0.0, None)
    share = np.where(span > 0, overlap / np.where(span > 0, span, 1.0), 0.0)
    out = in_first.astype(float) + np.maximum(n_out - 1, 0) * share
    done = int(((last >= a) & (last <= b)).sum())
    return float(out.sum()), float(prompts[in_first].sum()), done


def full_loop_throughputs(requests: pd.DataFrame, warmup: int) -> dict | None:
    """A closed loop with warm-up measures its throughputs while the loop is full: from the
    first measured request's send to the last send (after it, the loop drains), counting what
    every request produced in that window. None when the window is empty."""
    sent = requests["arrival_s"].to_numpy(dtype=np.float64)
    ids = requests["request_id"].to_numpy()
    if not len(sent) or not (ids >= warmup).any():
        return None
    a, b = float(sent[ids >= warmup].min()), float(np.nanmax(sent))
    if not b > a:
        return None
    out, prompt, done = tokens_in_window(requests, a, b)
    length = b - a
    return {
        "request_throughput": done / length,
        "output_throughput": out / length,
        "total_token_throughput": (out + prompt) / length,
        "window_s": [a, b],
    }


def goodput(requests: pd.DataFrame, duration: float, targets: dict[str, float]) -> dict:
    """`vllm bench serve --goodput` on a run: a finished request is good when its TTFT, TPOT
    (0 for a one-token answer, as vllm bench counts it) and E2EL are each at most the target
    set for it (ms); `request_goodput` is good requests per second of the run's duration.
    Beside it, the share of finished requests meeting each target and all of them."""
    done = requests.loc[requests["status"] == Status.FINISHED.value, ["ttft_s", "tpot_s", "e2el_s"]]
    values = {
        "ttft": done["ttft_s"].to_numpy(dtype=np.float64) * 1e3,
        "tpot": done["tpot_s"].fillna(0.0).to_numpy(dtype=np.float64) * 1e3,
        "e2el": done["e2el_s"].to_numpy(dtype=np.float64) * 1e3,
    }
    good = np.ones(len(done), dtype=bool)
    out = {}
    for metric, target in targets.items():
        met = values[metric] <= target
        good &= met
        out[f"{metric}_slo_met_pct"] = 100.0 * float(met.mean()) if len(done) else 0.0
    out["slo_met_pct"] = 100.0 * float(good.mean()) if len(done) else 0.0
    out["request_goodput"] = int(good.sum()) / duration if duration > 0 else 0.0
    return out


def bench_summary(requests: pd.DataFrame, itl: tuple[np.ndarray, np.ndarray]) -> dict:
    """The scalar fields of a `vllm bench serve --save-result` file, from a simulated run."""
    needed = [
        "arrival_s",
        "finish_s",
        "prompt_tokens",
        "output_tokens",
        "ttft_s",
        "tpot_s",
        "e2el_s",
    ]
    done = requests.loc[requests["status"] == Status.FINISHED.value, needed]  # not every column
    duration = float(done["finish_s"].max() - requests["arrival_s"].min()) if len(done) else 0.0
    total_in = int(done["prompt_tokens"].sum())
    total_out = int(done["output_tokens"].sum())

    def rate(x):
        return x / duration if duration > 0 else 0.0

    out = {
        "completed": len(done),
        "failed": int((requests["status"] == Status.REJECTED.value).sum()),
        "duration": duration,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": rate(len(done)),
        "output_throughput": rate(total_out),
        "total_token_throughput": rate(total_in + total_out),
    }
    out |= _stats("ttft", done["ttft_s"].to_numpy())
    out |= _stats("tpot", done["tpot_s"].dropna().to_numpy())
    out |= weighted_stats("itl", *itl, PERCENTILES)  # (distinct gaps, counts)
    out |= _stats("e2el", done["e2el_s"].to_numpy())
    return out


def sim_figures(steps: StepLog, requests: pd.DataFrame, num_blocks: int) -> dict:
    """Simulator-side figures: steps, preemptions, prefix-cache hits, KV usage."""
    admitted = requests.loc[
        requests["first_scheduled_s"].notna(), ["prompt_tokens", "cached_tokens"]
    ]
    prompt = int(admitted["prompt_tokens"].sum())
    figures = steps.figures(num_blocks)
    hits = float(admitted["cached_tokens"].sum() / prompt) if prompt else 0.0
    return {
        "steps": figures["steps"],
        "preemptions": figures["preemptions"],
        "prefix_cache_hit_rate": hits,
        **{k: v for k, v in figures.items() if k not in ("steps", "preemptions")},
    }
