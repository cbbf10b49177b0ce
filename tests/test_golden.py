"""Hand-worked numbers: KV bytes per token, parameter counts, one decode step's roofline time."""

from __future__ import annotations

import numpy as np
import pytest

from sim.cost.kernels import KernelPricer
from sim.cost.step import CostModel
from sim.engines.resolve import resolve
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model
from tests.conftest import unit_profile


@pytest.mark.parametrize(
    ("name", "bytes_per_token"),
    [
        ("llama-3.1-8b", 2 * 8 * 128 * 32 * 2),  # K and V x 8 KV heads x 128 x 32 layers x bf16
        ("llama-3.1-70b", 2 * 8 * 128 * 80 * 2),
        ("deepseek-v3", (512 + 64) * 61 * 2),  # MLA latent + rope key x 61 layers x bf16
    ],
)
def test_kv_bytes_per_token(name, bytes_per_token):
    assert load_model(name).kv_bytes_per_token() == bytes_per_token
    assert bytes_per_token in (131_072, 327_680, 70_272)


def test_kv_bytes_fp8_halves_bf16():
    m = load_model("llama-3.1-8b")
    assert m.kv_bytes_per_token("fp8") * 2 == m.kv_bytes_per_token("bf16") == 131_072


def test_llama_3_1_8b_parameters():
    # embed + untied head: 2 x 128256 x 4096; per layer: q 4096^2, k,v 4096 x 1024, o 4096^2,
    # MLP 3 x 4096 x 14336, two norms of 4096; final norm 4096.
    layer = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336 + 2 * 4096
    total = 2 * 128256 * 4096 + 32 * layer + 4096
    p = load_model("llama-3.1-8b").params
    assert p.total == total == 8_030_261_248
    assert p.active == p.total
    assert load_model("llama-3.1-8b").weight_bytes("bf16") == 2 * total


def test_llama_3_1_8b_flops_per_token():
    m = load_model("llama-3.1-8b")
    # 2 x (non-embedding weights + LM head): 2 x (8,030,261,248 - 2 x 525,336,576 + 525,336,576)
    assert m.flops_per_token(0) == 2 * (8_030_261_248 - 525_336_576) == 15_009_849_344
    # each new token at context 1,000: QK^T and PV, 2 x 2 x 128 per head per key, 32 heads x 32
    assert m.flops_per_token(1000) - m.flops_per_token(0) == 4 * 128 * 1000 * 32 * 32


@pytest.mark.parametrize(
    ("name", "total_b", "active_b"),
    [  # published sizes (billions), loose: model cards round and some count embeddings
        ("deepseek-v3", 671, 37),
        ("mixtral-8x7b-v0.1", 46.7, 12.9),
        ("qwen3-30b-a3b", 30.5, 3.3),
        ("llama-4-scout-17b-16e", 109, 17),
        ("gpt-oss-120b", 116.8, 5.1),
    ],
)
def test_moe_parameter_counts(name, total_b, active_b):
    p = load_model(name).params
    assert p.total / 1e9 == pytest.approx(total_b, rel=0.03)
    assert p.active / 1e9 == pytest.approx(active_b, rel=0.15)


def test_hand_worked_decode_step_time():
    """One request decoding at context 1023 (1,024 keys), Llama-3.1-8B, one H100-SXM, bf16,
    eager, the prior with every efficiency 1, no launch or CPU cost. Worked by hand, every
    kernel memory-bound at 3.35e12 B/s:

    per layer, GEMM weights 4096*(4096+1024+1024) + 4096*4096 + 3*4096*14336 = 218,103,808
        params -> 436,207,616 B; GEMM activations in and out (1 token):
        (4096+6144) + (4096+4096) + (4096+28672) + (14336+4096) = 69,632 values -> 139,264 B
    per layer, decode attention: K and V of 1,024 tokens x 8 heads x 128 x 2 B = 4,194,304 B,
        plus the query and output of 32 heads x 128 x 2 B x 2 = 16,384 B
    per layer, elementwise: two fused add+norms 2 x 4 x 4096 x 2 B = 65,536 B, SiLU-and-mul
        3 x 14336 x 2 B = 86,016 B, rotary embedding (32 + 8) x 128 x 2 x 2 B = 20,480 B
    once: embedding 2 x 4096 x 2 B = 16,384 B; LM head 128,256 x 4096 x 2 B = 1,050,673,152 B
        plus its 4096 + 128,256 activations x 2 B = 264,704 B; sampler 3 x 128,256 x 4 B
    """
    bw = 3.35e12
    per_layer = 436_207_616 + 139_264 + 4_194_304 + 16_384 + 65_536 + 86_016 + 20_480
    once = 16_384 + 1_050_673_152 + 264_704 + 3 * 128_256 * 4
    expected = (32 * per_layer + once) / bw
    assert expected == pytest.approx(4.5241e-3, rel=1e-4)

    hw, model = load_hardware("h100-sxm"), load_model("llama-3.1-8b")
    settings = resolve(
        "vllm",
        hw,
        model,
        1,
        overrides={
            "enforce_eager": True,
            "cpu_step_overhead_s": 0.0,
            "cpu_per_seq_overhead_s": 0.0,
            "cpu_output_per_seq_s": 0.0,
            "cpu_exposed_s": 0.0,
        },
    )
    cost = CostModel(model, settings, 1, "bf16", KernelPricer(hw, unit_profile()), unit_profile())
    got = cost.cost(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.array([1023]))
    assert got.total_s == pytest.approx(expected, rel=1e-9)
    assert got.attention_decode_s == pytest.approx(32 * (4_194_304 + 16_384) / bw, rel=1e-9)


def test_cuda_graph_padding_and_async_overlap():
    hw, model = load_hardware("h100-sxm"), load_model("llama-3.1-8b")
    s = resolve("vllm", hw, model, 1)
    cost = CostModel(model, s, 1, "auto", KernelPricer(hw, unit_profile()), unit_profile())
    empty = np.zeros(0, dtype=np.int64)
    at_9 = cost.cost(empty, empty, np.full(9, 100))
    at_16 = cost.cost(empty, empty, np.full(16, 100))
    assert at_9.linear_s == at_16.linear_s  # 9 tokens run in the 16-token graph
    assert at_9.launch_s == 0.0  # a uniform decode batch replays a full graph
    # async scheduling hides the CPU work; only the exposed part stays on the critical path
    assert at_9.total_s == max(at_9.gpu_s, at_9.cpu_hidden_s) + s.cpu_exposed_s
    assert at_9.cpu_serial_s == s.cpu_exposed_s > 0
