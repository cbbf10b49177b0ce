"""What a run prints: a progress bar on long runs and vllm bench serve's result block."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from sim.run.rundir import recorded_outputs

SHOW_AFTER_S = 2.0  # runs shorter than this never show a bar
SHOW_LEFT_S = 5.0  # a time left shorter than this is not said: the run is all but done


class ProgressBar:
    """Requests ended out of total, appearing only once the run has taken a few seconds, with
    the time elapsed and an estimate of the time left. `clock`: monotonic seconds (None:
    time.monotonic; a test's fake clock, which the bar's estimate reads too)."""

    def __init__(self, enabled: bool, what: str = "requests", clock=None):
        self.enabled = enabled
        self.what = what
        self.clock = clock or time.monotonic
        self.started = self.clock()
        self.progress: Progress | None = None
        self.task = None
        self.calls = 0

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc) -> None:
        if self.progress is not None:
            self.progress.stop()

    def update(self, sim_s: float, ended: int, total: int) -> None:
        self.calls += 1
        if self.calls % 32 == 0:
            self._draw(sim_s, ended, total)

    def update_count(self, done: int, total: int) -> None:
        """Progress of `total` items (cases) by count, without a simulated clock."""
        self._draw(0.0, done, total)

    def _draw(self, sim_s: float, ended: int, total: int) -> None:
        if not self.enabled:
            return
        if self.progress is None:
            if self.clock() - self.started < SHOW_AFTER_S:
                return
            self.progress = Progress(
                TextColumn("simulating"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(
                    f"{self.what}, sim t={{task.fields[sim_s]:.1f}}s"
                    if self.what == "requests"
                    else self.what
                ),
                TimeElapsedColumn(),
                TextColumn("elapsed,"),
                TimeRemainingColumn(),  # from the recent rate ("-:--:--" until it is known)
                TextColumn("left"),
                console=Console(stderr=True),
                transient=True,
                get_time=self.clock,
            )
            self.task = self.progress.add_task("run", total=total, sim_s=sim_s)
            self.progress.start()
        self.progress.update(self.task, completed=ended, total=total, sim_s=sim_s)


UNKNOWN_TOTAL_EVERY = 10  # runs between two lines when the total is not known ahead


class ProgressLines(ProgressBar):
    """The same progress as plain lines ("simulated 12/40 runs, 35 s, about 82 s left"), one
    per tenth of the total, for a stderr that is not a terminal (a log file, CI, a pipe): no
    bar, no escapes. The time left is the time so far scaled by what remains (a run whose
    total is not known ahead says none)."""

    def __init__(
        self,
        what: str = "requests",
        stream: TextIO | None = None,
        parts: int = 10,
        clock=None,
    ):
        super().__init__(enabled=True, what=what, clock=clock)
        self.stream = stream if stream is not None else sys.stderr
        self.parts = parts
        self.shown = 0  # the count last printed

    def _draw(self, sim_s: float, ended: int, total: int | None) -> None:
        # a search that decides as it goes (total None): a line every UNKNOWN_TOTAL_EVERY
        every = UNKNOWN_TOTAL_EVERY if total is None else max(1, -(-total // self.parts))
        last = total is not None and ended >= total
        if ended == self.shown or (not last and ended - self.shown < every):
            return
        elapsed_s = self.clock() - self.started
        if elapsed_s < SHOW_AFTER_S:
            return
        self.shown = ended
        clock = f", sim t={sim_s:.1f} s" if self.what == "requests" else ""
        count = f"{ended:,}" if total is None else f"{ended:,}/{total:,}"
        line = f"simulated {count} {self.what}{clock}, {elapsed_s:.0f} s"
        if total is not None and 0 < ended < total:
            line += time_left(elapsed_s * (total - ended) / ended)
        print(line, file=self.stream, flush=True)


def time_left(seconds: float) -> str:
    """The time left as a line ends with it: ", about 40 s left" (minutes from two up);
    nothing under SHOW_LEFT_S."""
    if seconds < SHOW_LEFT_S:
        return ""
    if seconds < 120:
        return f", about {seconds:.0f} s left"
    return f", about {seconds / 60:.0f} min left"


def print_summary(s: dict, out_dir: Path) -> None:
    sim = s["sim"]
    rows = [
        ("Successful requests:", s["completed"]),
        ("Rejected requests:", s["failed"]),
        ("Benchmark duration (s):", f"{s['duration']:.2f}"),
        ("Total input tokens:", s["total_input_tokens"]),
        ("Total generated tokens:", s["total_output_tokens"]),
        ("Request throughput (req/s):", f"{s['request_throughput']:.2f}"),
    ]
    if "request_goodput" in s:  # vllm bench serve prints it after the throughput when set
        rows.append(("Request goodput (req/s):", f"{s['request_goodput']:.2f}"))
    rows += [
        ("Output token throughput (tok/s):", f"{s['output_throughput']:.2f}"),
        ("Total Token throughput (tok/s):", f"{s['total_token_throughput']:.2f}"),
    ]
    for metric, title in (
        ("ttft", "Time to First Token"),
        ("tpot", "Time per Output Token"),
        ("itl", "Inter-token Latency"),
    ):
        rows.append((f"---{title}---", None))
        for stat in ("mean", "median", "p99"):
            rows.append(
                (
                    f"{stat.capitalize() if stat != 'p99' else 'P99'} {metric.upper()} (ms):",
                    f"{s[f'{stat}_{metric}_ms']:.2f}",
                )
            )
    rows += [
        ("---Simulator---", None),
        ("Engine steps:", sim["steps"]),
        ("Preemptions:", sim["preemptions"]),
        ("Prefix-cache hit rate:", f"{sim['prefix_cache_hit_rate']:.1%}"),
        ("KV usage peak / mean:", f"{sim['kv_usage_peak']:.1%} / {sim['kv_usage_mean']:.1%}"),
        ("Wall time (s):", f"{sim['wall_time_s']:.2f}"),
    ]
    if d := s.get("disagg"):  # the pools and where TTFT went
        split = d["ttft_split_ms"]
        rows += [
            ("---Disaggregated prefill/decode---", None),
            ("Prefill / decode GPUs:", f"{d['prefill']['gpus']} / {d['decode']['gpus']}"),
            ("Prefill / decode busy:",
             f"{d['prefill']['busy_fraction']:.0%} / {d['decode']['busy_fraction']:.0%}"),
            ("Mean KV transfer (MiB / ms):",
             f"{d['transfer']['mean_bytes'] / 2**20:.1f} / {d['transfer']['mean_ms']:.2f}"),
            *((f"Mean TTFT part, {p.replace('_', ' ')} (ms):", f"{v['mean']:.2f}")
              for p, v in split.items()),
        ]  # fmt: skip
    if sim["stopped_at_s"] is not None:
        c = sim["conservation"]
        rows += [
            ("Stopped by the time limit at (s):", f"{sim['stopped_at_s']:.2f}"),
            ("  in flight, running:", c["in_flight_running"]),
            ("  in flight, waiting:", c["in_flight_waiting"]),
            ("  not yet sent:", c["not_sent"]),
        ]
    print(f"{' Serving Benchmark Result (simulated) ':=^50}")
    for label, value in rows:
        print(f"{label:=^50}" if value is None else f"{label:<40}{value:<10}")
    print("=" * 50)
    if warning := overload_warning(s):
        print(textwrap.fill(warning, width=100))
    print(outputs_line(out_dir))


def overload_warning(s: dict) -> str | None:
    """The warning when the offered load was well above what the run served
    (summary.json `sim.overload`, sim/run/summary.py), else None."""
    o = s["sim"].get("overload") or {}
    if not o.get("overloaded"):
        return None
    lo, hi = o["window_s"]
    return (
        f"warning: overloaded: this configuration served {o['served_rate']:.2f} req/s against "
        f"{o['offered_rate']:.2f} req/s offered. In the second half of the arrivals ({lo:.1f}-"
        f"{hi:.1f} s) {o['arrived_in_window']:,} requests arrived and "
        f"{o['finished_in_window']:,} finished; {o['in_flight_at_window_start']:,} -> "
        f"{o['in_flight_at_window_end']:,} in flight, and the median wait to be scheduled grew "
        f"from {o['median_wait_first_quarter_s']:.2f} s (first quarter of the arrivals) to "
        f"{o['median_wait_last_quarter_s']:.2f} s (last quarter), so latency grows with the "
        "run's length. Lower workload.rate or add GPUs (parallel.tp, parallel.dp); "
        "scenario=capacity finds the highest rate within latency SLOs."
    )


NOT_OUTPUTS = ("INCOMPLETE", "done.json")  # a run dir's marks (sim/run/outputs.py, sweep/table.py)


def outputs_line(out_dir: Path) -> str:
    """`Outputs: DIR/ (report.html, report.md, ...)`: what this run wrote, files and folders
    (`cases/`) by name, sorted: the names the run dir's record holds (sim/run/rundir.py: the
    files of an earlier run are gone by then, and a file no run wrote is not listed). A dir with
    no record (a scenario run outside the runner) lists what it holds, Hydra's .hydra/, other
    hidden or temporary files and logs left out. The run's own marks are never listed. Every
    scenario's console ends with it, so the line lists what was written, never what might
    have been."""
    if not out_dir.is_dir():
        return f"Outputs: {out_dir}/ (nothing written)"
    recorded = recorded_outputs(out_dir)
    if recorded is None:
        recorded = [
            p.name for p in out_dir.iterdir() if not p.name.startswith(".") and p.suffix != ".log"
        ]
    names = [
        f"{name}/" if (out_dir / name).is_dir() else name
        for name in sorted(recorded)
        if name not in NOT_OUTPUTS
    ]
    return f"Outputs: {out_dir}/ ({', '.join(names) or 'nothing written'})"


def print_brief(s: dict, out_dir: Path) -> None:
    """One line per run of a sweep (the sweep's report.md has the rest)."""
    line = (
        f"{out_dir}: {s['request_throughput']:.2f} req/s, TTFT p50/p99 "
        f"{s['median_ttft_ms']:,.0f}/{s['p99_ttft_ms']:,.0f} ms, TPOT p50/p99 "
        f"{s['median_tpot_ms']:.1f}/{s['p99_tpot_ms']:.1f} ms"
    )
    if "request_goodput" in s:
        line += f", goodput {s['request_goodput']:.2f} req/s ({s['slo_met_pct']:.0f}% within SLOs)"
    if overload_warning(s):
        o = s["sim"]["overload"]
        line += f"; overloaded: served {o['served_rate']:.2f} of {o['offered_rate']:.2f} req/s"
    print(line)
