"""task=simulate (the default, and every point of a sweep): one simulation and its run dir.

summary.json      vllm bench serve's fields, `sim` (the simulator's own figures), the
                  config, the resolved engine settings, the memory plan and the physics
                  audit (sim/run/audit.py; the runner warns of a violation in one line)
requests.parquet  one row per request; steps.parquet one row per engine step
report.md / .html and its plots (output.report=true), phases.parquet, trace.json and
                  timeline.png / .svg (trace=true)
"""

from __future__ import annotations

from pathlib import Path

from sim.config import SimConfig
from sim.report.console import ProgressBar, print_brief, print_summary
from sim.report.plot_workers import PlotWorkers
from sim.report.run_report import PLOTS, draw_plots, write_report
from sim.run.disagg import Pools
from sim.run.disagg import check as check_disagg
from sim.run.outputs import write_json, write_parquet, write_parquet_chunks
from sim.run.setup import Setup
from sim.run.simulate import simulate
from sim.run.summary import RunResult


class Simulate:
    """The report's plotting modules (matplotlib) are imported only where a report is drawn,
    and a single run's three figures are drawn by sim.report.plot_workers beside the run."""

    counts = "requests"

    def __init__(self) -> None:
        self._plots: PlotWorkers | None = None

    def check(self, cfg: SimConfig) -> None:
        if cfg.disagg.enabled:
            Pools.from_config(cfg)
            check_disagg(cfg)
        else:
            Setup.from_config(cfg)

    def run(self, cfg: SimConfig, out_dir: Path, bar: ProgressBar) -> RunResult:
        if cfg.output.report is True and not cfg.disagg.enabled:  # workers import matplotlib
            self._plots = PlotWorkers.start((PLOTS,))  # while this process simulates
        try:
            return simulate(cfg, progress=bar.update, run_dir=out_dir)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._plots is not None:
            self._plots.close()
            self._plots = None

    def write(self, result: RunResult, out_dir: Path) -> None:
        try:
            self._write(result, out_dir)
        finally:
            self.close()

    def _write(self, result: RunResult, out_dir: Path) -> None:
        cfg = result.setup.config
        report = cfg.output.report is not False  # None (no runner to decide): a single run's
        plots = None
        if report and "disagg" not in result.summary:
            plots = draw_plots(result, out_dir, self._plots)  # first: drawn beside the rest
        if result.streamed is None:
            write_parquet(out_dir / "requests.parquet", result.requests)
            write_parquet(out_dir / "steps.parquet", result.steps)
        else:  # a long run: its steps were written as it went; its requests a row group at a time
            write_parquet_chunks(out_dir / "requests.parquet", result.requests)
        if result.phases is not None:
            write_trace_files(result, out_dir)
        if report and "disagg" in result.summary:
            from sim.report.disagg_run import write_run_report  # matplotlib: only for a report

            write_run_report(result, out_dir)
        elif report:
            write_report(result, out_dir, plots)
        write_json(out_dir / "summary.json", result.summary)

    def brief(self, result: RunResult, out_dir: Path, sweeping: bool) -> None:
        if sweeping:
            print_brief(result.summary, out_dir)
        else:
            print_summary(result.summary, out_dir)


def write_trace_files(result: RunResult, out_dir: Path) -> None:
    """trace=true: trace.json (Perfetto), timeline.png / .svg and phases.parquet."""
    from sim.report.timeline import plot_timeline, trace_events, write_trace  # matplotlib

    s = result.summary
    write_parquet(out_dir / "phases.parquet", result.phases)
    about = {"backend": s["backend"], "model": s["model_id"], "workload": s["sim"]["workload"]}
    write_trace(out_dir / "trace.json", trace_events(result.steps, result.phases), about)
    label = f"{s['model_id']}, {s['backend'].removeprefix('sim:')}"
    runs = [(label, result.steps, result.phases, result.setup.memory.num_blocks)]
    plot_timeline(runs, out_dir / "timeline.png")
