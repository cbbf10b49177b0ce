"""A run dir holds one run: the lock a run holds on it, the record of what it wrote, and the
files of an earlier run cleared away.

    run = RunDir.claim(out_dir, "python -m sim seed=1 ...")  # UserError if another run has it
    run.begin()          # an earlier run's temporary files go; what this run writes is recorded
    ...                  # the task writes its files (sim/run/outputs.py notes each one)
    names, foreign = run.settle(keep)   # the earlier run's files this run did not write go
    run.release()

The lock is `RUN_DIR/.hydra/run.lock`, held with flock(2) while a run runs: the kernel lets go
of it when the process ends, however it ends (SIGKILL included), so a killed run never leaves a
dir locked. It holds the pid and command of the run that has it, which a refused run names.
The file is removed as the lock is let go (a run that opened it just before locks a file no
longer there, sees so and opens the new one). A second claim in the same process (sim/__main__
claims a single run's dir before Hydra writes its .hydra/ files, the runner again) shares it.

The record is `RUN_DIR/.hydra/outputs.txt`, one name a line: every file or folder a run wrote
(each noted as it is renamed into place, so a killed run's files are on it too), and, once a
run has written all its outputs, exactly that run's (settle). The next run into the dir
removes what an earlier run recorded and it did not write itself, once its own outputs are
written: until then the earlier files stay beside INCOMPLETE, which says so, and a task that
reads what it ran before (upgrade_diff's summary.json of the same study) finds it. What a task
keeps on purpose to resume (`keep`: upgrade_diff's simulations/) stays. A file no run recorded
(the user's own, or one written before runs were recorded) is never removed, nor listed as an
output.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import time
from pathlib import Path
from typing import ClassVar

from sim.errors import UserError, shown
from sim.run.outputs import (
    INCOMPLETE,
    is_temporary,
    start_record,
    stop_record,
    why,
    write_text,
)

LOCK = ".hydra/run.lock"
RECORD = ".hydra/outputs.txt"
UNLOCKABLE = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}  # no flock there: a
# file system without locks runs unlocked rather than not at all


class DirLock:
    """An exclusive flock on the file `folder/name` (made, with `folder`), held by this process
    until release(); `key` names the folder in a refusal (hydra.run.dir, hydra.sweep.dir)."""

    def __init__(self, folder: Path, name: str, what: str, key: str):
        self.path = folder / name
        self.fd: int | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = _lock(self.path, what)
        except BlockingIOError:
            raise UserError(_in_use(folder, self.path, key)) from None
        except OSError as exc:
            raise _unusable(folder, exc, key) from exc

    def release(self) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(OSError):  # removed while locked: see the module's note
            self.path.unlink(missing_ok=True)
        os.close(self.fd)
        self.fd = None


def _lock(path: Path, what: str) -> int | None:
    """The locked file's descriptor, with this process's pid and `what` in it; BlockingIOError
    when another process holds it; None where the file system has no locks."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in UNLOCKABLE:
                return None
            raise
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            try:
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()} {what}\n".encode())
            except OSError:
                os.close(fd)
                raise
            return fd
        os.close(fd)  # its last holder removed it as it let go: lock the one there now


def _in_use(folder: Path, path: Path, key: str) -> str:
    """The refusal: which process holds the lock at `path`, and what it runs."""
    text = ""
    for _ in range(20):  # a run that has just locked it writes its pid a moment later
        with contextlib.suppress(OSError, UnicodeDecodeError):
            text = path.read_text(encoding="utf-8").strip()
        if text:
            break
        time.sleep(0.025)
    pid, _, what = text.partition(" ")
    holder = f"pid {pid} ({shown(what, 200, text=True)})" if pid.isdigit() else "another process"
    if pid.isdigit() and not _alive(int(pid)):
        holder += ", which has ended: a process it started still holds it"
    return (
        f"{key}={folder} is in use by another run: {holder}; wait for it to end, or choose "
        f"another {key}"
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def _unusable(folder: Path, exc: OSError, key: str) -> UserError:
    """A folder that cannot hold a run (a file in the way, read-only, full, a name too long)."""
    reason = why(exc).replace("hydra.run.dir", key)
    return UserError(f"{key}={shown(str(folder), 160, text=True)} cannot hold a run: {reason}")


class RunDir:
    """This process's claim on one run dir (see the module's note)."""

    _held: ClassVar[
        dict[str, RunDir]
    ] = {}  # by absolute path: a second claim in this process shares it

    def __init__(self, path: Path, lock: DirLock):
        self.path = path
        self.lock = lock
        self.claims = 1
        self.earlier: set[str] = set()
        self.offset = 0

    @classmethod
    def claim(cls, path: Path, what: str, key: str = "hydra.run.dir") -> RunDir:
        """Lock `path` for this run (made if it is not there): a UserError, one line naming
        the process that has it, if another has; or why the folder cannot hold a run."""
        root = os.path.abspath(path)
        if (held := cls._held.get(root)) is not None:
            held.claims += 1
            return held
        run = cls(Path(root), DirLock(Path(root), LOCK, what, key))
        cls._held[root] = run
        return run

    def release(self) -> None:
        self.claims -= 1
        if self.claims == 0:
            stop_record(self.path)
            self.lock.release()
            RunDir._held.pop(str(self.path), None)

    def begin(self) -> None:
        """Remove the temporary files a killed run left (no other run writes here: the dir is
        locked), read what earlier runs recorded, and record what this run writes from now on."""
        record = self.path / RECORD
        try:
            data = record.read_bytes()
        except OSError:
            data = b""
        self.offset = len(data)
        lines = data.decode("utf-8", errors="replace").splitlines()
        self.earlier = {n for n in lines if _plain_name(n)}
        remove_temporary_files(self.path, self.earlier)
        start_record(self.path, record)

    def settle(self, keep: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
        """Once every output is written: remove what an earlier run recorded and this run did
        not write nor `keep`, and make the record this run's. Returns (this run's outputs,
        the names no run recorded, left as they are)."""
        record = self.path / RECORD
        try:
            with record.open("rb") as f:
                f.seek(self.offset)
                lines = f.read().decode("utf-8", errors="replace").splitlines()
        except OSError:
            lines = []
        noted = {n for n in lines if _plain_name(n)}
        now = _names(self.path) - {INCOMPLETE}  # (the runner's mark, gone once the run ends)
        ours = (noted | set(keep)) & now
        for name in sorted((self.earlier & now) - ours):
            _remove(self.path / name)
        write_text(record, "".join(f"{n}\n" for n in sorted(ours)))
        self.offset = record.stat().st_size  # what is written after this is this run's too
        foreign = sorted(now - ours - self.earlier)
        return sorted(ours), foreign


def recorded_outputs(run_dir: Path) -> list[str] | None:
    """The names a run dir's record holds that are there now, sorted; None without a record
    (a dir no run of this kind wrote: sim/report/console.py lists what it holds then)."""
    try:
        lines = (run_dir / RECORD).read_bytes().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    names = {n for n in lines if _plain_name(n)}
    return sorted(n for n in names if os.path.lexists(run_dir / n))


def remove_temporary_files(run_dir: Path, folders: set[str]) -> None:
    """atomic_write's temporary files in `run_dir`, its .hydra/ and the `folders` of it an
    earlier run recorded (and theirs, all the way down)."""
    tops = [run_dir, run_dir / ".hydra", *(run_dir / n for n in sorted(folders))]
    for top in tops:
        if not top.is_dir() or top.is_symlink():
            continue
        for folder, dirs, files in os.walk(top):
            if Path(folder) == run_dir:
                dirs.clear()  # only the folders named above: the run dir may hold others
            for name in files:
                if is_temporary(name):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(folder, name))


def _names(run_dir: Path) -> set[str]:
    """The run dir's entries that a run writes as outputs (see _plain_name)."""
    try:
        return {n for n in os.listdir(run_dir) if _plain_name(n)}
    except OSError:
        return set()


def _plain_name(name: str) -> bool:
    """An entry a run writes as an output: not hidden (.hydra/, temporary files), not a log
    (Hydra's, when job logging goes to a file), not a path."""
    return bool(name) and not name.startswith(".") and "/" not in name and name[-4:] != ".log"


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()
