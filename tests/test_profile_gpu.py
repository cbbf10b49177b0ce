"""calibration/profile_gpu.py: its grid, its table format, and (on a GPU only) a measurement."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from sim.calibrate.kernel_tables import read_tables
from sim.paths import REPO_DIR

SCRIPT = REPO_DIR / "calibration" / "profile_gpu.py"
spec = importlib.util.spec_from_file_location("profile_gpu", SCRIPT)
profile_gpu = importlib.util.module_from_spec(spec)
spec.loader.exec_module(profile_gpu)


def test_plan_needs_no_gpu():
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--gpu", "h200", "--plan", "--quick"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert "gemm:" in r.stdout and "decode:" in r.stdout


def test_written_tables_are_what_the_fitter_reads(tmp_path):
    base = {"framework": "torch", "version": "2.13.0", "device": "Some New GPU"}
    gemm = [
        {
            **base,
            "op_name": "gemm",
            "kernel_source": "torch.nn.functional.linear",
            "gemm_dtype": "bfloat16",
            "m": m,
            "n": 4096,
            "k": 4096,
            "latency": 0.01 * m,
        }
        for m in (1, 2, 4)
    ]
    decode = [
        {
            **base,
            "op_name": "generation_attention",
            "kernel_source": "torch_sdpa",
            "batch_size": 4,
            "isl": 1,
            "num_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "beam_width": 1,
            "attn_dtype": "bfloat16",
            "kv_cache_dtype": "bfloat16",
            "step": 1024,
            "window_size": 0,
            "latency": 0.02,
        }
    ]
    profile_gpu.write_table(gemm, tmp_path, "h200", "gemm_perf", "2.13.0")
    profile_gpu.write_table(decode, tmp_path, "h200", "generation_attention_perf", "2.13.0")
    obs = read_tables(tmp_path / "h200")
    assert set(obs["op"]) == {"gemm", "attention_decode"}
    assert set(obs["family"]) == {"torch@2.13.0"} and set(obs["gpu"]) == {"h200"}
    assert obs.loc[obs["op"] == "gemm", "latency_s"].tolist() == pytest.approx([1e-5, 2e-5, 4e-5])


def test_measures_on_a_gpu(tmp_path):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed here")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the profiler measures only where a GPU exists")
    written = profile_gpu.measure("h200", tmp_path, quick=True)
    assert any(p.name == "gemm_perf.parquet" for p in written)
    assert len(read_tables(tmp_path / "h200")) > 100
