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

import itertools
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from pandas.tseries.api import guess_datetime_format

from sim.config import MAX_TOKENS
from sim.errors import UserError, shown
from sim.paths import shared_data_missing
from sim.user_files import (
    RESULTS_BYTES,
    guarded,
    json_rows,
    load_json,
    refuse_duplicate_columns,
    require_file,
)

MOONCAKE_BLOCK_TOKENS = 512
MAX_SPAN_S = 1e9  # about 30 years
MAX_HASH_ID = 2**62  # fresh ids are numbered on from the largest, in int64
CHUNK_ROWS = 65_536  # CSV rows parsed at once: a big file costs its columns, not its text


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


def load_trace(path: str | Path, max_rows: int | None = None) -> TraceTable:
    """The requests of a trace or lengths file, in arrival order; with `max_rows`, only the
    file's first `max_rows` rows are read (CSV and JSONL are read as they go, so a run of 50
    requests reads 50 rows of a trace of millions; a bench JSON is read whole, up to
    RESULTS_BYTES)."""
    path = Path(path)
    require_file(path, f"trace file {path}", shared_data_missing(path))
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _csv(path, max_rows)
    if suffix == ".jsonl":
        return _jsonl(path, max_rows)
    if suffix == ".json":
        return _bench_json(path)
    raise UserError(f"{path}: unknown trace format; expected .csv, .jsonl or .json")


def _number(value) -> float:
    """A cell as a float: NaN where it is not a number (bools, lists, words), +-inf beyond float."""
    if isinstance(value, bool | np.bool_):
        return math.nan
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return math.nan
    if isinstance(value, int | float | np.number):
        try:
            return float(value)
        except OverflowError:  # an integer beyond float's range
            return math.inf if value > 0 else -math.inf
    return math.nan


def _numbers(values) -> np.ndarray:
    kind = values.dtype if isinstance(values, pd.Series) else None
    if kind is not None and kind.kind in "iuf":  # int, unsigned, float columns
        return values.to_numpy(dtype=np.float64, na_value=np.nan)
    return np.array([_number(v) for v in values], dtype=np.float64)


def _cell(values, row: int):
    return values.iloc[row] if isinstance(values, pd.Series) else values[row]


def _lengths(path: Path, name: str, values, first_row: int = 0) -> np.ndarray:
    """Token counts (rows `first_row` on of the file) as int64, each an integer >= 1."""
    if len(values) == 0:
        raise UserError(f"{path}: no requests in the file")
    arr = _numbers(values)
    with np.errstate(invalid="ignore"):  # +inf (a number beyond float) is too long, below
        bad = np.isnan(arr) | (arr < 1) | ((arr != np.floor(arr)) & np.isfinite(arr))
    if bad.any():
        row = int(np.argmax(bad))
        raise UserError(
            f"{path}: {name} of request {first_row + row} is {shown(_cell(values, row))}; "
            "lengths must be integers >= 1"
        )
    if arr.max() > MAX_TOKENS:
        row = int(np.argmax(arr))
        raise UserError(
            f"{path}: {name} of request {first_row + row} is {shown(_cell(values, row))}; "
            f"lengths must be at most {MAX_TOKENS} (more tokens than any model's context window)"
        )
    return arr.astype(np.int64)


def _finite(path: Path, name: str, values, first_row: int = 0) -> np.ndarray:
    arr = _numbers(values)
    bad = ~np.isfinite(arr)
    if bad.any():
        row = int(np.argmax(bad))
        raise UserError(
            f"{path}: {name} of request {first_row + row} is {shown(_cell(values, row))}; "
            "expected a number"
        )
    return arr


def _from_zero(path: Path, name: str, seconds: np.ndarray) -> np.ndarray:
    """Times from the first arrival; a span beyond MAX_SPAN_S is a unit mix-up, not a trace."""
    if len(seconds) == 0:
        raise UserError(f"{path}: no requests in the file")
    span = float(seconds.max() - seconds.min())
    if not span <= MAX_SPAN_S:
        raise UserError(
            f"{path}: {name} spans {span:.3g} s; a trace spans at most {MAX_SPAN_S:.0e} s "
            "(check the column's unit)"
        )
    return seconds - seconds.min()


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


# ---- CSV, read in chunks of CHUNK_ROWS rows -----------------------------------------------------
_CSV_FORMATS = {  # format -> (prompt, output, arrival time or None: lengths only)
    "azure2023": ("ContextTokens", "GeneratedTokens", "TIMESTAMP"),
    "vidur": ("num_prefill_tokens", "num_decode_tokens", "arrived_at"),
}


def _csv(path: Path, max_rows: int | None) -> TraceTable:
    refuse_duplicate_columns(path)
    try:
        with guarded(path, "CSV") as fh:
            return _csv_table(path, pd.read_csv(fh, chunksize=CHUNK_ROWS, nrows=max_rows))
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text; save the CSV as UTF-8") from exc
    except pd.errors.EmptyDataError as exc:
        raise UserError(
            f"{path}: not a readable CSV (the file is empty); it needs a header row, e.g. "
            "TIMESTAMP,ContextTokens,GeneratedTokens"
        ) from exc
    except (ValueError, OverflowError) as exc:  # ParserError too
        raise UserError(f"{path}: not a readable CSV ({exc.__class__.__name__})") from exc


def _csv_table(path: Path, chunks) -> TraceTable:
    kind, columns, rows = None, {}, 0
    time_format = None
    for df in chunks:
        if kind is None:
            kind = _csv_format(path, set(df.columns))
            prompt, output, when = _CSV_FORMATS[kind]
            when = when if when in df.columns else None
            columns = {prompt: [], output: [], **({when: []} if when else {})}
            if when == "TIMESTAMP":
                time_format = _stamp_format(df[when])
        for name, parts in columns.items():
            if name == "TIMESTAMP":
                parts.append(_stamps(path, df[name], rows, time_format))
            elif name == "arrived_at":
                parts.append(_finite(path, name, df[name], rows))
            else:
                parts.append(_lengths(path, name, df[name], rows) if len(df) else df[name])
        rows += len(df)
    if rows == 0:
        raise UserError(f"{path}: no requests in the file")
    prompt, output, when = _CSV_FORMATS[kind]
    arrival = None
    if when == "TIMESTAMP":
        stamps = pd.concat(columns[when])
        arrival = _from_zero(path, when, (stamps - stamps.min()).dt.total_seconds().to_numpy())
    elif when in columns:
        arrival = _from_zero(path, when, np.concatenate(columns[when]) * 1.0)
    return _sorted(
        TraceTable(
            str(path),
            kind,
            np.concatenate(columns[prompt]).astype(np.int64),
            np.concatenate(columns[output]).astype(np.int64),
            arrival_s=arrival,
        )
    )


def _csv_format(path: Path, cols: set) -> str:
    if {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= cols:
        return "azure2023"
    if {"num_prefill_tokens", "num_decode_tokens"} <= cols:
        return "vidur"
    raise UserError(
        f"{path}: unknown CSV columns {shown(sorted(map(str, cols)), 200)}; expected Azure 2023 "
        "(TIMESTAMP, ContextTokens, GeneratedTokens) or Vidur "
        "(arrived_at, num_prefill_tokens, num_decode_tokens)"
    )


def _stamp_format(column: pd.Series) -> str | None:
    """The date-time format pandas infers for the whole column from its first value, fixed
    for every chunk (a later chunk must not infer another, e.g. day-first)."""
    values = column.dropna()
    if not len(values) or not isinstance(values.iloc[0], str):
        return None
    return guess_datetime_format(values.iloc[0]) or "mixed"


def _stamps(path: Path, column: pd.Series, first_row: int, fmt: str | None) -> pd.Series:
    """Azure TIMESTAMP date-times (mixed time zones as UTC), rows `first_row` on."""
    try:
        with warnings.catch_warnings():  # mixed formats are parsed one by one: fine here
            warnings.simplefilter("ignore", UserWarning)
            stamps = pd.to_datetime(column, errors="coerce", utc=True, format=fmt)
    except (ValueError, TypeError, OverflowError):
        stamps = pd.Series(pd.NaT, index=column.index)
    if stamps.isna().any():
        row = int(np.argmax(stamps.isna().to_numpy()))
        raise UserError(
            f"{path}: TIMESTAMP of request {first_row + row} is {shown(column.iloc[row])}, not a "
            "date-time; write e.g. 2023-11-16 18:15:46.680"
        )
    return stamps


# ---- JSONL, read line by line -------------------------------------------------------------------
_JSONL_FORMATS = {  # format -> (prompt, output, arrival time)
    "mooncake": ("input_length", "output_length", "timestamp"),
    "llmservingsim": ("input_toks", "output_toks", "arrival_time"),
}


def _jsonl_rows(path: Path, max_rows: int | None) -> Iterator[dict]:
    """The file's objects, one a line (blank lines skipped), at most `max_rows` of them."""
    return itertools.islice((row for _, row in json_rows(path)), max_rows)


def _jsonl(path: Path, max_rows: int | None) -> TraceTable:
    rows = _jsonl_rows(path, max_rows)
    first = next(rows, None)
    if first is None:
        raise UserError(f"{path}: no requests in the file")
    kind = next((k for k, keys in _JSONL_FORMATS.items() if set(keys) <= set(first)), None)
    if kind is None:
        raise UserError(
            f"{path}: unknown JSONL fields {shown(sorted(first), 200)}; expected Mooncake "
            "(timestamp, input_length, output_length, hash_ids) or LLMServingSim (arrival_time, "
            "input_toks, output_toks)"
        )
    prompt, output, when = _JSONL_FORMATS[kind]
    hashed = kind == "mooncake" and "hash_ids" in first
    needed = (prompt, output, when, *(("hash_ids",) if hashed else ()))
    columns: dict[str, list] = {k: [] for k in needed}
    # LLMServingSim's queued_ts, while every row has one
    queued: list | None = [] if kind == "llmservingsim" else None
    for i, row in enumerate(itertools.chain([first], rows)):
        for key, values in columns.items():
            if key not in row:
                raise UserError(f"{path}: request {i} has no field {key!r}")
            values.append(row[key])
        if queued is not None:
            if "queued_ts" in row:
                queued.append(row["queued_ts"])
            else:
                queued = None
    hash_ids = columns.get("hash_ids")
    if hash_ids is not None:
        _check_hash_ids(path, hash_ids)
    if queued is not None:  # queued_ts (the engine's clock) is what its TTFT counts from
        when = "queued_ts"
        columns[when] = queued
    prompt_len = _lengths(path, prompt, columns[prompt])
    output_len = _lengths(path, output, columns[output])
    scale = 1e-3 if kind == "mooncake" else 1.0  # Mooncake's timestamps are in ms
    arrival = _from_zero(path, when, _finite(path, when, columns[when]) * scale)
    return _sorted(
        TraceTable(
            str(path),
            kind,
            prompt_len,
            output_len,
            arrival_s=arrival,
            hash_ids=hash_ids,
            hash_block_tokens=MOONCAKE_BLOCK_TOKENS if hash_ids is not None else None,
        )
    )


def _check_hash_ids(path: Path, hash_ids: list) -> None:
    for i, ids in enumerate(hash_ids):
        if not isinstance(ids, list) or not all(
            isinstance(x, int) and not isinstance(x, bool) and 0 <= x < MAX_HASH_ID for x in ids
        ):
            raise UserError(
                f"{path}: hash_ids of request {i} is {shown(ids)}; expected a list of "
                "ints from 0 to 2**62"
            )


# ---- vllm bench serve JSON, read whole ----------------------------------------------------------
def _bench_json(path: Path) -> TraceTable:
    data = load_json(path, "bench result", RESULTS_BYTES)
    if not isinstance(data, dict) or "input_lens" not in data or "output_lens" not in data:
        raise UserError(
            f"{path}: not a `vllm bench serve --save-result` file (needs input_lens, output_lens)"
        )
    inputs, outputs = data["input_lens"], data["output_lens"]
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise UserError(f"{path}: input_lens and output_lens must be lists of the same length")
    errors = data.get("errors")
    if errors is not None and not isinstance(errors, list):
        raise UserError(f"{path}: errors must be a list (one entry per request) or null")
    if errors and len(errors) == len(inputs):  # failed requests have no real output length
        ok = [i for i, err in enumerate(errors) if not err]
        inputs, outputs = [inputs[i] for i in ok], [outputs[i] for i in ok]
    rate = data.get("request_rate")
    rate = math.inf if rate in (None, "inf", "Infinity") else _number(rate)
    if not rate > 0:
        raise UserError(
            f"{path}: request_rate is {shown(data['request_rate'])}; expected a number > 0 (or inf)"
        )
    burstiness = data.get("burstiness")
    burstiness = 1.0 if burstiness is None else _number(burstiness)
    if not 0 < burstiness < math.inf:
        raise UserError(
            f"{path}: burstiness is {shown(data['burstiness'])}; expected a finite number > 0"
        )
    concurrency = data.get("max_concurrency")
    if concurrency is not None and (
        isinstance(concurrency, bool)
        or not isinstance(concurrency, int)
        or not 1 <= concurrency < 2**63
    ):
        raise UserError(
            f"{path}: max_concurrency is {shown(concurrency)}; expected a positive integer or null"
        )
    return TraceTable(
        str(path),
        "bench_json",
        _lengths(path, "input_lens", inputs),
        _lengths(path, "output_lens", outputs),
        request_rate=rate,
        burstiness=burstiness,
        max_concurrency=concurrency,
    )
