"""Writing a run's files atomically: each file appears complete or not at all."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pandas as pd


def atomic_write(path: Path, write: Callable[[Path], None]) -> Path:
    """Call write(tmp) on a temporary file beside `path`, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json(path: Path, data: dict) -> Path:
    text = json.dumps(data, indent=2, sort_keys=False, default=_plain) + "\n"
    return atomic_write(path, lambda tmp: tmp.write_text(text))


def write_text(path: Path, text: str) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text))


def write_parquet(path: Path, frame: pd.DataFrame) -> Path:
    return atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False, engine="pyarrow"))


def _plain(value):
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, (set, tuple)):
        return list(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")
