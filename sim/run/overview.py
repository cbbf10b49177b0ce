"""A streamed run's steps.parquet read back in pieces for its report: every k-th step for the
per-step plots, and exact token counts per time bin for the throughput plot, without ever
holding all the steps (a million-request run has millions)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

NUM_BINS = 200  # time bins of the throughput plot
# the step columns the report's plots read
PLOTTED = [
    "start_s", "duration_s", "prefill_tokens", "decode_tokens", "batch_size", "kv_blocks_used",
    "num_waiting",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class StepOverview:
    sample: pd.DataFrame  # every `every`-th step, in order
    every: int
    edges: np.ndarray  # time bins (s) over the run
    decode_tokens: np.ndarray  # tokens per bin, by each step's end
    prefill_tokens: np.ndarray


def time_bins(end_s: float) -> np.ndarray:
    width = max(end_s / NUM_BINS, 1e-3)
    return np.arange(0.0, end_s + width, width)


def binned(end_s: np.ndarray, tokens: np.ndarray, edges: np.ndarray) -> np.ndarray:
    sums, _ = np.histogram(end_s, bins=edges, weights=tokens)
    return sums


def of_frame(steps: pd.DataFrame) -> StepOverview:
    """Every step held in memory: the sample is all of them."""
    end = (steps["start_s"] + steps["duration_s"]).to_numpy()
    edges = time_bins(float(end.max()) if len(end) else 1.0)
    decode = binned(end, steps["decode_tokens"].to_numpy(), edges)
    prefill = binned(end, steps["prefill_tokens"].to_numpy(), edges)
    return StepOverview(steps, 1, edges, decode, prefill)


def of_file(path: Path, num_steps: int, end_s: float, max_rows: int = 50_000) -> StepOverview:
    """One pass over a streamed steps.parquet, a row group at a time."""
    every = max(1, -(-num_steps // max_rows))
    edges = time_bins(end_s if num_steps else 1.0)
    decode = np.zeros(len(edges) - 1)
    prefill = np.zeros(len(edges) - 1)
    kept, seen = [], 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=1 << 16, columns=PLOTTED):
        chunk = batch.to_pandas()
        end = (chunk["start_s"] + chunk["duration_s"]).to_numpy()
        decode += binned(end, chunk["decode_tokens"].to_numpy(), edges)
        prefill += binned(end, chunk["prefill_tokens"].to_numpy(), edges)
        first = (-seen) % every  # the rows whose overall index is a multiple of `every`
        kept.append(chunk.iloc[first::every].copy())  # a copy: a view would keep the chunk
        seen += len(chunk)
    sample = pd.concat(kept, ignore_index=True) if kept else pd.DataFrame(columns=PLOTTED)
    pa.default_memory_pool().release_unused()  # the batches' buffers, back to the system
    return StepOverview(sample, every, edges, decode, prefill)
