"""Reading the sources' fields: numbers and counts from JSON or CSV values (which may be
missing, text or NaN), JSON files with one-line errors, and paths relative to a case file."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from sim.errors import UserError


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
    """An optional count (a parallel size): 1 where missing, not a number or below 1."""
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond any float
        return 1
    return int(v) if math.isfinite(v) and v >= 1 else 1


def mapping(value) -> dict:
    """`value` where it is a mapping, else an empty one (a source's optional sections)."""
    return value if isinstance(value, dict) else {}


def read_json(path: Path):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text; save the file as UTF-8") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except (ValueError, RecursionError):
        raise UserError(f"{path}: not valid JSON (a number too long or nesting too deep)") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read the file ({exc.strerror})") from None


def relative_path(path: Path, out: Path) -> str:
    """`path` relative to the folder of the case file `out` (how case files name their inputs)."""
    return os.path.relpath(os.path.abspath(path), os.path.abspath(out.parent))
