"""Reading real `vllm bench serve --save-result` results (and LLMServingSim requests.jsonl):
the summary metrics a run measured and its per-request measurements."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from sim.errors import UserError, shown
from sim.user_files import RESULTS_BYTES, json_rows, load_json

# summary.json keys of a vllm bench serve result that count as its measured metrics
BENCH_METRICS = tuple(
    [
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        *(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median")),
        *(f"p{p}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for p in (50, 90, 99)),
    ]
)


def bench_metrics(path: Path) -> dict:
    """The metrics a vllm bench serve result reports, as summary.json keys (those it left 0,
    null or NaN are not measured)."""
    data = _read_json(Path(path))
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object of vllm bench serve results")
    out = {}
    for key in BENCH_METRICS:
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if value < 0:
            raise UserError(f"{path}: {key} is {value!r}; a measured metric is >= 0")
        if 0 < value < math.inf:
            try:
                out[key] = float(value)
            except OverflowError:  # an integer past a float's range (~1.8e308)
                raise UserError(
                    f"{path}: {key} is an integer beyond a float's range (1.8e308), not a "
                    "measurement; check the file was written by vllm bench serve"
                ) from None
    return out


def _read_json(path: Path):
    return load_json(path, "bench result", RESULTS_BYTES)


_REQUEST_FIELDS = ("queued_ts", "arrival_time", "first_token_ts", "last_token_ts", "output_toks")


# ---- per-request measurements ----------------------------------------------------------------
def measured_requests(path: str) -> dict[str, np.ndarray]:
    """Per-request TTFT and TPOT (and pooled ITL where recorded), in seconds, from an
    LLMServingSim requests.jsonl or a vllm bench serve result saved with details."""
    p = Path(path)
    if p.suffix != ".jsonl":
        data = _read_json(p)
        if not isinstance(data, dict):
            raise UserError(f"{p}: expected a JSON object of vllm bench serve results")
        got = {}
        if data.get("ttfts"):
            got["ttft"] = _seconds(p, "ttfts", data["ttfts"])
        itls = data.get("itls")
        if itls and not isinstance(itls, list):
            raise UserError(f"{p}: itls must be a list (per request) of lists of seconds")
        itls = [_seconds(p, f"itls[{i}]", x) for i, x in enumerate(itls or []) if x]
        if itls:
            got["itl"] = np.concatenate(itls)
        return got
    rows = _request_rows(p)
    if not rows:
        raise UserError(f"{p}: no requests in the file")
    start = _field(p, rows, ("queued_ts", "arrival_time"))
    first = _field(p, rows, ("first_token_ts",))
    last = _field(p, rows, ("last_token_ts",))
    out = _field(p, rows, ("output_toks",))
    for name, bad in (
        ("first_token_ts is before its queued_ts", first < start),
        ("last_token_ts is before its first_token_ts", last < first),
        ("output_toks is below 1", out < 1),
    ):
        if bad.any():
            raise UserError(f"{p}: request {int(np.argmax(bad))}'s {name}")
    tpot = np.where(out > 1, (last - first) / np.maximum(out - 1, 1), np.nan)
    return {"ttft": first - start, "tpot": tpot[np.isfinite(tpot)]}


def ttft_from_engine_queue(path: str) -> bool:
    """Whether an LLMServingSim requests.jsonl counts TTFT from queued_ts, when the engine
    read the request, on every row (measured_requests' choice; the trace reader replays those
    times too, sim/workload/traces.py)."""
    rows = _request_rows(Path(path))
    return bool(rows) and all(row.get("queued_ts") is not None for row in rows)


def _request_rows(p: Path) -> list[dict]:
    """The fields _field reads of each row of a requests.jsonl, read line by line."""
    return [{k: row[k] for k in _REQUEST_FIELDS if k in row} for _, row in json_rows(p)]


def _field(p: Path, rows: list[dict], keys: tuple[str, ...]) -> np.ndarray:
    """One finite number per row from the first of `keys` the row has."""
    values = np.empty(len(rows))
    for i, row in enumerate(rows):
        key = next((k for k in keys if row.get(k) is not None), keys[0])
        value = row.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{p}: request {i} has no number {key!r} (got {shown(value)})")
        if not abs(value) < 1e300:
            raise UserError(f"{p}: request {i}: {key} is {shown(value)}; expected a finite number")
        values[i] = value
    return values


def _seconds(p: Path, key: str, values) -> np.ndarray:
    """A list of finite, non-negative numbers (seconds)."""
    if not isinstance(values, list):
        raise UserError(f"{p}: {key} must be a list of seconds, got {shown(values)}")
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1e300:
            raise UserError(f"{p}: {key}[{i}] is {shown(v)}; expected seconds (a number >= 0)")
    return np.asarray(values, dtype=float)
