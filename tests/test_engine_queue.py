"""TTFT counted from when the engine read the request (sim/scenarios/validate/engine_queue.py):
LLMServingSim's runs count it from vLLM's queued_ts, taken when the busy loop reads its input
between two steps; the replay's prediction counts from the first simulated step start at or
after each send."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from sim.scenarios.validate.cases import load_cases
from sim.scenarios.validate.engine_queue import ENGINE_QUEUE, read_s
from sim.scenarios.validate.importers.llmservingsim import llmservingsim
from sim.scenarios.validate.runs import run_case
from tests.conftest import shared_data
from tests.test_validate import BASE, case, write


def test_the_engine_reads_a_request_at_the_next_step_start_of_its_replica():
    requests = pd.DataFrame(
        {"replica": [0, 0, 0, 1, 0], "arrival_s": [0.0, 0.05, 0.10, 0.05, 0.50]}
    )
    steps = pd.DataFrame(
        {"replica": [0, 0, 0, 1], "start_s": [0.0, 0.04, 0.10, 0.07], "duration_s": [0.04] * 4}
    )
    got = read_s(requests, steps)
    # at a step's start: then; inside a step: the next start; another replica's steps don't
    # count; no step after it (a request never run): its send
    assert list(got) == [0.0, 0.10, 0.10, 0.07, 0.50]


def test_a_case_says_where_its_source_counts_ttft_from(tmp_path):
    ok = load_cases([write(tmp_path, [case(ttft_from=ENGINE_QUEUE)])], BASE)
    assert ok[0].error is None
    bad = load_cases([write(tmp_path, [case(ttft_from="client")], "bad.yaml")], BASE)
    assert "ttft_from" in bad[0].error and "engine_queue" in bad[0].error


def test_a_queue_counted_ttft_is_shorter_by_the_rest_of_the_step_it_lands_in(tmp_path):
    """The same run, its TTFT counted from the engine's read: never longer than from the send,
    shorter on average under load (a Poisson stream lands inside steps)."""
    busy = {"poisson": {"rate": 30.0, "num_requests": 120, "input_len": 512, "output_len": 64}}
    path = write(
        tmp_path,
        [
            case(workload=busy, measured={"mean_ttft_ms": 50.0}),
            case(id="q", workload=busy, measured={"mean_ttft_ms": 50.0}, ttft_from=ENGINE_QUEUE),
        ],
    )
    send, queue = (run_case(c) for c in load_cases([path], BASE))
    assert queue.predicted["mean_ttft_ms"] < send.predicted["mean_ttft_ms"]
    assert queue.predicted["mean_ttft_ms"] > 0.5 * send.predicted["mean_ttft_ms"]


def test_llmservingsim_cases_count_ttft_from_the_engine_queue(tmp_path):
    root = shared_data("LLMServingSim/bench_examples")
    cases = llmservingsim([str(root)], tmp_path / "cases.yaml")
    assert cases and all(c["ttft_from"] == ENGINE_QUEUE for c in cases)
    (tmp_path / "cases.yaml").write_text(yaml.safe_dump({"cases": cases}))
    assert all(c.error is None for c in load_cases([tmp_path / "cases.yaml"], BASE))


def test_a_streamed_run_is_refused():
    from sim.scenarios.validate import engine_queue

    class Streamed:
        streamed = object()

    with pytest.raises(ValueError, match="every step"):
        engine_queue.from_engine_queue(Streamed())
