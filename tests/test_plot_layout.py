"""The sweep's pareto.png and capacity's capacity.png lay out their text: every label inside its
panel, no label over another label or over another point, every legend and the title inside the
figure (issue 41, item 11: the pareto legend was cut off at the figure's edge and the point
labels overlapped), and the bytes still depend only on what the figure shows."""

from __future__ import annotations

import itertools
import math

import matplotlib.figure
import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Annotation, Text

from sim.scenarios.capacity.report import plot_probes
from sim.scenarios.capacity.result import CapacityResult, Probe, RateAnswer
from sim.scenarios.probes import OVERLOADED, Seeded
from sim.scenarios.sweep.report import write_sweep_report


@pytest.fixture
def saved(monkeypatch):
    """Every figure saved while the test runs."""
    figures = []
    save = matplotlib.figure.Figure.savefig

    def keep(fig, *args, **kwargs):
        figures.append(fig)
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    return figures


def text_boxes_of(labels, renderer):
    """Each label's text alone (an annotation's own extent takes in its leader line)."""
    out = []
    for t in labels:
        if isinstance(t, Annotation):
            t.update_positions(renderer)
        out.append(Text.get_window_extent(t, renderer))
    return out


def check_layout(fig, points_of=lambda ax: [], bars_of=lambda ax: []) -> int:
    """The layout rules; returns how many labels the figure has. `bars_of(ax)`: vertical bars
    (x, y0, y1) in data coordinates no label may cross but its own point's."""
    renderer = FigureCanvasAgg(fig).get_renderer()  # the saved figure was closed
    whole = fig.bbox
    n = 0
    for ax in fig.axes:
        if not ax.get_visible() or not ax.axison:
            continue
        frame = ax.get_window_extent(renderer)
        labels = [t for t in ax.texts if t.get_text()]
        text_boxes = text_boxes_of(labels, renderer)
        for t, b in zip(labels, text_boxes, strict=True):
            assert frame.x0 <= b.x0 and b.x1 <= frame.x1, f"{t.get_text()!r} leaves its panel"
            assert frame.y0 <= b.y0 and b.y1 <= frame.y1, f"{t.get_text()!r} leaves its panel"
        for (s, a), (t, b) in itertools.combinations(zip(labels, text_boxes, strict=True), 2):
            assert not a.overlaps(b), f"labels {s.get_text()!r} and {t.get_text()!r} overlap"
        # no label sits on a point other than its own
        pts = ax.transData.transform(np.asarray(points_of(ax), dtype=float).reshape(-1, 2))
        for t, b in zip(labels, text_boxes, strict=True):
            own = ax.transData.transform([t.xy])[0]
            for p in pts:
                if np.hypot(*(p - own)) > 1:
                    assert not b.contains(*p), f"label {t.get_text()!r} covers a point"
        for x, y0, y1 in bars_of(ax):
            (px, py0), (_, py1) = ax.transData.transform([(x, y0), (x, y1)])
            for t, b in zip(labels, text_boxes, strict=True):
                mine = abs(ax.transData.transform([t.xy])[0][0] - px) < 1
                crosses = b.x0 <= px <= b.x1 and b.y0 <= py1 and py0 <= b.y1
                assert mine or not crosses, f"label {t.get_text()!r} crosses an error bar"
        n += len(labels)
        if ax.get_legend():
            legend = ax.get_legend().get_window_extent(renderer)
            for t, b in zip(labels, text_boxes, strict=True):
                assert not b.overlaps(legend), f"label {t.get_text()!r} over the legend"
    for legend in fig.legends:
        b = legend.get_window_extent(renderer)
        assert whole.x0 <= b.x0 and b.x1 <= whole.x1, "a legend is cut off at the figure's edge"
        assert whole.y0 <= b.y0 and b.y1 <= whole.y1, "a legend is cut off at the figure's edge"
    if fig._suptitle is not None:
        b = fig._suptitle.get_window_extent(renderer)
        assert whole.x0 <= b.x0 and b.x1 <= whole.x1, "the title is cut off"
    return n


def crowded_sweep() -> pd.DataFrame:
    """A chunked-prefill sweep's shape: 8 budgets x 2 caps at two loads, the large budgets'
    points crowded together along the front's end (as the default sweep's are): 13 points on
    each load's front (the cap changes nothing below 2,048: one point, one label)."""
    rows = []
    budgets = [256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
    for rate in (4.5, 6.0):
        for k, budget in enumerate(budgets):
            for cap in (0, 1024):
                crowd = k >= 3
                tpot = 12.0 * 1.6**k if not crowd else 40.0 + 1.5 * k + 0.7 * (cap > 0)
                ttft = 4500.0 / 1.9**k if not crowd else 1300.0 - 25 * k - 10 * (cap > 0)
                same = k < 3  # the cap changes nothing below it: one point, one shared label
                rows.append({
                    "max_num_batched_tokens": budget, "long_prefill_token_threshold": cap,
                    "rate": rate, "p99_ttft_ms": ttft * rate / 4.5,
                    "p99_tpot_ms": tpot if same else tpot * (1 + 0.01 * (cap > 0)),
                    "request_throughput": rate, "request_goodput": rate * 0.9,
                    "median_ttft_ms": 100.0, "median_tpot_ms": 10.0, "median_itl_ms": 10.0,
                    "p99_itl_ms": 30.0, "slo_met_pct": 90.0, "ttft_slo_met_pct": 95.0,
                    "tpot_slo_met_pct": 95.0, "run_dir": f"{budget}-{cap}-{rate}",
                })  # fmt: skip
    frame = pd.DataFrame(rows)
    frame.attrs |= {
        "swept": ["max_num_batched_tokens", "long_prefill_token_threshold", "rate"],
        "unfinished": [],
        "slo": {"ttft": 2000.0, "tpot": 50.0},
    }
    return frame


def test_pareto_labels_and_legend_fit(tmp_path, saved):
    frame = crowded_sweep()
    write_sweep_report(tmp_path, frame)
    pareto = saved[0]
    n = check_layout(pareto, lambda ax: [(c.get_offsets()[0]) for c in ax.collections])
    assert n == 2 * 13  # every point of each load's front is labelled
    write_sweep_report(tmp_path / "again", frame)
    again = (tmp_path / "again" / "pareto.png").read_bytes()
    assert (tmp_path / "pareto.png").read_bytes() == again


def probe(rate: float, verdict: str, margin: float, half: float, ttft: float, tpot: float):
    run = {"p99_ttft_ms": ttft, "p99_tpot_ms": tpot, "request_throughput": rate * 0.8,
           "output_throughput": rate * 170, "total_output_tokens": 208_000,
           "completed": 1000}  # fmt: skip
    return Probe(rate, 1, Seeded((run, run, run), verdict, margin, half))


def capacity_result() -> CapacityResult:
    """The default search's probes (scenario=capacity on one H100), bisected on to a tighter
    tolerance (capacity.tolerance=0.005): the last five rates within 0.6 req/s."""
    probes = (
        probe(9.642, "meets", 0.339, 0.069, 357.7, 16.9),
        Probe(19.285, 1, OVERLOADED),
        probe(14.464, "meets", 0.500, 0.055, 443.0, 25.0),
        probe(16.874, "meets", 0.631, 0.128, 494.9, 31.5),
        probe(18.080, "meets", 0.720, 0.199, 527.7, 36.0),
        probe(18.682, "unclear", 0.969, 0.191, 544.7, 48.5),
        probe(18.381, "meets", 0.757, 0.217, 543.6, 37.9),
        probe(18.531, "meets", 0.795, 0.188, 545.1, 39.7),
        probe(18.606, "unclear", 0.931, 0.204, 546.0, 46.5),
    )
    answer = RateAnswer(19.285, 1, probes[-2], 18.606, 18.606, (18.606, 18.682), "tolerance")
    slo = {"ttft": 2000.0, "tpot": 50.0}
    return CapacityResult(answer, None, slo, 0.95, 0.02, probes, 24, "llama-3.1-8b", "h100-sxm",
                          "vllm@0.33.0", 1, 1, "poisson", 1000, 1.0)  # fmt: skip


def test_capacity_probe_numbers_are_clear(tmp_path, saved):
    r = capacity_result()
    plot_probes(r, tmp_path / "capacity.png")
    fig = saved[0]
    simulated = [p for p in r.probes if not math.isnan(p.seeded.margin)]
    shown = [(p.rate, p.seeded.margin) for p in simulated]
    bars = [(p.rate, p.seeded.margin - p.seeded.margin_half_width,
             p.seeded.margin + p.seeded.margin_half_width) for p in simulated]  # fmt: skip
    n = check_layout(fig, lambda ax: shown if ax is fig.axes[0] else [],
                     lambda ax: bars if ax is fig.axes[0] else [])  # fmt: skip
    assert n == len(shown)  # every simulated probe numbered
    texts = sorted(t.get_text() for t in fig.axes[0].texts)
    assert texts == sorted(str(k) for k in (1, 3, 4, 5, 6, 7, 8, 9))  # the report table's
    plot_probes(r, tmp_path / "again.png")
    assert (tmp_path / "capacity.png").read_bytes() == (tmp_path / "again.png").read_bytes()
