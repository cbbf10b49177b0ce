"""SGLang's block-FP8 GEMM kernel by release (sim/engines/sglang_fp8.py) and the first-use cost of
DeepGEMM's JIT (sim/cost/first_use.py): the rule read from each release, a compile paid once per
kernel configuration, hidden by warm-up requests, and deterministic to the byte."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from sim.cost.first_use import COMPILE_S, FirstUse, deepgemm_kernel
from sim.engines.resolve import parse_engine_spec, resolve
from sim.run.simulate import simulate
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model
from tests.conftest import config
from tests.test_cli import sim

V3 = load_model("deepseek-v3")


def settings(spec: str, gpu: str = "h20", model=V3, **args):
    return resolve(spec, load_hardware(gpu), model, 8, "server", args)


# release -> (rule set, block-FP8 kernel on Hopper, compiles while serving, schedule_policy)
EXPECTED = {
    "0.4.2": ("0.4.0.post1", "triton", False, "lpm"),
    "0.4.3": ("0.4.3", "cutlass", False, "lpm"),
    "0.4.3.post2": ("0.4.3", "cutlass", False, "lpm"),
    "0.4.3.post3": ("0.4.3.post3", "triton", False, "fcfs"),
    "0.4.4.post1": ("0.4.3.post3", "triton", False, "fcfs"),
    "0.4.4.post2": ("0.4.4.post2", "deepgemm", True, "fcfs"),
    "0.4.5": ("0.4.4.post2", "deepgemm", True, "fcfs"),
    "0.4.5.post1": ("0.4.5.post1", "triton", False, "fcfs"),
    "0.4.5.post3": ("0.4.5.post3", "triton", False, "fcfs"),
    "0.4.6": ("0.4.6", "deepgemm", False, "fcfs"),
}


@pytest.mark.parametrize("release", EXPECTED)
def test_block_fp8_kernel_by_release_on_hopper(release):
    s = settings(f"sglang@{release}")
    rule_set, backend, jit, policy = EXPECTED[release]
    assert (s.rule_set, s.fp8_gemm_backend, s.jit_first_use, s.policy) == (
        rule_set,
        backend,
        jit,
        policy,
    )
    assert s.rules["fp8_gemm_backend"].startswith(f"sglang {release}")


def test_0_4_3_and_0_4_5_resolve_to_different_rule_sets_on_h20():
    before, after = settings("sglang@0.4.3"), settings("sglang@0.4.5")
    assert parse_engine_spec("sglang@0.4.5")[2] == "0.4.4.post2"
    differ = {
        k
        for k in ("fp8_gemm_backend", "jit_first_use", "policy", "gpu_memory_utilization")
        if getattr(before, k) != getattr(after, k)
    }
    assert differ == {"fp8_gemm_backend", "jit_first_use", "policy"}
    assert "DeepGEMM" in after.rules["fp8_gemm_backend"]
    assert "CUTLASS" in before.rules["fp8_gemm_backend"]
    assert "sglang#4773" in after.rules["jit_first_use"]
    # the same releases' memory defaults: 0.81 at TP 8, graphs to 160 (no 0.4.6 tiers yet)
    for s in (before, after):
        assert s.gpu_memory_utilization == 0.81
        assert max(s.cudagraph_capture_sizes) == 160


def test_deepgemm_off_below_hopper():
    s = settings("sglang@0.4.5", gpu="a100-80gb")
    assert (s.fp8_gemm_backend, s.jit_first_use) == ("triton", False)


def test_deepgemm_kernel_follows_its_heuristic():
    # M up to 64 shares one BLOCK_M 64 kernel; a larger M changes BLOCK_M and, from 512, the
    # TMA multicast: a new kernel to compile
    assert deepgemm_kernel(1, 7168, 2048, 78) == deepgemm_kernel(64, 7168, 2048, 78)
    small, big = deepgemm_kernel(64, 7168, 2048, 78), deepgemm_kernel(4096, 7168, 2048, 78)
    assert small[2] == 64 and big[2] == 128
    assert big[5] == 2 and small[5] == 1
    # stages fill the SM90's shared memory: fewer for a wider tile
    assert 4 <= big[4] <= 8


def tally(**kw):
    s = settings("sglang@0.4.5", **kw)
    from sim.cost.prior import CostProfile
    from sim.cost.profiles import choose_pricer
    from sim.cost.step import CostModel

    hw = load_hardware("h20")
    pricer = choose_pricer(hw, "auto", CostProfile.load("prior"), "sglang", "0.4.5").pricer
    cost = CostModel(V3, s, 8, "auto", pricer, CostProfile.load("prior"))
    return FirstUse.of(s, hw, cost.terms, cost.dense_dtype)


def test_a_kernel_is_compiled_once_and_graphs_never_compile():
    t = tally()
    assert t is not None and len(t.shapes) == 9  # MLA projections, dense MLP, shared expert
    assert t.charge(160, decode_only=True, start_s=0.0) == 0.0  # captured at start-up
    first = t.charge(4021, decode_only=False, start_s=1.0)
    assert first == pytest.approx(len(t.shapes) * COMPILE_S)  # a new kernel per GEMM shape
    assert t.charge(4021, decode_only=False, start_s=2.0) == 0.0  # compiled: not paid again
    assert t.charge(4000, decode_only=False, start_s=3.0) == 0.0  # the same kernels
    assert [e[1] for e in t.events] == [9]


def test_no_tally_where_nothing_compiles_while_serving():
    s = settings("sglang@0.4.6")
    assert FirstUse.of(s, load_hardware("h20"), [], "fp8_block") is None
    bf16 = replace(settings("sglang@0.4.5"), jit_first_use=True)
    assert FirstUse.of(bf16, load_hardware("h20"), [], "bf16") is None


def run(tmp_path, name, engine="sglang@0.4.5", **workload):
    cfg = config(
        workload={"kind": "burst", "num_requests": 16, **workload},
        engine=engine,
        model="deepseek-v3",
        hardware="h20-141gb",
        parallel={"tp": 8},
        engine_args={"mem_fraction_static": 0.95},
    )
    return simulate(cfg, run_dir=tmp_path / name)


def test_a_short_benchmark_pays_the_compiles(tmp_path):
    cold = run(tmp_path, "cold").summary
    fu = cold["sim"]["first_use"]
    assert fu["compiles"] > 0 and fu["paid_in_window"] == fu["seconds"] > 0
    assert fu["seconds"] == pytest.approx(fu["compiles"] * COMPILE_S)
    # the release before compiles nothing while serving, and its burst ends sooner
    before = run(tmp_path, "before", engine="sglang@0.4.3").summary
    assert before["sim"]["first_use"] is None
    assert cold["duration"] > before["duration"] + fu["seconds"] * 0.9


def test_warm_up_requests_hide_the_compiles(tmp_path):
    # one request a minute, each prefilled alone: the same kernels, compiled by the first
    # (at 1 req/s the others arrive during its compiles and form a larger, new prefill)
    # (a prompt of 256 would run the kernels of the decode graphs' 129..256, compiled at start)
    paced = {"kind": "constant", "rate": 1 / 60, "num_requests": 8, "input_len": 1000}
    cold = run(tmp_path, "cold", **paced).summary
    warm = run(tmp_path, "warm", **paced, warmup_requests=4).summary
    assert cold["sim"]["first_use"]["paid_in_window"] == pytest.approx(9 * COMPILE_S)
    assert warm["sim"]["first_use"]["paid_in_window"] == 0.0
    assert warm["sim"]["first_use"]["seconds"] == pytest.approx(9 * COMPILE_S)
    assert warm["mean_ttft_ms"] < cold["mean_ttft_ms"]


def test_first_use_is_deterministic_to_the_byte(tmp_path):
    a, b = run(tmp_path, "a"), run(tmp_path, "b")
    for name in ("steps", "requests"):
        x, y = getattr(a, name), getattr(b, name)
        assert list(x.columns) == list(y.columns)
        for col in x.columns:
            assert np.array_equal(x[col].to_numpy(), y[col].to_numpy())
    keep = ("first_use", "fast_forwarded_steps")
    assert json.dumps({k: a.summary["sim"][k] for k in keep}) == json.dumps(
        {k: b.summary["sim"][k] for k in keep}
    )


def test_upgrade_diff_names_the_gemm_change_and_its_first_use_cost(tmp_path):
    out = tmp_path / "ud"
    r = sim(
        "scenario=upgrade_diff",
        "upgrade.before=sglang@0.4.3",
        "upgrade.after=sglang@0.4.5",
        "model=deepseek-v3",
        "hardware=h20-141gb",
        "parallel.tp=8",
        "engine_args.mem_fraction_static=0.95",
        "workload=burst",
        "workload.num_requests=16",
        "upgrade.seeds=1",
        "upgrade.loads=[1.0]",
        f"hydra.run.dir={out}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    text = summary["verdict"]
    assert "the two simulated runs are the same" not in text
    assert text.startswith("output throughput fell")
    assert "jit_first_use (False -> True, kernels:" in text
    assert "compiling GPU kernels at their first use in the measured window (0 -> " in text
    assert "fp8_gemm_backend (cutlass -> deepgemm) is not priced" in text
    rows = {row["setting"]: row for row in summary["attribution"]}
    assert rows["jit_first_use"]["category"] == "kernels"
    assert "sglang#4773" in rows["jit_first_use"]["rule"]
    assert rows["jit_first_use"]["restore_flag"] == "SGL_ENABLE_JIT_DEEPGEMM=0"
    assert rows["fp8_gemm_backend"]["inert"] and rows["schedule_policy"]["inert"]


def test_rule_sets_that_differ_on_a_workload_they_do_not_move(tmp_path):
    # 0.4.3 -> 0.4.3.post3 on a BF16 model: CUTLASS -> Triton for block FP8 (none here) and
    # lpm -> fcfs (16 requests admitted at once): the runs are the same, and the verdict says
    # which settings differ and why they move nothing
    out = tmp_path / "same"
    r = sim(
        "scenario=upgrade_diff",
        "upgrade.before=sglang@0.4.3",
        "upgrade.after=sglang@0.4.3.post3",
        "model=llama-3.1-8b",
        "hardware=h100-sxm",
        "workload=burst",
        "workload.num_requests=16",
        "upgrade.seeds=1",
        "upgrade.loads=[1.0]",
        f"hydra.run.dir={out}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    text = json.loads((out / "summary.json").read_text())["verdict"]
    assert " is unchanged from sglang@0.4.3 to sglang@0.4.3.post3 " in text
    assert "fp8_gemm_backend (cutlass -> triton) is not priced" in text
    assert "schedule_policy (lpm -> fcfs) changes nothing on this workload" in text
