"""The validation report is robust and sliced (issue 23, items 4 and 7): a zero, missing or
non-numeric measured value, a zero or missing prediction and a case the simulator refuses each
become a row with its reason; plots leave out what a log axis cannot show; the accuracy per GPU
x dtype x engine family x workload kind and the suite-wide targets; the band of predictions
over the plausible benchmark settings."""

from __future__ import annotations

import csv
import json
import math

import pandas as pd
import pytest

from sim.scenarios.validate.cases import load_cases
from sim.scenarios.validate.report import plot_metric, write_validation
from sim.scenarios.validate.runs import CaseResult, run_all
from sim.scenarios.validate.settings import SETTINGS, inside_band, plausible, run_settings
from sim.scenarios.validate.targets import OPEN_LOOP_ROWS, SLICE_ROWS, suite_targets
from sim.scenarios.validate.validation import Row, Validation, combined_slices, rows
from tests.test_validate import BASE, case, write

CSV_HEADER = [
    "case",
    "metric",
    "measured",
    "predicted",
    "error_pct",
    "reason",
    "band_low",
    "band_high",
]


def _csv(path) -> list[dict]:
    with (path / "validation.csv").open() as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == CSV_HEADER
        return list(reader)


def test_unusable_measured_values_are_rows_with_their_reason(tmp_path):
    """A measured 0, null, NaN or text used to refuse the whole case; now only that metric's
    row carries the reason and the case's other metrics are compared."""
    measured = {
        "mean_ttft_ms": 0,
        "mean_tpot_ms": 5.0,
        "p90_ttft_ms": None,
        "p99_ttft_ms": math.nan,
        "p50_tpot_ms": "n/a",
        "p90_tpot_ms": -3.0,
    }
    cases = load_cases([write(tmp_path, [case(measured=measured)])], BASE)
    assert cases[0].error is None
    results = run_all(cases, jobs=1)
    v = Validation(tuple(cases), tuple(results), "t")
    by_metric = {r.metric: r for r in v.table}
    assert set(by_metric) == set(measured)  # nothing lost
    assert "is 0" in by_metric["mean_ttft_ms"].reason
    assert "null" in by_metric["p90_ttft_ms"].reason
    assert "NaN" in by_metric["p99_ttft_ms"].reason
    assert "not a number" in by_metric["p50_tpot_ms"].reason
    assert "negative" in by_metric["p90_tpot_ms"].reason
    for m in ("mean_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p90_tpot_ms"):
        assert by_metric[m].error_pct is None, m
    assert by_metric["mean_tpot_ms"].reason == "" and by_metric["mean_tpot_ms"].error_pct
    assert set(v.overall.num_values) == {"mean_tpot_ms"}
    out = tmp_path / "out"
    out.mkdir()
    write_validation(v, out)
    got = {r["metric"]: r for r in _csv(out)}
    assert got["mean_ttft_ms"]["measured"] == "0" and got["mean_ttft_ms"]["error_pct"] == ""
    assert got["mean_ttft_ms"]["predicted"] != ""  # the prediction is still shown
    report = (out / "report.md").read_text()
    assert "## Rows with a reason" in report and "relative error is undefined" in report
    summary = json.loads((out / "summary.json").read_text())["validation"]
    assert summary["num_rows_with_reason"] == 5


def test_refused_cases_are_one_row_each(tmp_path):
    cases = load_cases(
        [
            write(
                tmp_path,
                [
                    case(id="old-release", engine="vllm@0.0.1"),
                    case(id="too-big", model="llama-3.1-405b"),
                    case(id="schema", measured={}),
                    case(id="ok"),
                ],
            )
        ],
        BASE,
    )
    results = run_all(cases, jobs=1)
    v = Validation(tuple(cases), tuple(results), "t")
    refused = {r.case: r for r in v.table if r.metric == "-"}
    assert set(refused) == {"old-release", "too-big", "schema"}
    assert "0.0.1" in refused["old-release"].reason
    assert "raise parallel.tp" in refused["too-big"].reason
    assert "measured" in refused["schema"].reason
    assert all(r.measured is None and r.error_pct is None for r in refused.values())
    assert refused["too-big"].family == "vllm" and refused["too-big"].hardware == "h100-sxm"
    out = tmp_path / "out"
    out.mkdir()
    write_validation(v, out)
    got = [r for r in _csv(out) if r["metric"] == "-"]
    assert len(got) == 3 and all(r["reason"] for r in got)
    summary = json.loads((out / "summary.json").read_text())["validation"]
    assert summary["num_failed"] == 3
    # a refused case has no resolved engine or dtype: its slice is the engine's name, its dtype
    # the case's own (here auto); the simulated one's are what ran (vllm-v1, bf16)
    slices = {(s["engine_family"], s["dtype"]): s for s in summary["slices"]}
    assert slices[("vllm-v1", "bf16")]["num_cases"] == 1
    assert slices[("vllm", "auto")]["num_refused"] == 3


def test_zero_and_missing_predictions_are_rows_with_their_reason(tmp_path):
    (c,) = load_cases([write(tmp_path, [case(measured={"a": 2.0, "b": 3.0, "c": 4.0})])], BASE)
    res = CaseResult(c.id, predicted={"a": 0.0, "b": None, "c": math.nan})
    by_metric = {r.metric: r for r in rows([c], [res])}
    assert by_metric["a"].error_pct == -100.0 and "predicted 0" in by_metric["a"].reason
    assert by_metric["b"].error_pct is None and "does not report b" in by_metric["b"].reason
    assert by_metric["c"].error_pct is None and "NaN" in by_metric["c"].reason
    out = tmp_path / "out"
    out.mkdir()
    write_validation(Validation((c,), (res,), "t"), out)  # plots of a zero prediction
    report = (out / "report.md").read_text()
    assert "a: 1 rows left out of the plot" in report


def test_a_metric_with_no_positive_value_still_plots(tmp_path):
    """np.geomspace crashed on a 0 (the TensorRT-LLM throughput tables of the independent
    check); the plot now leaves such values out and says how many."""
    df = pd.DataFrame(
        {
            "metric": ["x", "x", "x"],
            "measured": [0.0, 0.0, float("nan")],
            "predicted": [0.0, 5.0, 1.0],
            "hardware": ["h100-sxm"] * 3,
            "band_low": [float("nan")] * 3,
            "band_high": [float("nan")] * 3,
        }
    )
    name = plot_metric(df, "x", tmp_path / "validation_x.png")
    assert (tmp_path / name).is_file()
    df.loc[1, "measured"] = 4.0
    assert (tmp_path / plot_metric(df, "x", tmp_path / "validation_y.png")).is_file()


def _row(case, metric, err, hw="h200", dtype="fp8", family="vllm-v1", kind="closed_loop"):
    # measured, predicted, engine and model: not read by the slices or targets
    return Row(case, metric, 1.0, 1.0, err, hw, "vllm@0.11.0", kind, "m", "", "", dtype, family)


def test_slices_by_gpu_dtype_engine_family_and_workload():
    table = [_row(f"a{i}", "mean_tpot_ms", 30.0 + i) for i in range(5)]  # 5 runs, worse
    table += [_row(f"b{i}", "mean_tpot_ms", 30.0, dtype="bf16") for i in range(4)]  # too few
    table += [_row(f"c{i}", "p50_tpot_ms", 5.0, kind="poisson") for i in range(6)]
    table += [_row("c0", "mean_tpot_ms", 50.0, kind="poisson")]  # its mean stands for TPOT
    table += [_row("d", "-", None, family="sglang")]  # refused
    got = {s.key: s for s in combined_slices(table)}
    worse = got[("h200", "fp8", "vllm-v1", "closed_loop")]
    assert worse.num_cases == 5 and worse.worse == ["TPOT"]
    assert worse.headline.median_abs_pct_error["TPOT"] == 32.0
    assert got[("h200", "bf16", "vllm-v1", "closed_loop")].worse == []  # 4 runs: not judged
    open_loop = got[("h200", "fp8", "vllm-v1", "poisson")]
    assert open_loop.headline.num_values["TPOT"] == 6
    assert open_loop.headline.p90_abs_pct_error["TPOT"] == pytest.approx(27.5)
    assert open_loop.worse == []  # median 5%
    refused = got[("h200", "fp8", "sglang", "closed_loop")]
    assert refused.num_cases == 0 and refused.num_refused == 1


def test_suite_targets_of_the_acceptance():
    table = [_row(f"a{i}", "mean_tpot_ms", 4.0 * (i + 1)) for i in range(5)]  # 4..20
    table += [_row(f"a{i}", "mean_ttft_ms", 90.0) for i in range(5)]  # closed loop: not judged
    table += [_row(f"p{i}", "p50_ttft_ms", 10.0, kind="poisson") for i in range(3)]
    table += [_row(f"p{i}", "p50_tpot_ms", 2.0, kind="poisson") for i in range(3)]
    got = {(t.target, t.metric): t for t in suite_targets(table)}
    tpot = got[("all cases of the suite", "TPOT")]
    assert tpot.value_pct == 6.0 and tpot.num_values == 8 and tpot.met  # 2,2,2,4,8,12,16,20
    assert got[("all cases of the suite", "ITL")].met is None  # no case reports ITL
    ttft = got[(OPEN_LOOP_ROWS, "TTFT")]
    assert ttft.value_pct == 10.0 and ttft.num_values == 3 and ttft.met
    (slices,) = [t for t in got.values() if t.target == SLICE_ROWS]
    assert slices.value_pct == 90.0 and slices.met is False and slices.num_values == 1


def test_band_over_the_plausible_settings(tmp_path):
    """Three tiny cases: a closed loop (4 settings, its first wave left out and a front end, 5
    extra runs),
    a closed loop that states its client start (2 settings, 1 extra run), an open loop (2
    cache settings, 1 run)."""
    poisson = {"poisson": {"rate": 50.0, "num_requests": 12, "input_len": 256, "output_len": 8}}
    stated = {"closed_loop": {**case()["workload"]["closed_loop"], "stagger": True}}
    measured = {"mean_ttft_ms": 20.0, "mean_tpot_ms": 5.0, "output_throughput": 0}
    specs = [
        case(
            id="closed",
            measured=measured,
            workload={
                "closed_loop": {
                    "concurrency": 4,
                    "num_requests": 12,
                    "input_len": 512,
                    "output_len": 8,
                }
            },
        ),
        case(id="stated", workload=stated),
        case(id="open", workload=poisson),
    ]
    cases = load_cases([write(tmp_path, specs)], BASE)
    assert [len(plausible(c)) for c in cases] == [6, 2, 4]
    results = run_all(cases, jobs=1)
    band = run_settings(cases, results, 1, lambda c: True)
    assert band.num_runs == 5 + 1 + 1 and band.num_failed == 0
    assert set(band.results) == set(SETTINGS)
    assert "stated" not in band.results[(False, True)]
    bands = band.bands
    lo, hi = bands["closed"]["mean_ttft_ms"]
    assert lo < hi  # a warm prefix cache shortens the prompts' prefill
    assert set(bands) == {"closed", "stated", "open"}
    assert band.results[(False, True)]["open"] is band.results[(True, True)]["open"]
    v = Validation(tuple(cases), tuple(results), "t", bands=bands)
    table = v.table
    inside = inside_band(table)
    assert set(inside) == {"mean_ttft_ms", "mean_tpot_ms"}  # not the measured 0
    assert all(0 <= f <= 1 and n == 3 for f, n in inside.values())
    summary = band.summary(table)
    assert summary["settings"][0]["name"] == "clients together, prefix cache cold"
    assert summary["num_banded"] == 3 and summary["settings"][0]["num_cases"] == 2
    out = tmp_path / "out"
    out.mkdir()
    write_validation(v, out)
    got = {(r["case"], r["metric"]): r for r in _csv(out)}
    row = got[("closed", "mean_ttft_ms")]
    assert float(row["band_low"]) <= float(row["predicted"]) <= float(row["band_high"])
