"""A sweep of the load alone (issue 25): its report says what the sweep shows (the highest
rate within the SLOs, where latency knees, the first overloaded rate), not "one setting"."""

from __future__ import annotations

import pandas as pd

from sim.scenarios.sweep.report import recommend, write_sweep_report
from sim.scenarios.sweep.table import _metrics


def load_table(slo=True) -> pd.DataFrame:
    """Four rates: p99 TTFT 200, 300, 500, 900 ms; p99 TPOT 15, 25, 40, 60 ms; overloaded from
    24 req/s on."""
    rows = [
        {"rate": rate, "p99_ttft_ms": ttft, "p99_tpot_ms": tpot, "request_throughput": thr,
         "request_goodput": thr, "median_ttft_ms": 30.0, "median_tpot_ms": 10.0,
         "median_itl_ms": 8.0, "p99_itl_ms": 50.0, "slo_met_pct": 99.0,
         "overloaded": rate >= 24, "offered_rate": rate * 0.95, "served_rate": thr,
         "run_dir": str(k)}
        for k, (rate, ttft, tpot, thr) in enumerate(
            [(8, 200.0, 15.0, 7.0), (16, 300.0, 25.0, 11.0), (24, 500.0, 40.0, 13.0),
             (32, 900.0, 60.0, 14.0)])
    ]  # fmt: skip
    frame = pd.DataFrame(rows)
    if not slo:
        frame = frame.drop(columns=["request_goodput", "slo_met_pct"])
    frame.attrs |= {"swept": ["rate"], "unfinished": []}
    frame.attrs["slo"] = {"ttft": 1000.0, "tpot": 30.0} if slo else {}
    return frame


def test_a_load_sweep_says_what_it_shows():
    rec = recommend(load_table(), "rate", [], None)
    s = rec["sentence"]
    assert "one setting" not in s
    assert s.startswith(
        "The highest rate that meets the SLOs at p99 (TTFT <= 1000 ms and TPOT <= 30 ms) is "
        "16 req/s (p99 TTFT 300.0 ms, p99 TPOT 25.0 ms); at 24 req/s p99 TPOT is 40.0 ms."
    )
    assert (
        "Latency knees at 24 req/s: p99 TTFT stays within 2x the lightest rate's (200 ms at 8 "
        "req/s) up to 16 req/s and is 500 ms at 24." in s
    )
    assert "From 24 req/s on the runs are overloaded: 13.00 req/s served" in s
    assert rec["highest_load_within_slos"] == 16
    assert rec["latency_knee"] == 24 and rec["first_overloaded"] == 24


def test_a_load_sweep_without_slos_or_limits():
    frame = load_table(slo=False)
    frame["p99_ttft_ms"] = [200.0, 220.0, 250.0, 300.0]
    frame["overloaded"] = False
    rec = recommend(frame, "rate", [], None)
    assert rec["sentence"] == (
        "p99 TTFT stays within 2x the lightest rate's (200 ms at 8 req/s) across every rate "
        "swept. No rate swept is overloaded (sim.overload in each run's summary.json)."
    )
    assert rec["latency_knee"] is None and "highest_load_within_slos" not in rec


def test_every_and_no_rate_within_the_slos():
    frame = load_table()
    frame.attrs["slo"] = {"ttft": 5000.0, "tpot": 100.0}
    rec = recommend(frame, "rate", [], None)
    assert "is 32 req/s (p99 TTFT 900.0 ms, p99 TPOT 60.0 ms), the highest swept" in rec["sentence"]
    frame.attrs["slo"] = {"ttft": 100.0}
    rec = recommend(frame, "rate", [], None)
    assert rec["sentence"].startswith(
        "No load swept meets the SLOs at p99 (TTFT <= 100 ms): at the lightest, 8 req/s, "
        "p99 TTFT 200.0 ms."
    )
    assert rec["highest_load_within_slos"] is None


def test_a_concurrency_sweep_names_where_throughput_levels_off():
    frame = load_table(slo=False).rename(columns={"rate": "concurrency"}).drop(
        columns=["overloaded"])  # fmt: skip
    frame.attrs["swept"] = ["concurrency"]
    frame["request_throughput"] = [7.0, 11.0, 13.5, 14.0]
    rec = recommend(frame, "concurrency", [], None)
    assert rec["sentence"] == (
        "Request throughput reaches 13.50 req/s at concurrency 24, within 5% of the most swept "
        "(14.00 req/s); more concurrency beyond it adds latency (p99 TTFT 500 ms there, 900 ms "
        "at concurrency 32)."
    )
    assert rec["throughput_levels_off"] == 24
    frame["request_throughput"] = [7.0, 9.0, 11.0, 14.0]
    assert (
        "still grows at the highest concurrency swept"
        in (recommend(frame, "concurrency", [], None)["sentence"])
    )


def test_the_report_of_a_load_sweep(tmp_path):
    out = write_sweep_report(tmp_path, load_table())
    text = (tmp_path / "report.md").read_text()
    assert "**What the sweep shows.** The highest rate that meets" in text
    assert "one setting" not in text and "Settings ranked" not in text
    assert "## Trade-off per rate" in text and text.count("\n| 16 |") == 1
    assert out["recommendation"]["highest_load_within_slos"] == 16


def test_the_sweep_table_has_each_runs_overload_verdict():
    judged = {"overloaded": True, "offered_rate": 21.5, "served_rate": 12.9, "window_s": [1, 2]}
    row = _metrics({"request_throughput": 12.9, "sim": {"overload": judged}})
    assert row == {"request_throughput": 12.9, "overloaded": True, "offered_rate": 21.5,
                   "served_rate": 12.9}  # fmt: skip
    not_judged = {"overloaded": None, "not_judged": "closed loop: ..."}
    assert "overloaded" not in _metrics({"sim": {"overload": not_judged}})
