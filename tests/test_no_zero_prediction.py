"""No case yields a zero or NaN prediction silently (issue 43): a run in which no request
finished, or a measured metric predicted 0 or NaN, is an error row with its reason
(sim/scenarios/validate/runs.py no_prediction), and the other cases still run."""

from __future__ import annotations

from sim.scenarios.validate.cases import load_cases
from sim.scenarios.validate.runs import run_all
from sim.scenarios.validate.validation import REFUSED, rows
from tests.test_validate import BASE, TINY, case, write

ONE_TOKEN = {"closed_loop": {**TINY["closed_loop"], "output_len": 1}}


def test_zero_and_nan_predictions_are_error_rows_with_their_reason(tmp_path):
    cases = load_cases(
        [
            write(
                tmp_path,
                [
                    case(
                        id="all-rejected",
                        engine_args={"max_model_len": 32},
                        measured={"output_throughput": 100.0, "mean_ttft_ms": 20.0},
                    ),
                    case(id="one-token", workload=ONE_TOKEN),
                    case(id="ok"),
                ],
            )
        ],
        BASE,
    )
    rejected, one_token, ok = run_all(cases, jobs=1)
    assert rejected.error == (
        "no prediction: none of the 12 requests finished: 12 rejected (the first: prompt 64 + "
        "output 8 tokens exceed max_model_len 32)"
    )
    assert one_token.error.startswith("no prediction: predicted mean_tpot_ms ")
    assert "12 of 12 requests finished" in one_token.error
    assert ok.error is None and all(v > 0 for v in ok.predicted.values())
    table = rows(cases, [rejected, one_token, ok])
    refused = [r for r in table if r.metric == REFUSED]
    assert [r.case for r in refused] == ["all-rejected", "one-token"]
    assert all(r.reason.startswith("no prediction: ") and r.predicted is None for r in refused)
    assert all(r.predicted > 0 and r.error_pct is not None for r in table if r.case == "ok")
