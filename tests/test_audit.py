"""The physics audit (sim/run/audit.py): what it checks, that it finds an impossible figure and
names it, and how a run shows it (summary.json, the console, strict mode)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from sim.calibrate.peaks import data_errors, summarise
from sim.cost.kernels import KernelPricer
from sim.run.audit import PhysicsAudit, audit_record
from sim.run.findings import STRICT_ENV, AuditError, merge_records
from sim.run.physics import AttentionLayer, GpuShare
from sim.run.simulate import simulate
from sim.specs.hardware import load_hardware
from sim.specs.model import Attention, Layer
from sim.specs.model_config import load_model
from tests.conftest import config, run_task_into

H100 = load_hardware("h100-sxm")


def calibrated(**top):
    return config(cost_profile="auto", **top)


@pytest.fixture
def halved_prices(monkeypatch):
    """Every surface-priced kernel at half its price (what a fitted surface under zero did
    before the pricer held prices at the roofline); the process's shared price memos are
    emptied before and after, so no other test reads a halved price."""
    import sim.cost.attention as attention
    import sim.cost.step as step

    def forget():
        attention._SHARED.clear()
        step._TOKEN_MEMOS.clear()

    real = KernelPricer._price
    forget()
    monkeypatch.setattr(KernelPricer, "_price", lambda self, *a: 0.5 * real(self, *a))
    monkeypatch.setenv(STRICT_ENV, "")
    yield
    forget()


def test_every_run_carries_its_audit_with_the_issue_s_keys():
    result = simulate(calibrated())
    audit = result.summary["audit"]
    assert {"checked_steps", "violations", "worst"} <= set(audit)
    assert audit["checked_steps"] == result.summary["sim"]["steps"] == len(result.steps)
    assert audit["violations"] == 0
    assert audit["worst"]["ratio"] <= 1 + audit["tolerance"]
    checks = audit["checks"]
    assert {"hbm_bandwidth", "tensor_flops", "kernel_prices", "memory"} <= set(checks)
    # every step, every price the cost model holds, the memory plan twice (share and GPU)
    assert checks["hbm_bandwidth"]["checked"] == len(result.steps)
    assert checks["kernel_prices"]["checked"] > len(result.steps)
    assert checks["memory"]["checked"] == 2


def test_a_run_priced_for_a_faster_gpu_is_caught_and_named():
    """The same run held against a GPU with a tenth of the bandwidth and FLOPs: each step
    reads its weights faster than that GPU can, and the worst finding says by how much."""
    result = simulate(calibrated())
    slow = replace(
        H100,
        hbm_bytes_per_s=H100.hbm_bytes_per_s / 10,
        flops_per_s={k: v / 10 for k, v in H100.flops_per_s.items()},
    )
    audit = PhysicsAudit(result.setup.cost_model(), result.setup.memory, slow)
    audit.check_steps(result.steps)
    record = audit_record([audit])
    assert record["violations"] >= len(result.steps)  # every step beats the slow GPU
    worst = record["worst"]
    assert worst["violation"] and worst["ratio"] > 2
    assert worst["check"] in ("hbm_bandwidth", "tensor_flops")
    assert "step" in worst["where"] and "TB/s" in record["checks"]["hbm_bandwidth"]["worst"][
        "detail"]  # fmt: skip


def test_prices_under_their_roofline_are_violations(halved_prices, monkeypatch):
    """Halved prices are caught price by price, in a real run; strict mode raises."""
    record = simulate(calibrated()).summary["audit"]
    assert record["checks"]["kernel_prices"]["violations"] > 0
    monkeypatch.setenv(STRICT_ENV, "strict")
    with pytest.raises(AuditError, match=r"physics audit: .* violation"):
        simulate(calibrated())


def test_the_console_names_the_worst_violation(halved_prices, tmp_path, monkeypatch, capsys):
    """python -m sim prints one warning line naming the worst violation; summary.json has it."""
    run_task_into(tmp_path, monkeypatch, ["workload.num_requests=30", "output.report=false"])
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if "physics audit" in x)
    assert line.startswith("sim: warning: physics audit:") and "worst:" in line
    audit = json.loads((tmp_path / "summary.json").read_text())["audit"]
    assert audit["violations"] > 0 and audit["worst"]["subject"] in line


def test_a_pool_beyond_the_gpu_s_memory_is_a_memory_violation(monkeypatch):
    monkeypatch.setenv(STRICT_ENV, "")
    cfg = calibrated(engine_args={"num_gpu_blocks_override": 10_000_000})
    record = simulate(cfg).summary["audit"]
    memory = record["checks"]["memory"]
    assert memory["violations"] == 2 and "KV pool" in memory["worst"]["detail"]


def test_a_streamed_run_is_audited_chunk_by_chunk(tmp_path, monkeypatch):
    """Steps written out as the run goes are audited as they go: every step is counted."""
    monkeypatch.setattr("sim.run.metrics.STEP_CHUNK_ROWS", 500)
    cfg = calibrated(output={"stream": True, "report": False},
                     workload={"num_requests": 200})  # fmt: skip
    result = simulate(cfg, run_dir=tmp_path)
    steps = pd.read_parquet(tmp_path / "steps.parquet")
    assert result.summary["audit"]["checked_steps"] == len(steps) > 500


def test_a_disaggregated_run_audits_both_pools_and_the_kv_transfers():
    record = simulate(calibrated(disagg={"enabled": True})).summary["audit"]
    assert record["violations"] == 0
    transfers = record["checks"]["link_bandwidth"]
    assert transfers["checked"] == 50 and "KV transfer" in transfers["worst"]["subject"]
    assert record["checks"]["memory"]["checked"] == 4  # each pool's plan, twice


def test_merged_audits_name_the_run_of_the_worst():
    a = simulate(calibrated()).summary["audit"]
    b = simulate(calibrated(model="qwen3-8b")).summary["audit"]
    merged = merge_records([a, b], ["first", "second"])
    assert merged["runs"] == 2
    assert merged["checked_steps"] == a["checked_steps"] + b["checked_steps"]
    assert merged["worst"]["subject"].startswith(("first: ", "second: "))


# ---- the least bytes and FLOPs, by hand ----------------------------------------------------
def test_a_dense_gpu_share_is_its_weights_and_lm_head():
    m = load_model("llama-3.1-8b")
    share = GpuShare.of(m, H100, 1, 1, "bf16", "bf16")
    p = m.params
    assert share.dense_bytes == (p.total_non_embedding) * 2
    assert share.lm_head_bytes == m.vocab_size * m.hidden_size * 2
    assert share.step_bytes(1, 1) == share.dense_bytes + share.lm_head_bytes
    assert share.experts_read(64) == 0


def test_an_moe_gpu_share_reads_only_the_experts_touched():
    m = load_model("qwen3-30b-a3b")  # 128 experts, top-8, 48 MoE layers
    share = GpuShare.of(m, H100, 1, 1, "bf16", "bf16")
    every = m.expert_params * 2
    one = share.experts_read(1)
    assert one == pytest.approx(every * 8 / 128)
    assert share.experts_read(10_000) == pytest.approx(every)


def test_attention_reads_its_window_and_scores_its_pairs():
    m = load_model("gpt-oss-20b")
    sliding = next(layer for layer in m.layers if layer.attention is Attention.SLIDING)
    kind = AttentionLayer.of(m, sliding, 1, "auto", H100)
    assert kind.keys(10_000) == sliding.window_tokens
    full = AttentionLayer.of(m, Layer(Attention.FULL, None, True), 1, "auto", H100)
    per_key = 2 * m.num_kv_heads * m.head_dim * 2
    assert full.decode_s(999, H100) == pytest.approx(
        max(1000 * per_key / H100.hbm_bytes_per_s,
            1000 * 4 * m.num_q_heads * m.head_dim / H100.peak_flops_per_s("bf16"))
    )  # fmt: skip
    # a 4-token chunk after 2 cached: positions 3..6, 18 pairs
    assert full.prefill_s(4, 2, H100) == pytest.approx(
        max(6 * per_key / H100.hbm_bytes_per_s,
            18 * 4 * m.num_q_heads * m.head_dim / H100.peak_flops_per_s("bf16"))
    )  # fmt: skip


# ---- measured tables faster than the peaks are data errors --------------------------------
def test_a_measured_row_faster_than_the_peaks_is_a_data_error_named_by_table_and_row():
    rows = pd.DataFrame({
        "op": "gemm", "dtype": "bf16", "m": [1.0, 1.0], "n": [8192.0, 8192.0],
        "k": [8192.0, 8192.0], "source": "/data/gemm_perf.parquet", "row": [7.0, 8.0],
    })  # fmt: skip
    least = 8192 * 8192 * 2 / H100.hbm_bytes_per_s  # the weights alone
    rows["latency_s"] = [least * 1.5, least * 0.5]  # the second beats the HBM peak
    errors = data_errors(H100, rows)
    assert list(errors["row"]) == [8.0]
    (entry,) = summarise(errors, "/data")
    assert entry["table"] == "gemm_perf.parquet" and entry["worst_row"] == 8
    assert entry["worst_ratio"] == pytest.approx(0.5, rel=0.01)
    assert "m=1, n=8192, k=8192" in entry["worst_shape"]


def test_the_committed_profiles_price_no_kernel_under_its_roofline():
    """A fitted surface below zero prices at the roofline (sim/cost/kernels.py): over shapes
    far outside and inside the measured grid, every GEMM of every calibrated GPU."""
    from sim.cost.prior import CostProfile
    from sim.cost.profiles import choose_pricer
    from sim.cost.roofline import compute_dtype, gemm_shape

    m = np.geomspace(1, 65536, 40).round()
    n = np.geomspace(32, 131072, 40).round()
    mm, nn = (a.ravel() for a in np.meshgrid(m, n))
    for gpu in ("h100-sxm", "h200", "a100-80gb", "a40", "rtx-pro-6000"):
        hw = load_hardware(gpu)
        pricer = choose_pricer(hw, "auto", CostProfile.load("prior"), "vllm", "0.11.0").pricer
        for dtype in ("bf16", "fp8"):
            if dtype == "fp8" and "fp8" not in hw.flops_per_s:
                continue
            flops, nbytes, _ = gemm_shape(hw, mm, nn, 4096, dtype)
            roof = np.maximum(flops / hw.peak_flops_per_s(compute_dtype(hw, dtype)),
                              nbytes / hw.hbm_bytes_per_s)  # fmt: skip
            assert np.all(pricer.gemm_s(mm, nn, 4096, dtype) >= roof * (1 - 1e-12))
