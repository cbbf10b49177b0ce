"""python -m sim.compare shows, per run, the settings that differ between the runs compared
(issue 25: it left out the swept values)."""

from __future__ import annotations

import json

import pandas as pd

from sim.compare import formatted, markdown, table


def run_dir(path, rate: float, budget, report: bool, extra: dict | None = None):
    config = {
        "seed": 0,
        "model": "llama-3.1-8b",
        "hardware": "h100-sxm",
        "parallel": {"tp": 1},
        "workload": {"kind": "poisson", "rate": rate, "num_requests": 100},
        "engine_args": {"max_num_batched_tokens": budget, "max_num_seqs": None},
        "output": {"report": report},
        **(extra or {}),
    }
    summary = {"backend": "sim:vllm@0.33.0", "model_id": "llama-3.1-8b",
               "request_throughput": rate * 0.8, "config": config}  # fmt: skip
    path.mkdir()
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def test_compare_shows_the_settings_that_differ(tmp_path):
    runs = [
        run_dir(tmp_path / "a", 8.0, None, True),
        run_dir(tmp_path / "b", 16.0, 2048, False, {"adapt_tp": True}),  # a newer config key
    ]
    df = table(runs)
    assert df.attrs["differing"] == ["rate", "max_num_batched_tokens"]
    assert list(df["rate"]) == ["8", "16"]
    assert list(df["max_num_batched_tokens"]) == ["null", "2048"]
    text = markdown(formatted(df))
    header, _, first, second = text.splitlines()
    assert header.split("|")[1:4] == [
        " setup                        ", " rate ", " max_num_batched_tokens "]  # fmt: skip
    assert "| 8    | null " in first and "| 16   | 2048 " in second
    df.to_csv(tmp_path / "t.csv", index=False)
    assert list(pd.read_csv(tmp_path / "t.csv")["rate"]) == [8, 16]


def test_one_run_or_identical_runs_add_no_column(tmp_path):
    a = run_dir(tmp_path / "a", 8.0, None, True)
    b = run_dir(tmp_path / "b", 8.0, None, False)  # output options are not settings
    assert table([a]).attrs["differing"] == []
    assert table([a, b]).attrs["differing"] == []
