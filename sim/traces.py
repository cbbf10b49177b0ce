"""Reading request traces and benchmark results into one table of arrivals and lengths.

Formats, told apart by their fields:
  Azure LLM inference 2023 CSV   TIMESTAMP, ContextTokens, GeneratedTokens
  Vidur processed CSV            arrived_at (s), num_prefill_tokens, num_decode_tokens
                                 (lengths-only files without arrived_at are accepted too)
  Mooncake JSONL                 timestamp (ms), input_length, output_length, hash_ids
                                 (one id per 512-token block)
  LLMServingSim requests.jsonl   arrival_time (unix s) or queued_ts (engine clock, preferred),
                                 input_toks, output_toks
  vllm bench serve JSON          input_lens, output_lens, request_rate, burstiness, max_concurrency
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sim.errors import UserError

MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True, slots=True)
class TraceTable:
    source: str
    format: str
    prompt_len: np.ndarray  # int64, >= 1
    output_len: np.ndarray  # int64, >= 1
    arrival_s: np.ndarray | None = None  # float64 from 0, non-decreasing; None: no times in file
    hash_ids: list[list[int]] | None = None  # per request, prompt content ids
    hash_block_tokens: int | None = None
    request_rate: float | None = None  # bench JSON: inf means all at once
    burstiness: float | None = None
    max_concurrency: int | None = None

    def __len__(self) -> int:
        return len(self.prompt_len)


def load_trace(path: str | Path) -> TraceTable:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"trace file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _csv(path)
    if suffix == ".jsonl":
        return _jsonl(path)
    if suffix == ".json":
        return _bench_json(path)
    raise UserError(f"{path}: unknown trace format; expected .csv, .jsonl or .json")


def _lengths(path: Path, name: str, values) -> np.ndarray:
    arr = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(arr) | (arr < 1) | (arr != np.floor(arr))
    if len(arr) == 0:
        raise UserError(f"{path}: no requests in the file")
    if bad.any():
        row = int(np.argmax(bad))
        raise UserError(
            f"{path}: {name} of request {row} is {values[row]!r}; lengths must be integers >= 1"
        )
    if arr.max() > 2**31:
        raise UserError(f"{path}: {name} up to {arr.max():.0f} tokens is not a plausible length")
    return arr.astype(np.int64)


def _times(path: Path, name: str, values, scale: float) -> np.ndarray:
    arr = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(arr)
    if bad.any():
        row = int(np.argmax(bad))
        raise UserError(f"{path}: {name} of request {row} is {values[row]!r}; expected a number")
    arr = arr * scale
    return arr - arr.min()


def _sorted(table: TraceTable) -> TraceTable:
    """Requests in arrival order (stable), so unsorted files replay as recorded."""
    if table.arrival_s is None or np.all(np.diff(table.arrival_s) >= 0):
        return table
    order = np.argsort(table.arrival_s, kind="stable")
    return TraceTable(
        source=table.source,
        format=table.format,
        prompt_len=table.prompt_len[order],
        output_len=table.output_len[order],
        arrival_s=table.arrival_s[order],
        hash_ids=None if table.hash_ids is None else [table.hash_ids[i] for i in order],
        hash_block_tokens=table.hash_block_tokens,
    )


def _csv(path: Path) -> TraceTable:
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not a readable CSV ({exc.__class__.__name__})") from exc
    cols = set(df.columns)
    if {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= cols:
        stamps = pd.to_datetime(df["TIMESTAMP"], errors="coerce")
        if stamps.isna().any():
            row = int(np.argmax(stamps.isna().to_numpy()))
            raise UserError(f"{path}: TIMESTAMP of request {row} is not a date-time")
        seconds = (stamps - stamps.min()).dt.total_seconds().to_numpy()
        return _sorted(
            TraceTable(
                str(path),
                "azure2023",
                _lengths(path, "ContextTokens", df["ContextTokens"].tolist()),
                _lengths(path, "GeneratedTokens", df["GeneratedTokens"].tolist()),
                arrival_s=seconds,
            )
        )
    if {"num_prefill_tokens", "num_decode_tokens"} <= cols:
        arrival = None
        if "arrived_at" in cols:
            arrival = _times(path, "arrived_at", df["arrived_at"].tolist(), 1.0)
        return _sorted(
            TraceTable(
                str(path),
                "vidur",
                _lengths(path, "num_prefill_tokens", df["num_prefill_tokens"].tolist()),
                _lengths(path, "num_decode_tokens", df["num_decode_tokens"].tolist()),
                arrival_s=arrival,
            )
        )
    raise UserError(
        f"{path}: unknown CSV columns {sorted(cols)}; expected Azure 2023 "
        "(TIMESTAMP, ContextTokens, GeneratedTokens) or Vidur "
        "(arrived_at, num_prefill_tokens, num_decode_tokens)"
    )


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    try:
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise UserError(f"{path}:{lineno}: expected a JSON object per line")
                rows.append(row)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from exc
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text") from exc
    if not rows:
        raise UserError(f"{path}: no requests in the file")
    return rows


def _column(path: Path, rows: list[dict], key: str) -> list:
    for i, row in enumerate(rows):
        if key not in row:
            raise UserError(f"{path}: request {i} has no field {key!r}")
    return [row[key] for row in rows]


def _jsonl(path: Path) -> TraceTable:
    rows = _read_jsonl(path)
    first = rows[0]
    if {"input_length", "output_length", "timestamp"} <= set(first):
        hash_ids = _column(path, rows, "hash_ids") if "hash_ids" in first else None
        if hash_ids is not None:
            for i, ids in enumerate(hash_ids):
                if not isinstance(ids, list) or not all(
                    isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in ids
                ):
                    raise UserError(f"{path}: hash_ids of request {i} must be a list of ints >= 0")
        return _sorted(
            TraceTable(
                str(path),
                "mooncake",
                _lengths(path, "input_length", _column(path, rows, "input_length")),
                _lengths(path, "output_length", _column(path, rows, "output_length")),
                arrival_s=_times(path, "timestamp", _column(path, rows, "timestamp"), 1e-3),
                hash_ids=hash_ids,
                hash_block_tokens=MOONCAKE_BLOCK_TOKENS if hash_ids is not None else None,
            )
        )
    if {"input_toks", "output_toks", "arrival_time"} <= set(first):
        # queued_ts (the engine's clock, when present) is what its TTFT counts from
        when = "queued_ts" if all("queued_ts" in r for r in rows) else "arrival_time"
        return _sorted(
            TraceTable(
                str(path),
                "llmservingsim",
                _lengths(path, "input_toks", _column(path, rows, "input_toks")),
                _lengths(path, "output_toks", _column(path, rows, "output_toks")),
                arrival_s=_times(path, when, _column(path, rows, when), 1.0),
            )
        )
    raise UserError(
        f"{path}: unknown JSONL fields {sorted(first)}; expected Mooncake (timestamp, "
        "input_length, output_length, hash_ids) or LLMServingSim (arrival_time, input_toks, "
        "output_toks)"
    )


def _bench_json(path: Path) -> TraceTable:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from exc
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text") from exc
    if not isinstance(data, dict) or "input_lens" not in data or "output_lens" not in data:
        raise UserError(
            f"{path}: not a `vllm bench serve --save-result` file (needs input_lens, output_lens)"
        )
    inputs, outputs = data["input_lens"], data["output_lens"]
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise UserError(f"{path}: input_lens and output_lens must be lists of the same length")
    errors = data.get("errors") or [""] * len(inputs)
    ok = [i for i, err in enumerate(errors) if not err] if len(errors) == len(inputs) else None
    if ok is not None and len(ok) < len(inputs):  # failed requests have no real output length
        inputs, outputs = [inputs[i] for i in ok], [outputs[i] for i in ok]
    rate = data.get("request_rate", math.inf)
    rate = math.inf if rate in (None, "inf", "Infinity") else float(rate)
    if not rate > 0:
        raise UserError(f"{path}: request_rate must be > 0 (or inf), got {rate!r}")
    burstiness = float(data.get("burstiness") or 1.0)
    if not burstiness > 0:
        raise UserError(f"{path}: burstiness must be > 0, got {burstiness!r}")
    concurrency = data.get("max_concurrency")
    if concurrency is not None and (not isinstance(concurrency, int) or concurrency < 1):
        raise UserError(f"{path}: max_concurrency must be a positive integer or null")
    return TraceTable(
        str(path),
        "bench_json",
        _lengths(path, "input_lens", inputs),
        _lengths(path, "output_lens", outputs),
        request_rate=rate,
        burstiness=burstiness,
        max_concurrency=concurrency,
    )
