"""Writing a run's files atomically: each file appears complete or not at all."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

# Parquet's dictionary encoding is tried on every column, and a column of distinct floats (a
# step's start and duration) fills a dictionary page of 1 MB, pyarrow's default, before it falls
# back to plain encoding. At 32 KB the columns with few values (batch sizes, counts) keep their
# dictionaries and the others fall back early: a sweep point's steps.parquet (75,725 steps) in
# 22-33 ms instead of 42-51 and 1.97 MB instead of 2.40 (benchmarks/README.md, issue 24's
# seventh step). The same rows and types are read back.
PARQUET_OPTIONS = {"dictionary_pagesize_limit": 32 * 1024}


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
    return atomic_write(
        path, lambda tmp: frame.to_parquet(tmp, index=False, engine="pyarrow", **PARQUET_OPTIONS)
    )


def write_parquet_chunks(path: Path, frame: pd.DataFrame, rows: int = 1 << 16) -> Path:
    """A large frame as row groups of `rows`, converted one at a time (less memory at once)."""
    out = ParquetChunks(path)
    try:
        for lo in range(0, len(frame), rows):
            out.write(frame.iloc[lo : lo + rows])
        return out.close(frame.iloc[:0])
    except BaseException:
        out.abort()
        raise


def _plain(value):
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, (set, tuple)):
        return list(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


class ParquetChunks:
    """A parquet file written one row group at a time as a run goes, so a long run's rows never
    sit in memory together. It is written beside `path` under a temporary name and appears
    at `path` only when close() finishes it: complete or not at all."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        os.close(fd)
        self.path, self.tmp = path, Path(tmp)
        self.writer = None
        self.num_rows = 0

    def write(self, frame: pd.DataFrame) -> None:
        table = pa.Table.from_pandas(frame, preserve_index=False)
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.tmp, table.schema, **PARQUET_OPTIONS)
        self.writer.write_table(table)
        self.num_rows += len(frame)

    def close(self, empty: pd.DataFrame) -> Path:
        """Finish the file (`empty`, the columns with no rows, when nothing was written)."""
        if self.writer is None:
            self.write(empty)
        self.writer.close()
        os.chmod(self.tmp, 0o666 & ~_umask())
        os.replace(self.tmp, self.path)
        return self.path

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.tmp.unlink(missing_ok=True)


INCOMPLETE = "INCOMPLETE"  # in a run dir while its task runs, and after it if it did not finish


def mark_incomplete(run_dir: Path, why: str) -> Path:
    """Say in the run dir that its outputs are not (yet) a finished run, and why."""
    text = (
        f"This run dir is incomplete: {why}.\n"
        "Its other files may be missing, or left from an earlier run. Run the same command\n"
        "again to finish it (sweeps and upgrade_diff reuse the simulations already done).\n"
    )
    return write_text(run_dir / INCOMPLETE, text)


def mark_complete(run_dir: Path) -> None:
    (run_dir / INCOMPLETE).unlink(missing_ok=True)
