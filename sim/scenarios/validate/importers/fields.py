"""Reading the sources' fields: numbers and counts from JSON or CSV values (which may be
missing, text or NaN), JSON files with one-line errors, and paths relative to a case file."""

from __future__ import annotations

import math
import os
from pathlib import Path

from sim.errors import UserError
from sim.user_files import RESULTS_BYTES, load_json

MAX_PARALLEL = 2**20  # GPUs in one parallel dimension: beyond any deployment


def finite_float(value) -> float:
    """A finite number from a JSON or CSV field, else NaN."""
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        return math.nan
    return v if math.isfinite(v) else math.nan


def count(value, where: str) -> int:
    """A positive integer from a JSON or CSV field (1024, 1024.0, "1024")."""
    v = finite_float(value)
    if not (1 <= v < 2**63 and v == int(v)):
        raise UserError(f"{where} is {value!r:.40}; expected an integer >= 1")
    return int(v)


def count_or_one(value) -> int:
    """An optional count (a parallel size): 1 where missing, not a number, below 1 or beyond
    MAX_PARALLEL (no such machine: 1e308 read as one, as 10**400 and NaN are)."""
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond any float
        return 1
    return int(v) if 1 <= v <= MAX_PARALLEL else 1


def mapping(value) -> dict:
    """`value` where it is a mapping, else an empty one (a source's optional sections)."""
    return value if isinstance(value, dict) else {}


def read_json(path: Path):
    """A source's JSON file, read whole (sim/user_files.py's bounds)."""
    return load_json(path, "file", RESULTS_BYTES)


def relative_path(path: Path, out: Path) -> str:
    """`path` relative to the folder of the case file `out` (how case files name their inputs)."""
    return os.path.relpath(os.path.abspath(path), os.path.abspath(out.parent))
