"""scenario=kernel_check: the committed profiles against measured tables, at the issue's targets,
and the command line on a small table of its own."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from sim.cli import check_overrides
from sim.scenarios.kernel_check import run_kernel_check
from tests.conftest import shared_data


def check(tmp_path, timings, hardware):
    (cfg,) = check_overrides(
        ["scenario=kernel_check", f"kernel_check.timings={timings}", f"hardware={hardware}"]
    )
    return run_kernel_check(cfg, tmp_path)


def test_gemm_operators_of_models_never_fitted(tmp_path):
    """H100: Llama-2-7b and A100: Llama-3-8B/70B were held out of the committed profiles."""
    h100 = shared_data("vidur/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv")
    kc = check(tmp_path / "h", h100, "h100-sxm")["kernel_check"]
    assert kc["per_op"]["gemm"] <= 8.0
    a100 = shared_data("vidur/profiling/compute/a100/meta-llama")
    frames = []
    for model in ("Meta-Llama-3-8B", "Meta-Llama-3-70B"):
        result = check(tmp_path / model, a100 / model / "mlp.csv", "a100-80gb")
        frames.append((result["kernel_check"]["per_op"]["gemm"], result["kernel_check"]))
    rows = {"Meta-Llama-3-8B": 7296, "Meta-Llama-3-70B": 7296}  # GEMM rows per table
    pooled = sum(m * n for (m, _), n in zip(frames, rows.values(), strict=True)) / sum(
        rows.values()
    )
    assert pooled <= 8.0


def test_h200_attention_over_the_measured_grid(tmp_path):
    table = shared_data("aiconfigurator/perf_data/h200_sxm/attention/vllm/0.24.0")
    kc = check(tmp_path, table, "h200")["kernel_check"]
    assert kc["per_op"]["attention_prefill"] <= 12.0
    assert kc["per_op"]["attention_decode"] <= 12.0
    assert kc["num_rows"] > 100_000


def test_rtx_pro_6000_whole_layer_of_mixed_batches(tmp_path):
    folder = shared_data("LLMServingSim/profiler_perf_RTXPRO6000_Llama-3.1-8B_bf16")
    result = check(tmp_path, folder, "rtx-pro-6000")
    assert result["kernel_check"]["per_op"]["layer"] <= 10.0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["kernel_check"]) >= {"overall_mape_pct", "per_op", "num_rows"}
    assert (tmp_path / "kernel_check.png").is_file() and (tmp_path / "report.md").is_file()


def test_kernel_check_on_a_table_of_its_own(tmp_path):
    """Any GEMM table in the supported format works, whatever shapes it holds."""
    table = pd.DataFrame(
        {
            "framework": "VLLM",
            "version": "0.24.0",
            "device": "NVIDIA H200",
            "op_name": "gemm",
            "kernel_source": "x",
            "gemm_dtype": "bfloat16",
            "m": [7, 77, 777],
            "n": [3000, 3000, 3000],
            "k": [5000, 5000, 5000],
            "latency": [0.03, 0.05, 0.09],
        }
    )
    path = tmp_path / "gemm_perf.parquet"
    table.to_parquet(path)
    result = check(tmp_path / "out", path, "h200")
    kc = result["kernel_check"]
    assert kc["num_rows"] == 3 and kc["per_op"]["gemm"] >= 0
    assert result["priced_with"]["gemm"].startswith("gemm/bf16")


def test_kernel_check_needs_a_table():
    from sim.errors import UserError

    (cfg,) = check_overrides(["scenario=kernel_check"])
    with pytest.raises(UserError, match=r"kernel_check\.timings"):
        run_kernel_check(cfg, None)


def test_a_kernel_table_with_a_shape_too_large_to_be_measured_is_refused(tmp_path):
    """A finite but absurd shape (1e308 tokens) would turn the bytes it implies into inf: the
    table is refused with the column and row, as a NaN or a negative value is (fuzz.py's
    extreme floats)."""
    from sim.calibrate.kernel_tables import read_tables
    from sim.errors import UserError

    src = shared_data("vidur/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv")
    lines = src.read_text().splitlines()
    header = lines[0].split(",")
    row = lines[1].split(",")
    row[header.index("num_tokens")] = "1e308"
    where = tmp_path / "profiling/compute/h100/meta-llama/Llama-2-7b-hf"
    where.mkdir(parents=True)
    (where / "mlp.csv").write_text("\n".join([lines[0], ",".join(row), *lines[2:5]]) + "\n")
    with pytest.raises(UserError, match=r"column num_tokens is 1e\+308 in row 0.*<= 1e\+15"):
        read_tables(where / "mlp.csv")
    (where / "mlp.csv").write_text("\n".join(lines[:5]) + "\n")
    assert len(read_tables(where / "mlp.csv")) > 0
