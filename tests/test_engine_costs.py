"""What the engine families change in a step's time: CPU overlap by release, multi-step,
swap over PCIe, V0's decode-only CUDA graphs, expert parallelism, pipeline stages."""

from __future__ import annotations

import numpy as np
import pytest

from sim.cost.kernels import KernelPricer
from sim.cost.step import CostModel
from sim.cost.surface import Surface, grid
from sim.engines.resolve import resolve
from sim.schedulers.base import StepPlan
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model
from tests.conftest import unit_profile

H100 = load_hardware("h100-sxm")
LLAMA = load_model("llama-3.1-8b")
EMPTY = np.zeros(0, dtype=np.int64)


def cost_model(spec="vllm", model=LLAMA, tp=1, pp=1, ep=1, launch_s=0.0, **args) -> CostModel:
    s = resolve(spec, H100, model, tp, overrides=args)
    profile = unit_profile(kernel_launch_s=launch_s)
    return CostModel(model, s, tp, "auto", KernelPricer(H100, profile), profile, pp, ep)


def decode_plan(n: int, context: int = 100, swap_bytes: int = 0) -> StepPlan:
    return StepPlan(
        requests=[None] * n,
        num_new_tokens=[1] * n,
        num_context_tokens=[context] * n,
        num_prefill_tokens=0,
        num_decode_tokens=n,
        num_preempted=0,
        swap_bytes=swap_bytes,
    )


@pytest.mark.parametrize(
    ("spec", "serial", "hidden"),
    [
        # V0 before 0.6: everything serial: 3 ms + 32 x (35 + 25) us
        ("vllm@0.5.5", 3e-3 + 32 * 6e-5, 0.0),
        # 0.6: output processing (25 us per sequence) overlaps the GPU
        ("vllm@0.6.6", 2e-3 + 32 * 3.5e-5, 32 * 2.5e-5),
        # V1 synchronous: the engine core is serial, the frontend process overlaps
        ("vllm@0.10.2", 1e-3 + 32 * 1.5e-5, 32 * 1e-5),
        # V1 async scheduling: only 200 us exposed
        ("vllm@0.14.0", 2e-4, 1e-3 + 32 * 2.5e-5),
        ("sglang", 1e-4, 1.5e-3 + 32 * 4e-6),
        ("trtllm", 5.8e-4, 1e-3 + 32 * 2.5e-5),
    ],
)
def test_cpu_time_by_release(spec, serial, hidden):
    c = cost_model(spec).step_cost(decode_plan(32))
    assert c.cpu_serial_s == pytest.approx(serial)
    assert c.cpu_hidden_s == pytest.approx(hidden)
    assert c.total_s == pytest.approx(max(c.gpu_s, hidden) + serial)


def test_multi_step_pays_the_engine_loop_once_per_window():
    one = cost_model("vllm@0.6.6").step_cost(decode_plan(32))
    eight = cost_model("vllm@0.6.6", num_scheduler_steps=8).step_cost(decode_plan(32))
    assert eight.cpu_serial_s == pytest.approx(one.cpu_serial_s / 8)


def test_prefix_hashing_costs_per_prefill_token_from_sha256():
    """0.10.2 switched the prefix-cache hash from builtin (13 ns/token) to sha256 (100)."""
    pre = np.array([4096])
    old = cost_model("vllm@0.10.0").cost(pre, np.array([0]), EMPTY)
    new = cost_model("vllm@0.10.2").cost(pre, np.array([0]), EMPTY)
    assert new.cpu_serial_s - old.cpu_serial_s == pytest.approx(4096 * (1e-7 - 1.3e-8))


def test_swap_crosses_pcie_inside_the_step():
    cm = cost_model("vllm@0.6.6", preemption_mode="swap")
    plain = cm.step_cost(decode_plan(8))
    swapped = cm.step_cost(decode_plan(8, swap_bytes=640_000_000))
    assert swapped.total_s - plain.total_s == pytest.approx(640_000_000 / H100.pcie_bytes_per_s)


def test_v0_graphs_cover_decode_only_batches():
    cm = cost_model("vllm@0.6.6", launch_s=5e-6)  # FULL_DECODE_ONLY, sizes up to 256
    decode = cm.cost(EMPTY, EMPTY, np.full(9, 100))
    mixed = cm.cost(np.array([64]), np.array([0]), np.full(9, 100))
    assert decode.launch_s == 0.0
    assert mixed.launch_s > 0.0  # a batch with a prefill runs eagerly


def test_expert_parallelism_runs_whole_experts_on_fewer_gpus():
    qwen = load_model("qwen3-30b-a3b")
    tp = cost_model("vllm", model=qwen, tp=2)
    ep = cost_model("vllm", model=qwen, tp=2, ep=2)
    t = 256
    e = qwen.moe
    got = ep._token_costs(t, t)[1]
    want = sum(
        term.count
        * float(
            ep.pricer.moe_s(
                t / 2,
                qwen.hidden_size,
                e.expert_intermediate_size,
                e.experts_per_token,
                e.num_experts / 2,
            ).sum()
        )
        for term in ep.terms
        if term.layer.moe
    )
    assert got == pytest.approx(want)
    assert tp._token_costs(t, t)[1] != got
    assert tp._token_costs(t, t)[0] == pytest.approx(ep._token_costs(t, t)[0])  # dense parts


def test_pipeline_stages_split_the_gpu_time():
    cm = cost_model("vllm", pp=2)
    c = cm.step_cost(decode_plan(16))
    assert c.p2p_s > 0
    assert c.stage_s == pytest.approx(max(c.gpu_s / 2, c.cpu_hidden_s) + c.cpu_serial_s + c.p2p_s)
    assert c.latency_s == pytest.approx(c.total_s + c.p2p_s)


def test_surfaces_stay_flat_beyond_the_measured_range():
    """A fitted surface clamps each feature to the range its data covered, so a shape far
    beyond the measurements is priced at the edge's efficiency, not extrapolated."""
    x = np.column_stack([np.linspace(0, 4, 50)])
    y = 0.5 * x[:, 0]  # a slope inside the data
    s = grid(("f",), [np.arange(0, 15, 2.0)]).fitted(x, y, 1.0)
    assert s.bounds == ((0.0, 4.0),)
    assert s(np.array([[14.0]]))[0] == pytest.approx(s(np.array([[4.0]]))[0])
    again = Surface.from_dict(s.to_dict())
    assert again.bounds == s.bounds


def test_a_chunk_after_cached_tokens_takes_a_measured_prefills_efficiency():
    """The prefill tables start from an empty cache; a 512-token chunk after 8,000 cached
    tokens is priced with the efficiency of the measured prefill whose queries see as many
    keys, not by extrapolating the surface off the measured shapes."""
    from sim.cost.kernels import AttentionShape
    from sim.cost.profiles import GpuProfile
    from sim.paths import CALIBRATION_DIR

    profile = GpuProfile.load(CALIBRATION_DIR / "profiles" / "h100-sxm.json")
    shape = AttentionShape(32, 8, 128, 0, False, "bf16", "FLASH_ATTN_FA3")
    for family in ("vllm@0.14.0", "vllm@0.19.0", "vllm@0.24.0"):
        pricer = profile.pricer(H100, unit_profile(), family)
        chunk = float(pricer.prefill_s(np.array([512]), np.array([8000]), 1, shape)[0])
        whole = float(pricer.prefill_s(np.array([8512]), np.array([0]), 1, shape)[0])
        # the chunk does (512 x 8,256) / (8,512^2 / 2) = 11.7% of the whole prefill's work
        assert 0.08 * whole < chunk < 0.2 * whole, family


def test_a_weight_format_one_family_lacks_comes_from_another_family():
    """H100's vLLM 0.14 tables have no fp4 MoE; its 0.24 tables do: a measured neighbour
    beats the roofline prior."""
    from sim.cost.prior import CostProfile
    from sim.cost.profiles import choose_pricer

    hw = load_hardware("h100-sxm")
    choice = choose_pricer(hw, "auto", CostProfile.load("prior"), "vllm", "0.12.0")
    assert choice.family == "vllm@0.14.0"
    assert "the nearest measured release to vllm 0.12.0" in choice.source
    choice.pricer.moe_s(64, 2880, 2880, 4, 128, "fp4")
    assert choice.pricer.used["moe"] == "moe/fp4"
