"""The progress bar appears on long runs and the console summary prints the bench block."""

from __future__ import annotations

import sim.report.console as console
from sim.run.simulate import simulate
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
