"""The checks every value of a config goes through on its way in: its type, its range, its
choices, named by its key with the fix in one line (`sim.errors.UserError`).

`build(cls, data)` turns plain data (Hydra's composition, a case file's entry) into the frozen
dataclass `cls` (sim/config.py), section by section. A field's metadata says what it takes:
`choices`, the bounds `min`, `gt`, `lt`, `max`, the reason said with a broken upper bound
(`why`) or lower one (`low_why`), and `words` a number field also takes (workload.rate=auto).
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, fields
from functools import cache

from sim.errors import UserError, shown


@cache
def _hints(cls) -> dict:
    """The type hints of a config dataclass (resolving them is slow; they never change)."""
    return typing.get_type_hints(cls)


def build(cls, data, prefix: str = ""):
    """An instance of the config dataclass `cls` from plain data, every value checked."""
    if not isinstance(data, Mapping):
        raise UserError(
            f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {shown(data, 60)}"
        )
    hints = _hints(cls)
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known, key=str)
    if unknown:
        name = unknown[0] if isinstance(unknown[0], str) and unknown[0].isprintable() else None
        name = name or shown(unknown[0], 60)
        raise UserError(
            f"unknown key {prefix}{name}; allowed under {prefix.rstrip('.') or 'the top'}: "
            f"{', '.join(sorted(known))}"
        )
    values = {}
    for f in fields(cls):
        key = prefix + f.name
        if f.name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise UserError(f"missing key {key}")
            continue
        value, hint = data[f.name], hints[f.name]
        if hasattr(hint, "__dataclass_fields__"):
            values[f.name] = build(hint, value, key + ".")
        elif typing.get_origin(hint) is Mapping or hint is Mapping:
            if not isinstance(value, Mapping):
                raise UserError(f"{key}: expected a mapping of NAME: value")
            _numbers_in(key, value)
            values[f.name] = dict(value)
        else:
            values[f.name] = _check(key, value, hint, f.metadata)
    return cls(**values)


def _check(key: str, value, hint, checks: Mapping):
    kinds = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if value is None:
        if type(None) in kinds:
            return None
        raise UserError(f"{key}: a value is required")
    if isinstance(value, str) and "words" in checks:  # a number field that takes a word too
        if value in checks["words"]:
            return value
        raise UserError(
            f"{key}={shown(value, 60)}: expected a number or {'/'.join(checks['words'])}"
        )
    kind = next(k for k in kinds if k is not type(None))
    if typing.get_origin(kind) is tuple:  # a list of strings (or one string), or of numbers
        item = typing.get_args(kind)[0]
        if item is str:
            items = [value] if isinstance(value, str) else value
            if not isinstance(items, (list, tuple)) or not all(isinstance(v, str) for v in items):
                raise UserError(f"{key}={shown(value, 60)}: expected a string or a list of strings")
            return tuple(items)
        if not isinstance(value, (list, tuple)):
            raise UserError(f"{key}={shown(value, 60)}: expected a list, e.g. [0.5, 1.0]")
        items = tuple(_coerce(key, v, item) for v in value)
        for v in items:
            if not math.isfinite(v) or v <= 0:
                raise UserError(
                    f"{key}={shown(value, 60)}: every value must be a finite number > 0"
                )
            _bounds(key, v, checks, of_list=value)
        return items
    value = _coerce(key, value, kind)
    if "choices" in checks and value not in checks["choices"]:
        raise UserError(f"{key}={shown(value, 60)}: choose one of {', '.join(checks['choices'])}")
    if kind in (int, float):
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"{key}={shown(value, 60)}: must be a finite number")
        _bounds(key, value, checks)
    return value


# (bound, holds, sign, the metadata key of the reason it is said with)
_BOUNDS = (
    ("min", lambda v, b: v >= b, ">=", "low_why"),
    ("gt", lambda v, b: v > b, ">", "low_why"),
    ("lt", lambda v, b: v < b, "<", None),
    ("max", lambda v, b: v <= b, "<=", "why"),
)


def _bounds(key: str, value, checks: Mapping, of_list=None) -> None:
    """`value` within the field's bounds (`of_list`: the list it is one value of)."""
    for name, ok, sign, reason in _BOUNDS:
        if name in checks and not ok(value, checks[name]):
            why = f" ({checks[reason]})" if reason in checks else ""
            said = shown(value if of_list is None else of_list, 60)
            what = "must be" if of_list is None else "every value must be"
            raise UserError(f"{key}={said}: {what} {sign} {checks[name]}{why}")


def _numbers_in(key: str, value) -> None:
    """Every number of an engine_args mapping (lists too) finite and within int64's range: the
    engines turn them into counts, bytes and seconds (their own ranges are checked there)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            _numbers_in(f"{key}.{k}", v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _numbers_in(key, v)
    elif (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        # the range first: math.isfinite of an int past a float's range raises OverflowError
        and not (-(2**63) < value < 2**63 and math.isfinite(value))
    ):
        raise UserError(f"{key}={shown(value, 60)}: must be a finite number below 2**63")


def _coerce(key: str, value, kind):
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise UserError(f"{key}={shown(value, 60)}: expected true or false")
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{key}={shown(value, 60)}: expected an integer")
        if isinstance(value, float) and not math.isfinite(value):  # nan / inf from the CLI
            raise UserError(f"{key}={shown(value, 60)}: expected an integer (a finite number)")
        if value != int(value):
            raise UserError(f"{key}={shown(value, 60)}: expected an integer")
        if not -(2**63) <= value < 2**63:  # numpy's int64 holds every count and seed
            raise UserError(f"{key}={shown(value, 60)}: must fit in a 64-bit integer (< 2**63)")
        return int(value)
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{key}={shown(value, 60)}: expected a number")
        if isinstance(value, int) and not -(2**1023) < value < 2**1023:
            raise UserError(f"{key}={shown(value, 60)}: must be a finite number")
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            raise UserError(f"{key}={shown(value, 60)}: expected a string")
        return value
    raise TypeError(f"unsupported config type {kind} for {key}")
