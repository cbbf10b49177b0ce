"""A single run's figures drawn in worker processes (sim/report/plot_workers.py): the same
bytes as drawn here, a worker's error raised here, a dead worker's figure drawn here."""

from __future__ import annotations

import gc
import os
from dataclasses import replace

import pytest

from sim.config import SimConfig
from sim.report import plot_workers
from sim.report.plot_workers import PlotWorkers
from sim.report.run_report import draw_plots
from sim.run.simulate import simulate

FIGURES = ("latency_cdf.png", "throughput_kv.png", "batch_composition.png")


@pytest.fixture(scope="module")
def result():
    cfg = SimConfig.from_mapping({"workload": {"num_requests": 80}})
    return simulate(replace(cfg, output=replace(cfg.output, report=False)))


def test_figures_drawn_by_workers_have_the_bytes_of_figures_drawn_here(result, tmp_path):
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir(), there.mkdir()
    for pending in draw_plots(result, here):
        pending.result()
    with PlotWorkers(2, ("sim.report.run_plots",)) as workers:
        names = [pending.result() for pending in draw_plots(result, there, workers)]
    assert sorted(names) == sorted(FIGURES)
    for name in FIGURES:
        assert (here / name).read_bytes() == (there / name).read_bytes(), name


def test_the_first_worker_imports_once_and_forks_the_others(tmp_path, monkeypatch):
    """The plotting modules are imported once, by the first worker, which then forks the
    others: each worker draws in a process of its own, and close() ends every one."""
    log = tmp_path / "imports.log"
    (tmp_path / "counted_import.py").write_text(
        f"import os\nwith open({str(log)!r}, 'a') as f:\n    f.write(f'{{os.getpid()}}\\n')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with PlotWorkers(3, ("counted_import",)) as workers:
        pids = [workers.submit("os", "getpid").result() for _ in range(3)]  # one each
        procs = list(workers._procs)
    assert len(set(pids)) == 3 and os.getpid() not in pids
    assert log.read_text().split() == [str(pids[0])]  # once, in the first worker
    assert not any(proc.is_alive() for proc in procs)


def test_workers_closed_before_their_imports_end_do_not_wait_out_the_join(tmp_path, monkeypatch):
    """close() right after the start (a run that failed at once): the siblings not forked
    yet end as soon as they are, no join waits out its 5 s."""
    import time

    (tmp_path / "slow_import.py").write_text("import time\ntime.sleep(0.5)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    started = time.perf_counter()
    workers = PlotWorkers(3, ("slow_import",))
    procs = list(workers._procs)
    workers.close()
    assert time.perf_counter() - started < 4.0  # (one join's timeout is 5 s)
    assert not any(proc.is_alive() for proc in procs)


def test_a_workers_error_is_raised_here():
    with PlotWorkers(1) as workers:
        pending = workers.submit("math", "sqrt", "not a number")
        ok = workers.submit("math", "hypot", 3.0, 4.0)
        with pytest.raises(TypeError):
            pending.result()
        assert ok.result() == 5.0  # the worker goes on after a failed figure


def test_a_worker_keeps_its_imports_out_of_the_collectors_reach():
    """After its imports a worker freezes what exists (gc.freeze): its collections while it
    draws visit the figure's objects only."""
    before = gc.get_freeze_count()  # what this process froze, the worker's from its fork
    with PlotWorkers(1, ("sim.report.run_plots",)) as workers:
        assert workers.submit("gc", "get_freeze_count").result() > before


def test_a_dead_workers_figure_is_drawn_here(monkeypatch):
    monkeypatch.setattr(plot_workers, "POLL_S", 0.05)
    with PlotWorkers(2) as workers:
        workers._procs[0].kill()
        workers._procs[0].join()
        first = workers.submit("math", "hypot", 6.0, 8.0)  # to the dead worker
        second = workers.submit("math", "hypot", 5.0, 12.0)
        assert first.result() == 10.0
        assert second.result() == 13.0


def test_no_workers_on_one_core(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert PlotWorkers.start(("math",)) is None


def _start_in_child(conn):
    conn.send(PlotWorkers.start(("math",)) is None)


def test_no_workers_inside_a_worker_process():
    """A sweep point runs in a pool's worker (joblib's, daemonic): no plot workers there."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    here, there = ctx.Pipe()
    child = ctx.Process(target=_start_in_child, args=(there,), daemon=True)
    child.start()
    assert here.recv() is True
    child.join()


def test_a_stalled_workers_figure_is_drawn_here(monkeypatch):
    """A worker that never answers (stuck after fork, say) is stopped and the figure drawn here."""
    monkeypatch.setattr(plot_workers, "POLL_S", 0.05)
    monkeypatch.setattr(plot_workers, "STALL_S", 0.3)
    with PlotWorkers(1) as workers:
        workers.submit("time", "sleep", 60)  # holds the worker
        behind = workers.submit("math", "hypot", 3.0, 4.0)
        assert behind.result() == 5.0  # the worker stopped, the figure drawn here
        assert not workers._procs[0].is_alive()
