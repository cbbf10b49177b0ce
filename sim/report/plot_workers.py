"""A single run's plots drawn in other processes, beside the run rather than after it.

matplotlib takes a third of a second to import and a few tenths of a second per figure, on one
core. A single run with its report (`python -m sim`, output.report=true) starts these workers
before it simulates: the first imports the plotting modules on a spare core while the
simulation runs and then forks the others (so the imports are paid once, not once a worker on
a shared core), and each draws a figure while this process writes the run's other files.
Every figure is drawn by the same function from the same data as in this process, so its PNG
has the same bytes.

    workers = PlotWorkers.start(("sim.report.run_plots",))  # None on one core: draw here
    pending = workers.submit("sim.report.run_plots", "plot_latency_cdfs", requests, path)
    pending.result()                       # the function's return value, or its exception

A worker that cannot take a job (it died, its pipe broke) is not waited for: the figure is
drawn in this process instead. Workers end at close(), and with the process they were forked
from however it ends: multiprocessing's daemon flag ends them only when that process exits
normally, and a run killed with SIGTERM or SIGKILL left them blocked on their queue for ever
(two processes, ~210 MB). So each asks the kernel for SIGKILL when its parent ends
(prctl(PR_SET_PDEATHSIG) on Linux: immediate, even in the middle of a figure or blocked on a
full pipe, and nothing to go wrong in the worker), then checks that the parent has not ended
already; where there is no prctl, a worker waiting for a job looks every POLL_S seconds whether
its parent is still the one it was forked from (os.getppid). A figure cut short leaves only its
temporary file, which the next run in the run dir removes (sim/run/rundir.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import multiprocessing as mp
import os
import queue
import signal
import sys
import time
from importlib import import_module
from typing import Any, NoReturn

POLL_S = 0.5  # how often a wait checks that the worker drawing the figure is still alive (and
# a worker waiting for a job, where there is no prctl, that its parent is)
STALL_S = 300.0  # a worker silent this long is stopped and its figure drawn here (a figure
# of a million-request run takes a few seconds; a worker stuck after fork would never answer)


class Pending:
    """One figure being drawn: result() waits for it (or draws it here, see PlotWorkers)."""

    def __init__(self, workers: PlotWorkers | None, number: int, worker: int, job: tuple):
        self._workers, self._number, self._worker, self._job = workers, number, worker, job
        self._done = self._workers is None
        self._value: Any = None
        self._error: BaseException | None = None

    def result(self) -> Any:
        if not self._done:
            self._done = True
            outcome = self._workers.outcome(self._number, self._worker)
            if outcome is None:  # the worker is gone: draw it here
                outcome = (True, _call(*self._job))
            ok, value = outcome
            if ok:
                self._value = value
            else:
                self._error = value
        if self._error is not None:
            raise self._error
        return self._value


def done(value: Any) -> Pending:
    """A figure drawn already (without workers): result() gives `value`."""
    pending = Pending(None, -1, -1, ())
    pending._value = value
    return pending


class PlotWorkers:
    """`count` forked processes, each drawing the figures sent to it, one job at a time. Jobs
    go out through a queue per worker (sent by its feeder thread: submit does not wait for a
    busy worker), outcomes come back through one queue, each with its job's number."""

    def __init__(self, count: int, modules: tuple[str, ...] = ()):
        """`modules`: what the workers have imported before their first job (the first
        imports them while the run simulates, then forks the others)."""
        ctx = mp.get_context("fork")
        self._pid = os.getpid()
        self._outcomes = ctx.Queue()
        self._jobs = [ctx.Queue() for _ in range(count)]
        pids = [ctx.RawValue("q", 0) for _ in range(count - 1)]  # the siblings', once forked
        siblings = list(zip(self._jobs[1:], pids, strict=True))
        first = ctx.Process(
            target=_serve,
            args=(self._jobs[0], self._outcomes, modules, siblings, self._pid),
            daemon=True,
        )
        first.start()
        self._procs: list[Any] = [first, *(_Sibling(pid, first) for pid in pids)]
        self._arrived: dict[int, tuple[bool, Any]] = {}
        self._submitted = 0

    @classmethod
    def start(cls, modules: tuple[str, ...], count: int = 2) -> PlotWorkers | None:
        """`count` workers, or None where they cannot help: one core, no fork, or in a worker
        process already (a sweep point's: its siblings use the cores; a daemonic one may not
        have children). The figures are drawn in this process then."""
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        if (
            (cores or 1) < 2
            or "fork" not in mp.get_all_start_methods()
            or mp.current_process().daemon
            or mp.parent_process() is not None
        ):
            return None
        return cls(count, modules)

    def submit(self, module: str, name: str, *args) -> Pending:
        """Draw module.name(*args) in the next worker (round robin)."""
        job = (module, name, args)
        number = self._submitted
        worker = number % len(self._jobs)
        self._submitted += 1
        self._jobs[worker].put((number, job))
        return Pending(self, number, worker, job)

    def outcome(self, number: int, worker: int) -> tuple[bool, Any] | None:
        """Job `number`'s (ok, value), waited for; None if its worker died first, or said
        nothing for STALL_S (then it is stopped)."""
        waited = 0.0
        while number not in self._arrived:
            try:
                got, ok, value = self._outcomes.get(timeout=POLL_S)
            except queue.Empty:
                waited += POLL_S
                proc = self._procs[worker]
                if waited >= STALL_S and proc.is_alive():
                    proc.kill()
                    proc.join()
                if not proc.is_alive():
                    return None
                continue
            waited = 0.0
            self._arrived[got] = (ok, value)
        return self._arrived.pop(number)

    def close(self) -> None:
        for jobs, proc in zip(self._jobs, self._procs, strict=True):
            if proc.is_alive():  # (a sibling not forked yet reads it once it is)
                jobs.put(None)  # the worker's signal to end
        # the siblings first: they mostly end while the first worker, which reaps them, lives
        for jobs, proc in list(zip(self._jobs, self._procs, strict=True))[::-1]:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=1)  # (a signal is not an end: let it take effect)
            jobs.cancel_join_thread()  # nothing left to deliver to a worker that has ended
            jobs.close()
        self._outcomes.close()
        self._jobs, self._procs = [], []

    def __enter__(self) -> PlotWorkers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _call(module: str, name: str, args: tuple) -> Any:
    return getattr(import_module(module), name)(*args)


class _Sibling:
    """A worker the first one forks once its imports are done (_serve), seen from the parent
    by its pid as a multiprocessing.Process is (0 until forked: until then it lives and dies
    with the first worker, which would fork it)."""

    def __init__(self, pid, first: mp.Process):
        self._pid, self._first = pid, first

    def is_alive(self) -> bool:
        pid = self._pid.value
        if not pid:
            return self._first.is_alive()
        try:  # (the first worker ignores SIGCHLD: a sibling that ends while it lives is gone)
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        try:  # one that outlived it waits for init to reap it: a zombie, ended
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().rpartition(")")[2].split()[0] != "Z"
        except OSError:  # (no /proc)
            return True

    def kill(self) -> None:
        if not self._pid.value:  # not forked yet: the first worker, which would fork it
            self._first.kill()
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid.value, signal.SIGKILL)

    terminate = kill

    def join(self, timeout: float | None = None) -> None:
        waited = 0.0  # (not forked yet: alive while the first worker is, which will fork it)
        while self.is_alive() and (timeout is None or waited < timeout):
            time.sleep(0.01)
            waited += 0.01


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def end_with_parent(parent: int) -> bool:
    """Have this (forked) process killed when its parent ends: True where the kernel will do
    it (Linux), False where the worker must look for itself (_draw). A parent that ended
    before this was asked ends this process here."""
    asked = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            asked = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):  # no C library to call: look for itself
            asked = False
    if os.getppid() != parent:  # it ended between the fork and the prctl
        os._exit(0)
    return asked


def _serve(jobs, outcomes, modules: tuple[str, ...], siblings: list, parent: int) -> None:
    """The first worker: import the plotting modules, fork the siblings (each with its job
    queue and a place for its pid), then draw each job until told to end."""
    watch = not end_with_parent(parent)
    try:
        os.nice(5)  # the run this process was forked from comes first
        for module in modules:
            import_module(module)
        # what the imports built lives as long as the worker: out of the collector's reach,
        # whose full collections while a figure is drawn then visit only the figure's objects
        # (a tenth of the drawing time otherwise); the young garbage collected first
        gc.collect(1)
        gc.freeze()
        if siblings:  # (no queue has a feeder thread yet: none was written to here)
            signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the siblings reaped as they end
        me = os.getpid()
        for sibling_jobs, pid in siblings:
            child = os.fork()
            if not child:
                _sibling(sibling_jobs, outcomes, me)
            pid.value = child
        _draw(jobs, outcomes, parent if watch else None)
    except KeyboardInterrupt:  # Ctrl-C reached the whole process group: the parent handles it
        pass
    finally:
        _deliver(outcomes, parent)


def _sibling(jobs, outcomes, parent: int) -> NoReturn:
    """A forked sibling: draw its jobs, deliver its outcomes, end (os._exit: what follows the
    fork in the first worker is not this process's)."""
    code = 0
    try:
        watch = not end_with_parent(parent)
        _draw(jobs, outcomes, parent if watch else None)
    except KeyboardInterrupt:
        pass
    except BaseException:
        code = 1
    finally:
        _deliver(outcomes, parent)
        os._exit(code)


def _deliver(outcomes, parent: int) -> None:
    """Every outcome delivered before the worker exits; none waited for once the parent has
    ended (nothing reads them, and a full pipe would never drain)."""
    outcomes.close()
    if os.getppid() == parent:
        outcomes.join_thread()
    else:
        outcomes.cancel_join_thread()


def _draw(jobs, outcomes, parent: int | None = None) -> None:
    """Draw each job from `jobs` until told to end (None), its outcome sent to `outcomes`; with
    `parent`, end too once the process forked from is no longer the parent."""
    while True:
        try:
            item = jobs.get(timeout=POLL_S) if parent is not None else jobs.get()
        except queue.Empty:
            if os.getppid() != parent:
                return
            continue
        if item is None:
            return
        number, job = item
        try:
            outcomes.put((number, True, _call(*job)))
        except Exception as exc:  # the parent raises it from result()
            outcomes.put((number, False, exc))
