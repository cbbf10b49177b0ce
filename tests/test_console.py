"""The progress bar appears on long runs, the console summary prints the bench block, warns of
overload and lists the files the run wrote."""

from __future__ import annotations

from dataclasses import replace

import sim.report.console as console
from sim.run.simulate import simulate
from sim.scenarios.simulate import Simulate
from tests.conftest import config


def test_progress_bar_shows_after_the_delay(monkeypatch):
    monkeypatch.setattr(console, "SHOW_AFTER_S", 0.0)
    with console.ProgressBar(enabled=True) as bar:
        for i in range(1, 100):
            bar.update(i * 0.1, i, 99)
        assert bar.progress is not None
        assert bar.progress.tasks[0].completed == 96  # updated every 32 calls


def test_disabled_bar_stays_silent():
    with console.ProgressBar(enabled=False) as bar:
        for i in range(100):
            bar.update(0.0, i, 100)
    assert bar.progress is None


def test_summary_block(tmp_path, capsys):
    result = simulate(config())
    console.print_summary(result.summary, tmp_path)
    out = capsys.readouterr().out
    assert "Request throughput (req/s):" in out and "Mean TTFT (ms):" in out


def test_overload_is_warned_with_the_served_rate(tmp_path, capsys):
    """2,048-token prompts at 60 req/s are far beyond one H100 (issue 25): the console says so
    with the rate served against the rate offered, and summary.json records it."""
    result = simulate(config({"num_requests": 300, "rate": 60.0, "input_len": 2048}))
    o = result.summary["sim"]["overload"]
    assert o["overloaded"] is True
    assert o["served_rate"] < 0.5 * o["offered_rate"]
    assert o["in_flight_at_window_end"] > o["in_flight_at_window_start"]
    console.print_summary(result.summary, tmp_path)
    out = capsys.readouterr().out
    assert "warning: overloaded" in out
    assert f"served {o['served_rate']:.2f} req/s against {o['offered_rate']:.2f} req/s" in out
    console.print_brief(result.summary, tmp_path)  # a sweep's line for the run
    assert f"overloaded: served {o['served_rate']:.2f} of" in capsys.readouterr().out


def test_no_overload_warning_on_an_ordinary_run(tmp_path, capsys):
    result = simulate(config({"num_requests": 300, "rate": 5.0}))
    o = result.summary["sim"]["overload"]
    assert o["overloaded"] is False
    assert abs(o["served_rate"] - o["offered_rate"]) < 0.2 * o["offered_rate"]
    console.print_summary(result.summary, tmp_path)
    assert "overloaded" not in capsys.readouterr().out


def test_overload_not_judged_where_it_cannot_be(tmp_path):
    """A closed loop's load follows its service; a burst arrives at once; 50 requests are
    too few to tell: each says why instead of a verdict."""
    closed = simulate(config({"num_requests": 100, "concurrency": 8, "kind": "closed_loop"}))
    burst = simulate(config({"num_requests": 100, "kind": "burst"}))
    few = simulate(config({"num_requests": 50, "rate": 60.0}))
    for result, why in ((closed, "closed loop"), (burst, "all at once"), (few, "fewer than")):
        o = result.summary["sim"]["overload"]
        assert o["overloaded"] is None and why in o["not_judged"]


def test_outputs_line_lists_what_the_run_dir_holds(tmp_path):
    """Every file written, folders with a slash; Hydra's .hydra/, temporary files, logs and
    the INCOMPLETE mark left out (issue 25: the line used to leave out report.html, PNGs)."""
    for name in ("summary.json", "report.html", "timeline.png", "trace.json", "INCOMPLETE",
                 ".summary.json.tmp", "sim.log"):  # fmt: skip
        (tmp_path / name).write_text("x")
    (tmp_path / ".hydra").mkdir()
    (tmp_path / "cases").mkdir()
    assert console.outputs_line(tmp_path) == (
        f"Outputs: {tmp_path}/ (cases/, report.html, summary.json, timeline.png, trace.json)"
    )


def test_a_run_prints_every_file_it_wrote(tmp_path, capsys):
    cfg = config(trace=True)
    cfg = replace(cfg, output=replace(cfg.output, report=True))
    scenario = Simulate()
    result = scenario.run(cfg, tmp_path, console.ProgressBar(enabled=False))
    scenario.write(result, tmp_path)
    scenario.brief(result, tmp_path, sweeping=False)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    for name in ("report.html", "report.md", "latency_cdf.png", "trace.json", "timeline.png"):
        assert name in line, (name, line)
    assert sorted(line.split("(", 1)[1].rstrip(")").split(", ")) == sorted(
        p.name for p in tmp_path.iterdir()
    )
