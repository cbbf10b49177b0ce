"""SGLang's torch.compile in the price of a decode step: the measured ratio of
sgl-project/sglang#1008 (sim/engines/sglang_03.py) on every GPU part of a decode-only step
whose batch pads to a compiled capture size, nothing on prefill or mixed steps or past the
compile limit, and a fast-forwarded run of such steps as exact as one priced step by step.

The ratios come from the engine layer (`sglang_03.decode_ratios`); the cost model applies them
through `CostModel.decode_ratio` (sim/cost/step.py, with the fast-forward's pricing in
sim/cost/run_pricing.py)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.config import SimConfig
from sim.cost.prior import CostProfile
from sim.cost.profiles import choose_pricer
from sim.cost.step import CostModel
from sim.engines import sglang_03
from sim.engines.resolve import resolve
from sim.run.driver import check_conservation, run_loop
from sim.run.metrics import StepLog
from sim.run.setup import Setup
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model
from sim.workload.generate import generate

PRIOR = CostProfile.load("prior")


def settings(spec: str = "sglang@0.3.0", **args):
    return resolve(spec, load_hardware("h100-sxm"), load_model("llama-3.1-8b"), 1, "server", args)


def cost_model(**args) -> CostModel:
    """Llama-3.1-8B on an H100 under SGLang 0.3.0, priced by the H100's tables as a run is."""
    s = settings(**args)
    pricer = choose_pricer(load_hardware("h100-sxm"), "auto", PRIOR, "sglang", "0.3.0").pricer
    return CostModel(load_model("llama-3.1-8b"), s, 1, "bf16", pricer, PRIOR)


def test_the_ratios_are_the_compiled_capture_sizes_measured_ratios():
    on = settings(enable_torch_compile=True)
    ratios = sglang_03.decode_ratios(on)
    compiled = sglang_03.compiled_sizes("0.3.0", on.cudagraph_capture_sizes)
    assert tuple(ratios) == compiled == (1, 2, 4, 8, 16, 24, 32)
    assert ratios[1] == pytest.approx(6.42 / 7.37, abs=1e-3)  # sgl-project/sglang#1008
    assert all(ratios[b] == sglang_03.compiled_decode_ratio(b, compiled) for b in compiled)
    assert sglang_03.decode_ratios(settings()) == {}  # compile off: the default
    eager = settings(enable_torch_compile=True, disable_cuda_graph=True)
    assert sglang_03.decode_ratios(eager) == {}  # no decode graphs, nothing compiled
    vllm = settings("vllm@0.10.0")
    assert vllm.compile and sglang_03.decode_ratios(vllm) == {}  # vLLM's compile is not this
    # SGLang compiles inside its graph runner only: prefill and mixed steps run eager
    assert sglang_03.compiles_eager_steps(vllm) and not sglang_03.compiles_eager_steps(on)


def test_a_compiled_decode_step_takes_the_measured_share_of_its_gpu_time():
    on, off = cost_model(enable_torch_compile=True), cost_model()
    for batch, padded in ((1, 1), (3, 4), (20, 24), (32, 32)):
        a, b = on.cost([], [], [500] * batch), off.cost([], [], [500] * batch)
        r = sglang_03.decode_ratios(settings(enable_torch_compile=True))[padded]
        assert on.decode_ratio(batch) == r
        assert a.gpu_s == pytest.approx(b.gpu_s * r, rel=1e-12)
        assert a.attention_decode_s == pytest.approx(b.attention_decode_s * r, rel=1e-12)
        assert (a.cpu_serial_s, a.cpu_hidden_s) == (b.cpu_serial_s, b.cpu_hidden_s)
    # captured past the limit (40 > 32): not compiled; prefill and mixed steps: eager
    assert on.decode_ratio(40) == 1.0
    assert on.cost([], [], [500] * 40).gpu_s == off.cost([], [], [500] * 40).gpu_s
    assert on.cost([200], [0], [500] * 3).gpu_s == off.cost([200], [0], [500] * 3).gpu_s
    assert cost_model(enable_torch_compile=True, disable_cuda_graph=True).decode_ratio(1) == 1.0


def test_the_fast_forward_prices_compiled_decode_steps_as_cost_does():
    """decode_run, decode_rows and step_times give cost()'s bits for a compiled batch."""
    cm = cost_model(enable_torch_compile=True)
    assert cm.decode_ratio(3) == sglang_03.decode_ratios(settings(enable_torch_compile=True))[4]
    contexts = np.array([[300, 420, 510], [301, 421, 511], [302, 422, 512]], dtype=np.int64)
    gpu, _, total = cm.decode_run(contexts)
    rows = cm.decode_rows([300, 420, 510], 3)
    for k, row in enumerate(contexts.tolist()):
        c = cm.cost([], [], row)
        assert (gpu[k], total[k]) == (c.gpu_s, c.total_s)
        assert rows is None or (rows[0][k], rows[2][k]) == (c.gpu_s, c.total_s)
        assert cm.step_times([], [], row, 3) == (c.gpu_s, c.cpu_s, c.total_s)
    assert cm.decode_floor_s([300, 420, 510]) <= total.min()


def _run(ff_on: bool, compile_on: bool):
    cfg = SimConfig.from_mapping(
        {
            "engine": "sglang@0.3.0",
            "hardware": "h100-sxm",
            "fast_forward": ff_on,
            "engine_args": {"enable_torch_compile": compile_on},
            "workload": {"num_requests": 60, "rate": 6.0, "input_len": 300, "output_len": 120},
        }
    )
    log = StepLog()
    engines = Setup.from_config(cfg).engines(log)
    outcome = run_loop(generate(cfg.workload, np.random.default_rng(0)), engines[0])
    check_conservation(outcome, engines)
    return outcome, log.frame(), engines[0]


def test_a_compiled_run_fast_forwards_to_the_same_bytes_and_decodes_faster():
    (ra, sa, ea), (rb, sb, eb) = _run(False, True), _run(True, True)
    assert ea.num_fast_forwarded_steps == 0 and eb.num_fast_forwarded_steps > 0
    assert sa.equals(sb)
    assert ra.records.finish_s.tobytes() == rb.records.finish_s.tobytes()
    _, plain, _ = _run(True, False)

    def per_decode_token(frame) -> float:
        decode = frame.prefill_tokens == 0
        assert decode.any() and (frame.batch_size[decode] <= 32).all()  # all compiled sizes
        return frame.gpu_s[decode].sum() / frame.decode_tokens[decode].sum()

    ratio = per_decode_token(sb) / per_decode_token(plain)
    assert 0.871 - 0.01 < ratio < 0.992  # between the ratios at batch 1 and at the limit
