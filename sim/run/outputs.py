"""Writing a run's files atomically: each file appears complete or not at all, and is noted in
the record of the run whose dir it is in (sim/run/rundir.py).

A file is written to a hidden temporary name beside it (`.NAME.xxxxxxxx.tmp`) and renamed into
place; a process killed before the rename leaves the temporary file, which the next run in
that dir removes as it starts (is_temporary). A file that cannot be written (a full disk, a
read-only folder) is one line naming it (a UserError), not a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sim.errors import UserError, shown

# Parquet's dictionary encoding is tried on every column, and a column of distinct floats (a
# step's start and duration) fills a dictionary page of 1 MB, pyarrow's default, before it falls
# back to plain encoding. At 32 KB the columns with few values (batch sizes, counts) keep their
# dictionaries and the others fall back early: a sweep point's steps.parquet (75,725 steps) in
# 22-33 ms instead of 42-51 and 1.97 MB instead of 2.40 (benchmarks/README.md, issue 24's
# seventh step). The same rows and types are read back.
PARQUET_OPTIONS = {"dictionary_pagesize_limit": 32 * 1024}


TEMP_SUFFIX = ".tmp"
_TEMP_NAME = re.compile(r"\..+\.[a-z0-9_]{8}" + re.escape(TEMP_SUFFIX))  # tempfile.mkstemp's


def is_temporary(name: str) -> bool:
    """Whether a file name is one of atomic_write's (or ParquetChunks') temporary names."""
    return _TEMP_NAME.fullmatch(name) is not None


def atomic_write(path: Path, write: Callable[[Path], None]) -> Path:
    """Call write(tmp) on a temporary file beside `path`, then rename it into place."""
    tmp = _temporary(path)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise write_error(path, exc) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    note_written(path)
    return path


def _temporary(path: Path) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    except OSError as exc:
        raise write_error(path, exc) from exc
    os.close(fd)
    return Path(tmp)


# what to do about a file or folder that cannot be written, by the system's reason
_REMEDY = {
    errno.ENOSPC: "free some space or choose another hydra.run.dir",
    errno.EDQUOT: "free some space or choose another hydra.run.dir",
    errno.EROFS: "choose a folder on a writable disk as hydra.run.dir",
    errno.EACCES: "choose a folder you may write in as hydra.run.dir",
    errno.EPERM: "choose a folder you may write in as hydra.run.dir",
    errno.ENAMETOOLONG: "choose a shorter hydra.run.dir",
    errno.EEXIST: "a file is where a folder should be: choose another hydra.run.dir",
    errno.ENOTDIR: "a file is where a folder should be: choose another hydra.run.dir",
}


def write_error(path: Path, exc: OSError) -> UserError:
    """An OSError met writing `path` as one line: the path, the system's reason, the remedy."""
    return UserError(f"cannot write {shown(str(path), 160, text=True)}: {why(exc)}")


def why(exc: OSError) -> str:
    """The system's reason for an OSError, and what to do about it."""
    remedy = _REMEDY.get(exc.errno)
    return (exc.strerror or str(exc)) + (f"; {remedy}" if remedy else "")


# The runs whose files this process writes: (run dir, its record). A process-wide list, like
# the working directory, because every writer of a run's files (the scenarios, the report, the
# plot workers forked from this process) comes through here without knowing which run it
# writes for; sim/run/rundir.py adds and removes a run around its task.
_RECORDS: list[tuple[str, Path]] = []


def start_record(run_dir: Path, record: Path) -> None:
    """Note in `record` (one name a line) each entry of `run_dir` written from now on."""
    _RECORDS.append((os.path.abspath(run_dir), record))


def stop_record(run_dir: Path) -> None:
    root = os.path.abspath(run_dir)
    _RECORDS[:] = [(r, rec) for r, rec in _RECORDS if r != root]


def note_written(path: Path) -> None:
    """Append the entry of the run dir that `path` is in (its first part below the run dir:
    `report.md`, `simulations`) to that run's record; hidden names (.hydra/) are not noted.
    Best effort: a record that cannot be appended to only leaves the file unnoted, and the
    run's settle() still finds it by comparing the dir with what it held when the run began."""
    where = os.path.abspath(path)
    for root, record in _RECORDS:
        if where.startswith(root + os.sep):
            name = where[len(root) + 1 :].split(os.sep, 1)[0]
            if not name.startswith("."):
                with contextlib.suppress(OSError), open(record, "a", encoding="utf-8") as f:
                    f.write(name + "\n")


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
        self.path, self.tmp = path, _temporary(path)
        self.writer = None
        self.num_rows = 0

    def write(self, frame: pd.DataFrame) -> None:
        table = pa.Table.from_pandas(frame, preserve_index=False)
        try:
            if self.writer is None:
                self.writer = pq.ParquetWriter(self.tmp, table.schema, **PARQUET_OPTIONS)
            self.writer.write_table(table)
        except OSError as exc:
            raise write_error(self.path, exc) from exc
        self.num_rows += len(frame)

    def close(self, empty: pd.DataFrame) -> Path:
        """Finish the file (`empty`, the columns with no rows, when nothing was written)."""
        if self.writer is None:
            self.write(empty)
        try:
            self.writer.close()
            os.chmod(self.tmp, 0o666 & ~_umask())
            os.replace(self.tmp, self.path)
        except OSError as exc:
            raise write_error(self.path, exc) from exc
        note_written(self.path)
        return self.path

    def abort(self) -> None:
        if self.writer is not None:
            with contextlib.suppress(OSError):  # (a full disk: the file goes anyway)
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
