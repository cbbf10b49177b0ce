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
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sim.config import MAX_TOKENS
from sim.errors import UserError, shown
from sim.paths import shared_data_missing

MOONCAKE_BLOCK_TOKENS = 512
MAX_SPAN_S = 1e9  # about 30 years
MAX_HASH_ID = 2**62  # fresh ids are numbered on from the largest, in int64


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
    try:
        found = path.is_file()
    except OSError:  # a name too long for the file system
        found = False
    if not found:
        raise UserError(f"trace file {path} does not exist{shared_data_missing(path)}")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _csv(path)
    if suffix == ".jsonl":
        return _jsonl(path)
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


def _lengths(path: Path, name: str, values) -> np.ndarray:
    if len(values) == 0:
        raise UserError(f"{path}: no requests in the file")
    arr = _numbers(values)
    with np.errstate(invalid="ignore"):  # +inf (a number beyond float) is too long, below
        bad = np.isnan(arr) | (arr < 1) | ((arr != np.floor(arr)) & np.isfinite(arr))
    if bad.any():
        row = int(np.argmax(bad))
        raise UserError(
            f"{path}: {name} of request {row} is {shown(_cell(values, row))}; "
            "lengths must be integers >= 1"
        )
    if arr.max() > MAX_TOKENS:
        row = int(np.argmax(arr))
        raise UserError(
            f"{path}: {name} of request {row} is {shown(_cell(values, row))}; lengths must be "
            f"at most {MAX_TOKENS} (more tokens than any model's context window)"
        )
    return arr.astype(np.int64)


def _times(path: Path, name: str, values, scale: float) -> np.ndarray:
    arr = _numbers(values)
    bad = ~np.isfinite(arr)
    if bad.any():
        row = int(np.argmax(bad))
        raise UserError(
            f"{path}: {name} of request {row} is {shown(_cell(values, row))}; expected a number"
        )
    return _from_zero(path, name, arr * scale)


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


def _csv(path: Path) -> TraceTable:
    try:
        df = pd.read_csv(path)
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text; save the CSV as UTF-8") from exc
    except pd.errors.EmptyDataError as exc:
        raise UserError(
            f"{path}: not a readable CSV (the file is empty); it needs a header row, e.g. "
            "TIMESTAMP,ContextTokens,GeneratedTokens"
        ) from exc
    except (ValueError, OverflowError) as exc:  # ParserError too
        raise UserError(f"{path}: not a readable CSV ({exc.__class__.__name__})") from exc
    cols = set(df.columns)
    if {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= cols:
        return _sorted(
            TraceTable(
                str(path),
                "azure2023",
                _lengths(path, "ContextTokens", df["ContextTokens"]),
                _lengths(path, "GeneratedTokens", df["GeneratedTokens"]),
                arrival_s=_stamps(path, df["TIMESTAMP"]),
            )
        )
    if {"num_prefill_tokens", "num_decode_tokens"} <= cols:
        arrival = None
        if "arrived_at" in cols:
            arrival = _times(path, "arrived_at", df["arrived_at"], 1.0)
        return _sorted(
            TraceTable(
                str(path),
                "vidur",
                _lengths(path, "num_prefill_tokens", df["num_prefill_tokens"]),
                _lengths(path, "num_decode_tokens", df["num_decode_tokens"]),
                arrival_s=arrival,
            )
        )
    raise UserError(
        f"{path}: unknown CSV columns {shown(sorted(map(str, cols)), 200)}; expected Azure 2023 "
        "(TIMESTAMP, ContextTokens, GeneratedTokens) or Vidur "
        "(arrived_at, num_prefill_tokens, num_decode_tokens)"
    )


def _stamps(path: Path, column: pd.Series) -> np.ndarray:
    """Azure TIMESTAMP date-times as seconds from the first (mixed time zones as UTC)."""
    if len(column) == 0:
        raise UserError(f"{path}: no requests in the file")
    try:
        with warnings.catch_warnings():  # mixed formats are parsed one by one: fine here
            warnings.simplefilter("ignore", UserWarning)
            stamps = pd.to_datetime(column, errors="coerce", utc=True)
    except (ValueError, TypeError, OverflowError):
        stamps = pd.Series(pd.NaT, index=column.index)
    if stamps.isna().any():
        row = int(np.argmax(stamps.isna().to_numpy()))
        raise UserError(
            f"{path}: TIMESTAMP of request {row} is {shown(column.iloc[row])}, not a date-time; "
            "write e.g. 2023-11-16 18:15:46.680"
        )
    return _from_zero(path, "TIMESTAMP", (stamps - stamps.min()).dt.total_seconds().to_numpy())


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    try:
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                row = _json(path, line, lineno)
                if not isinstance(row, dict):
                    raise UserError(f"{path}:{lineno}: expected a JSON object per line")
                rows.append(row)
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text; save the file as UTF-8") from exc
    if not rows:
        raise UserError(f"{path}: no requests in the file")
    return rows


def _json(path: Path, text: str, lineno: int = 0):
    """One JSON document; `lineno`: the line of a JSONL file it came from (0: a whole file)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"{path}:{lineno or exc.lineno}"
        raise UserError(f"{where}: not valid JSON ({exc.msg})") from exc
    except ValueError as exc:  # an integer of thousands of digits
        raise UserError(f"{path}:{lineno or 1}: not valid JSON (a number too long)") from exc
    except RecursionError as exc:
        raise UserError(f"{path}:{lineno or 1}: not valid JSON (nested too deeply)") from exc


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
                    isinstance(x, int) and not isinstance(x, bool) and 0 <= x < MAX_HASH_ID
                    for x in ids
                ):
                    raise UserError(
                        f"{path}: hash_ids of request {i} is {shown(ids)}; expected a list of "
                        "ints from 0 to 2**62"
                    )
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
        f"{path}: unknown JSONL fields {shown(sorted(first), 200)}; expected Mooncake (timestamp, "
        "input_length, output_length, hash_ids) or LLMServingSim (arrival_time, input_toks, "
        "output_toks)"
    )


def _bench_json(path: Path) -> TraceTable:
    try:
        data = _json(path, path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text; save the file as UTF-8") from exc
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
