"""The headline metric: the one the verdict, the waterfall and the minimal set explain, and the
rule that chose it. upgrade.headline=auto takes, in order:

    measured    the metric that regressed in the measured before/after (a throughput first)
    throughput  output or request throughput when it moved beyond the noise
    largest     the metric with the largest adverse change, else the largest change

and a metric the user names (upgrade.headline=METRIC) always leads (rule "named").
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.scenarios.upgrade_diff.outcomes import METRICS, adverse

NAMED, MEASURED, THROUGHPUT, LARGEST = "named", "measured", "throughput", "largest"
THROUGHPUTS = ("output_throughput", "request_throughput")  # ties: output throughput first
FLOOR_PCT = 1.0  # a change smaller than this never counts as moved (one seed has no interval)


@dataclass(frozen=True, slots=True)
class Headline:
    metric: str
    rule: str  # NAMED | MEASURED | THROUGHPUT | LARGEST


def within_noise(value: float, half_width: float) -> bool:
    """Whether a figure's 95% interval (value ± half_width) includes zero."""
    return abs(value) <= half_width


def choose_headline(
    asked: str,
    change_pct: dict[str, float],
    change_ci_pct: dict[str, float],
    measured_pct: dict[str, float] | None = None,
) -> Headline:
    """The metric upgrade.headline=`asked` explains (auto: the rules above) and its rule."""
    if asked != "auto":
        return Headline(asked, NAMED)
    if measured_pct and (m := regressed(measured_pct, FLOOR_PCT)):
        return Headline(m, MEASURED)
    moved = [
        m
        for m in THROUGHPUTS
        if not within_noise(change_pct[m], change_ci_pct[m]) and abs(change_pct[m]) >= FLOOR_PCT
    ]
    if moved:
        fell = [m for m in moved if change_pct[m] < 0]
        return Headline((fell or moved)[0], THROUGHPUT)
    return Headline(worst_metric(change_pct), LARGEST)


def regressed(change_pct: dict[str, float], floor_pct: float = 0.0) -> str | None:
    """The metric that got worse (a throughput that fell first, then the latency that rose
    most) by more than floor_pct; None when none did."""
    worse = {m: adverse(m, v) for m, v in change_pct.items() if m in METRICS}
    fell = [m for m in THROUGHPUTS if worse.get(m, 0.0) > floor_pct]
    if fell:
        return max(fell, key=lambda k: worse[k])
    rose = [m for m, v in worse.items() if v > floor_pct]
    return max(rose, key=lambda k: worse[k]) if rose else None


def worst_metric(change_pct: dict[str, float]) -> str:
    """The metric with the largest adverse change (lowest throughput change, highest latency
    change); the largest change when none got worse."""
    worse = {m: adverse(m, v) for m, v in change_pct.items()}
    m = max(worse, key=lambda k: worse[k])  # ties: the first in METRICS' order
    if worse[m] > 0:
        return m
    return max(change_pct, key=lambda k: abs(change_pct[k]))
