"""Many simulations at once: the one fan-out every scenario that runs more than one uses.

    results = fan_out(fn, calls, jobs, progress, keep)

runs fn(*args) for each args in `calls` and returns the results in the order of `calls`,
`jobs` at a time in joblib's worker processes (every core by default, never more than the
cores this process may run on: `say_if_capped` tells the user of a scenario's `jobs` key; one
job, or one call, runs in this process). Workers keep their pricing tables from one call to the next
(sim/cost/attention.py shares decode tables by fingerprint). `progress(done, total)` is called
as each call finishes. With `keep` (a folder and one key per call), each result is written
there as JSON the moment it arrives, and a call whose result is already kept is not run again:
an interrupted scenario resumes where it stopped. Results are the same whatever the order in
which calls finish: each simulation is deterministic in its own config.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from joblib import Parallel, delayed, parallel_config

from sim.run.outputs import write_json


@dataclass(frozen=True, slots=True)
class Kept:
    """Where finished results are kept, and the key (file name) of each call's."""

    folder: Path
    keys: Sequence[str]

    def path(self, i: int) -> Path:
        return self.folder / f"{self.keys[i]}.json"

    def load(self, i: int):
        """A kept result, or None when there is none (or it cannot be read: then it is rerun)."""
        try:
            return json.loads(self.path(i).read_text())
        except (OSError, json.JSONDecodeError):
            return None


def usable_cores() -> int:
    """The cores this process may run on: its affinity mask where the OS has one (a container
    or `taskset` limits it below os.cpu_count())."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def jobs_at_once(jobs: int | None) -> int:
    """How many simulations a `jobs` setting runs at once: every usable core by default, and
    never more (a worker process per job beyond them only costs memory and start-up)."""
    cores = usable_cores()
    return min(jobs or cores, cores)


def say_if_capped(jobs: int | None, key: str) -> None:
    """One line on stderr when a scenario's `jobs` setting (config key `key`) asks for more
    workers than jobs_at_once gives it."""
    if jobs is not None and jobs > (cores := usable_cores()):
        print(
            f"sim: {key}={jobs} is more than the {cores} cores this process may use: "
            f"{cores} simulations at a time",
            file=sys.stderr,
        )


def _indexed(fn: Callable, i: int, args: tuple):
    return i, fn(*args)


def _leave_interrupts_to_the_parent() -> None:
    """A worker's start: Ctrl-C reaches the terminal's whole process group, and a worker
    interrupted between tasks printed its own traceback under sim's one line. The parent
    handles it (marks the run INCOMPLETE, exits 130) and joblib stops the workers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def fan_out(
    fn: Callable,
    calls: Sequence[tuple],
    jobs: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    keep: Kept | None = None,
) -> list:
    """fn(*args) for every args in `calls`, in order (see the module's doc)."""
    total = len(calls)
    results: dict[int, object] = {}
    if keep is not None:
        for i in range(total):
            if (kept := keep.load(i)) is not None:
                results[i] = kept
        if results and progress:
            progress(len(results), total)
    todo = [i for i in range(total) if i not in results]

    def done(i: int, result) -> None:
        results[i] = result
        if keep is not None:
            write_json(keep.path(i), result)
        if progress:
            progress(len(results), total)

    n = min(jobs_at_once(jobs), max(len(todo), 1))
    if n == 1:
        for i in todo:
            done(i, fn(*calls[i]))
    else:
        with parallel_config(backend="loky", initializer=_leave_interrupts_to_the_parent):
            runner = Parallel(n_jobs=n, return_as="generator_unordered")
            for i, result in runner(delayed(_indexed)(fn, i, calls[i]) for i in todo):
                done(i, result)
    return [results[i] for i in range(total)]
