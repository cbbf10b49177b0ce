"""A single run's plots drawn in other processes, beside the run rather than after it.

matplotlib takes half a second to import and a few tenths of a second per figure, on one core.
A single run with its report (`python -m sim`, output.report=true) starts these workers before
it simulates: each imports the plotting modules on a spare core while the simulation runs,
then draws one figure while this process writes the run's other files. Every figure is drawn
by the same function from the same data as in this process, so its PNG has the same bytes.

    workers = PlotWorkers.start(("sim.report.run_plots",))  # None on one core: draw here
    pending = workers.submit("sim.report.run_plots", "plot_latency_cdfs", requests, path)
    pending.result()                       # the function's return value, or its exception

A worker that cannot take a job (it died, its pipe broke) is not waited for: the figure is
drawn in this process instead. Workers are daemons: they end with this process, or at close().
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import queue
from importlib import import_module
from typing import Any

POLL_S = 0.5  # how often a wait checks that the worker drawing the figure is still alive
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
        """`modules`: what each worker imports before its first job (while the run simulates)."""
        ctx = mp.get_context("fork")
        self._outcomes = ctx.Queue()
        self._jobs = [ctx.Queue() for _ in range(count)]
        self._procs = [
            ctx.Process(target=_serve, args=(jobs, self._outcomes, modules), daemon=True)
            for jobs in self._jobs
        ]
        for proc in self._procs:
            proc.start()
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
            if proc.is_alive():
                jobs.put(None)  # the worker's signal to end
        for jobs, proc in zip(self._jobs, self._procs, strict=True):
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
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


def _serve(jobs, outcomes, modules: tuple[str, ...]) -> None:
    """A worker: import the plotting modules, then draw each job until told to end."""
    try:
        os.nice(5)  # the run this process was forked from comes first
        for module in modules:
            import_module(module)
        # what the imports built lives as long as the worker: out of the collector's reach,
        # whose full collections while a figure is drawn then visit only the figure's objects
        # (a tenth of the drawing time otherwise); the young garbage collected first
        gc.collect(1)
        gc.freeze()
        while (item := jobs.get()) is not None:
            number, job = item
            try:
                outcomes.put((number, True, _call(*job)))
            except Exception as exc:  # the parent raises it from result()
                outcomes.put((number, False, exc))
    except KeyboardInterrupt:  # Ctrl-C reached the whole process group: the parent handles it
        pass
    finally:
        outcomes.close()
        outcomes.join_thread()  # every outcome delivered before the worker exits
