"""What a run prints: a progress bar on long runs and vllm bench serve's result block."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

SHOW_AFTER_S = 2.0  # runs shorter than this never show a bar


class ProgressBar:
    """Requests ended out of total, appearing only once the run has taken a few seconds."""

    def __init__(self, enabled: bool, what: str = "requests"):
        self.enabled = enabled
        self.what = what
        self.started = time.monotonic()
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
            if time.monotonic() - self.started < SHOW_AFTER_S:
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
                console=Console(stderr=True),
                transient=True,
            )
            self.task = self.progress.add_task("run", total=total, sim_s=sim_s)
            self.progress.start()
        self.progress.update(self.task, completed=ended, total=total, sim_s=sim_s)


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
    print(f"Outputs: {out_dir}/ (summary.json, requests.parquet, steps.parquet, report.md)")


def print_brief(s: dict, out_dir: Path) -> None:
    """One line per run of a sweep (the sweep's report.md has the rest)."""
    line = (
        f"{out_dir}: {s['request_throughput']:.2f} req/s, TTFT p50/p99 "
        f"{s['median_ttft_ms']:,.0f}/{s['p99_ttft_ms']:,.0f} ms, TPOT p50/p99 "
        f"{s['median_tpot_ms']:.1f}/{s['p99_tpot_ms']:.1f} ms"
    )
    if "request_goodput" in s:
        line += f", goodput {s['request_goodput']:.2f} req/s ({s['slo_met_pct']:.0f}% within SLOs)"
    print(line)
