"""Progress says how long is left (issue 41, item 7): the terminal's bar has rich's time-left
column, a log's lines say "about N s left", both from the time so far and what remains, for
every task that reports progress through them (single runs by requests, fan-outs by runs)."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.progress import TimeRemainingColumn

import sim.report.console as console


class FakeClock:
    """Seconds that move only when a test says so."""

    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_lines_say_the_time_left_from_the_rate_so_far():
    clock, log = FakeClock(), io.StringIO()
    with console.ProgressLines(what="runs", stream=log, clock=clock) as lines:
        for done in range(1, 41):
            clock.now += 3.0  # 3 s a run
            lines.update_count(done, 40)
    printed = log.getvalue().splitlines()
    assert printed[0] == "simulated 4/40 runs, 12 s, about 108 s left"  # 12 s x 36 / 4
    assert printed[4] == "simulated 20/40 runs, 60 s, about 60 s left"
    assert printed[-1] == "simulated 40/40 runs, 120 s"  # done: nothing left to say
    assert printed[-2] == "simulated 36/40 runs, 108 s, about 12 s left"


def test_a_log_of_the_usual_clock_says_the_time_left(monkeypatch):
    """The same through the module's own clock (what a run uses: no clock given)."""
    clock, log = FakeClock(), io.StringIO()
    monkeypatch.setattr(console, "time", SimpleNamespace(monotonic=clock))
    with console.ProgressLines(what="runs", stream=log) as lines:
        for done in range(1, 5):
            clock.now += 3.0
            lines.update_count(done, 40)
    assert log.getvalue() == "simulated 4/40 runs, 12 s, about 108 s left\n"


def test_long_runs_count_minutes_and_the_last_seconds_are_not_said():
    clock, log = FakeClock(), io.StringIO()
    with console.ProgressLines(what="requests", stream=log, clock=clock) as lines:
        clock.now += 60.0
        lines._draw(5.0, 100, 1000)  # a single run's requests: 60 s for a tenth
        clock.now += 480.0
        lines._draw(50.0, 990, 1000)  # 540 s for 99%: about 5.5 s left
    first, last = log.getvalue().splitlines()
    assert first == "simulated 100/1,000 requests, sim t=5.0 s, 60 s, about 9 min left"
    assert last == "simulated 990/1,000 requests, sim t=50.0 s, 540 s, about 5 s left"
    log.seek(0), log.truncate(0)
    with console.ProgressLines(what="runs", stream=log, clock=clock, parts=100) as lines:
        clock.now += 100.0
        lines.update_count(99, 100)  # about 1 s left: not worth a word
    assert log.getvalue() == "simulated 99/100 runs, 100 s\n"


def test_an_unknown_total_gives_no_estimate():
    clock, log = FakeClock(), io.StringIO()
    with console.ProgressLines(what="runs", stream=log, clock=clock) as lines:
        for done in range(1, 21):
            clock.now += 10.0
            lines.update_count(done, None)
    assert "left" not in log.getvalue()
    assert log.getvalue().splitlines()[0] == "simulated 10 runs, 100 s"


def test_the_bar_estimates_the_time_left_on_its_own_clock():
    clock = FakeClock()
    with console.ProgressBar(enabled=True, what="runs", clock=clock) as bar:
        for done in range(1, 11):
            clock.now += 5.0  # 5 s a run
            bar.update_count(done, 40)
        assert any(isinstance(c, TimeRemainingColumn) for c in bar.progress.columns)
        task = bar.progress.tasks[0]
        assert task.completed == 10
        assert task.time_remaining == 150.0  # 30 runs left at 0.2 run/s
        assert str(TimeRemainingColumn().render(task)) == "0:02:30"


def test_a_single_runs_bar_also_estimates():
    """Simulate's bar counts requests (update, every 32nd call) and shows the same column."""
    clock = FakeClock()
    with console.ProgressBar(enabled=True, clock=clock) as bar:
        for i in range(1, 321):
            clock.now += 0.1
            bar.update(i * 0.5, i, 640)
        task = bar.progress.tasks[0]
        assert task.completed == 320
        assert task.time_remaining == 32.0  # 320 requests left at 10 a second
