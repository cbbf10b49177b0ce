"""Catalogue files parsed once per process and per content.

A sweep's points, upgrade_diff's mixtures and the validation suite's cases each resolve their
GPU, link catalogue and cost profiles afresh; parsing the same YAML or JSON again each time
cost a sweep point tens of milliseconds. `parsed(path, parse)` keeps what `parse` built from a
file, keyed by the file's path, size and modification time (an edited file is read again),
so what it returns is shared: callers must treat it as read-only (the frozen dataclasses that
hold hardware and cost profiles are). A file that cannot be stat'ed is parsed every time, so
its error is raised as `parse` raises it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

_PARSED: dict[tuple, object] = {}


def parsed(path: Path, parse: Callable[[Path], T]) -> T:
    try:
        stat = path.stat()
    except OSError:
        return parse(path)
    key = (parse, str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _PARSED:
        _PARSED[key] = parse(path)
    return _PARSED[key]  # type: ignore[return-value]
