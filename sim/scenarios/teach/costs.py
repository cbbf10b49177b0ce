"""What a lesson's change costs: the figures of its table that got worse from its first run to
its second, each said with both numbers. Every lesson's verdict (sim/scenarios/teach/verdicts.py)
says what the change buys, then this: a change that helps one figure often hurts another
(chunks shorten the longest token gap and lengthen every step that carries one), and a verdict
that named only the gain would hide it.

A figure is a cost when it is at least WORSE_BY worse than in the first run, in its own
direction (a latency up, a throughput down). The figures checked are the headline ones of any
run (FIGURES) and the lesson's own (verdicts.py); each is a row of the lesson's table, so the
sentence's numbers are the table's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sim.run.summary import RunResult
from sim.scenarios.teach.measures import makespan, max_itl_ms

WORSE_BY = 0.10  # a figure at least 10% worse than in the first run is a cost


def auto_digits(v: float) -> str:
    """1,234 and 12.3: a decimal only where the number is small."""
    return f"{v:,.1f}" if abs(v) < 100 else f"{v:,.0f}"


@dataclass(frozen=True)
class Figure:
    """One number read off a run, with the direction in which it is better."""

    name: str  # its row in the lesson's table, with its unit: "p99 TTFT (ms)"
    phrase: str  # in a sentence: "p99 TTFT"
    unit: str  # after a number in a sentence: "ms", "" for a count
    lower_is_better: bool
    read: Callable[[RunResult], float]
    fmt: Callable[[float], str] = auto_digits

    def row(self, values: Sequence[float]) -> tuple:
        return (self.name, *map(self.fmt, values))


def summary_figure(key: str, name: str, phrase: str, unit: str, lower: bool = True) -> Figure:
    return Figure(name, phrase, unit, lower, lambda r: float(r.summary[key]))


# fmt: off
FIGURES: tuple[Figure, ...] = (
    summary_figure("mean_ttft_ms", "mean TTFT (ms)", "mean TTFT", "ms"),
    summary_figure("p99_ttft_ms", "p99 TTFT (ms)", "p99 TTFT", "ms"),
    summary_figure("mean_tpot_ms", "mean TPOT (ms)", "mean TPOT", "ms"),
    summary_figure("p99_tpot_ms", "p99 TPOT (ms)", "p99 TPOT", "ms"),
    summary_figure("p99_itl_ms", "p99 inter-token latency (ms)", "p99 inter-token latency",
                   "ms"),
    Figure("longest gap between two tokens (ms)", "the longest gap between two tokens", "ms",
           True, max_itl_ms),
    summary_figure("output_throughput", "output tokens / s", "output throughput", "tokens/s",
                   lower=False),
    Figure("all requests done (s)", "the time to finish every request", "s", True, makespan,
           lambda v: f"{v:,.2f}"),
)
# fmt: on


@dataclass(frozen=True)
class Cost:
    """A figure that got worse: its values in the two runs as the table prints them."""

    figure: Figure
    before: float
    after: float

    @property
    def change(self) -> float | None:
        """The relative change, signed (None from zero)."""
        return (self.after - self.before) / abs(self.before) if self.before else None

    @property
    def text(self) -> str:
        f = self.figure
        verb = "fell" if self.after < self.before else "rose"
        unit = f" {f.unit}" if f.unit else ""
        change = self.change
        if change is None:
            pct = ""
        elif change >= 1:  # twice or more: "3.2x" reads better than "+222%"
            pct = f" ({self.after / self.before:.1f}x)"
        else:
            pct = f" ({change:+.0%})"
        return f"{f.phrase} {verb} from {f.fmt(self.before)} to {f.fmt(self.after)}{unit}{pct}"

    @property
    def record(self) -> dict:
        """For summary.json."""
        return {"figure": self.figure.name, "before": self.before, "after": self.after,
                "change": self.change}  # fmt: skip


def is_worse(before: float, after: float, lower_is_better: bool) -> bool:
    """At least WORSE_BY worse, in the figure's direction (from zero: any step the wrong way)."""
    worse_by = after - before if lower_is_better else before - after
    if before == 0:
        return worse_by > 0
    return worse_by >= WORSE_BY * abs(before)


def costs_of(figures: Sequence[Figure], rs: Sequence[RunResult]) -> list[Cost]:
    """The figures worse in the second run than in the first, the worst (relatively) first."""
    found = []
    for f in figures:
        before, after = f.read(rs[0]), f.read(rs[1])
        if is_worse(before, after, f.lower_is_better):
            found.append(Cost(f, before, after))
    return sorted(found, key=lambda c: -abs(c.change) if c.change is not None else -1e300)


def cost_sentence(label: str, costs: Sequence[Cost]) -> str:
    """What the second run's change costs, in one sentence."""
    if not costs:
        return (
            f"The price of {label}: none here, no figure in the table is "
            f"{WORSE_BY:.0%} or more worse."
        )
    return (
        f"The price of {label} (every figure {WORSE_BY:.0%} or more worse): "
        + "; ".join(c.text for c in costs)
        + "."
    )


@dataclass(frozen=True)
class Verdict:
    """A lesson's sentence (what the change buys, then what it costs), its table and its costs."""

    sentence: str
    rows: tuple[tuple, ...]
    costs: tuple[Cost, ...]


def verdict(rs: Sequence[RunResult], label: str, buys: str, rows: list[tuple],
            own: Sequence[Figure] = ()) -> Verdict:  # fmt: skip
    """The lesson's sentence `buys` followed by its price, `label` naming the change; the table:
    the lesson's rows, then a row per figure checked (its own figures and the headline ones)
    that it has not. A lesson row named as a figure is the figure's row, so the sentence and
    the table print the same numbers."""
    figures = [*own, *(f for f in FIGURES if f.name not in {g.name for g in own})]
    by_name = {f.name: f.row([f.read(r) for r in rs]) for f in figures}
    table = [by_name.pop(r[0], r) for r in rows]
    if bad := [r[0] for r in table if len(r) != len(rs) + 1]:
        raise ValueError(f"rows without values and no figure of that name: {bad}")
    table += by_name.values()
    costs = costs_of(figures, rs)
    return Verdict(f"{buys} {cost_sentence(label, costs)}", tuple(table), tuple(costs))
