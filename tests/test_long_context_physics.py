"""scenario=long_context: no figure of the report moves bytes faster than the GPU's memory or
does FLOPs faster than its peak (issue 41, item 4: Llama-4-Scout's decode was said to read
every resident expert, 25.1 GiB per GPU in 2.9 ms, 9 TB/s on a 3.35 TB/s H100)."""

from __future__ import annotations

import re

import pytest

from sim.config import SimConfig
from sim.cost.routing import experts_touched
from sim.scenarios.long_context.arithmetic import prefill_flops
from sim.scenarios.long_context.runs import Context
from sim.scenarios.long_context.study import run_long_context
from sim.scenarios.long_context.text import decode_section, decode_sentence
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model

GIB = 2**30


def study_of(model: str, engine: str = "vllm@0.8.3", hardware: str = "h100-sxm", tp: int = 8):
    lc = {"background": False, "architectures": [], "jobs": 1, "prompt_tokens": 131_072}
    cfg = SimConfig.from_mapping(
        {"engine": engine, "model": model, "hardware": hardware, "parallel": {"tp": tp},
         "long_context": lc}
    )  # fmt: skip
    return cfg, run_long_context(cfg)


def printed_weights_gib(sentence: str) -> float:
    """The GiB the decode sentence says a step reads of weights."""
    return float(re.search(r"% reads ([\d.,]+) GiB of (the [\d.,]+ GiB of )?weights", sentence)[1])


def test_scout_decode_reads_its_tokens_experts_within_the_bandwidth():
    """The issue's case: the weights a decode step is said to read, over the time it is said
    to take, fit the H100's 3.35 TB/s; the step reads the dense layers and one token's top-1
    of 16 routed experts per MoE layer, not every resident expert."""
    _, study = study_of("llama-4-scout-17b-16e")
    d, hbm = study.decode, load_hardware("h100-sxm").hbm_bytes_per_s
    assert d.weights_bytes_per_gpu * study.at.pp / d.weights_s <= hbm
    printed = printed_weights_gib(decode_sentence(study))
    assert (printed - 0.05) * GIB / d.weights_s <= hbm  # as printed, to its rounding
    table = "\n".join(decode_section(study))
    assert f"| {printed:.1f} GiB |" in table  # the table's row says the same
    assert d.weights_bytes_per_gpu < 0.25 * d.weights_resident_bytes_per_gpu
    assert (d.experts_read_per_layer, d.num_experts) == (1.0, 16)
    assert study.summary["decode"]["weights_bytes_per_gpu"] == d.weights_bytes_per_gpu


def test_weights_read_count_the_routed_experts_a_token_touches():
    """The weights minus what one decode token does not read (an untied embedding table and
    the experts it does not route to) is what the step reads, model by model (each GPU its
    1/tp share, the router whole)."""
    for name, hw, tp in (("llama-4-scout-17b-16e", "h100-sxm", 8), ("qwen3-30b-a3b", "h100-sxm",
                         4), ("llama-3.1-8b", "h100-sxm", 8)):  # fmt: skip
        _, study = study_of(name, engine="vllm", hardware=hw, tp=tp)
        m, d = load_model(name), study.decode
        unread = m.params.embedding - m.vocab_size * m.hidden_size  # an untied input table
        if m.moe:  # the experts its token does not route to
            touched = float(experts_touched(1, m.moe.experts_per_token, m.moe.num_experts))
            unread += (m.moe.num_experts - touched) * m.expert_params / m.moe.num_experts
        moe_layers = sum(1 for layer in m.layers if layer.moe)
        router = m.moe.num_experts * m.hidden_size * moe_layers if m.moe else 0  # replicated
        expected = ((m.params.total - unread - router) / study.at.tp + router) * 2  # bf16
        assert d.weights_bytes_per_gpu == pytest.approx(expected, rel=0.01), name


@pytest.mark.parametrize(
    ("model", "hardware", "tp"),
    [("llama-3.1-8b", "h100-sxm", 8), ("llama-4-scout-17b-16e", "h100-sxm", 8),
     ("qwen3-30b-a3b", "h100-sxm", 4), ("gemma-3-27b-it", "h200", 8),
     ("deepseek-v3", "h200", 8)],
)  # fmt: skip
def test_every_figure_within_the_gpus_peaks(model, hardware, tp):
    """Bytes over time <= HBM bandwidth (decode's weights and KV), FLOPs over time <= the
    GPU's fastest peak (prefill's linear layers and attention, over every GPU of the replica)."""
    cfg, study = study_of(model, engine="vllm", hardware=hardware, tp=tp)
    hw = load_hardware(hardware)
    d, at = study.decode, study.at
    assert d.weights_bytes_per_gpu * at.pp / d.weights_s <= hw.hbm_bytes_per_s
    assert d.kv_bytes_per_gpu * at.pp / d.kv_s <= hw.hbm_bytes_per_s
    linear, attention = prefill_flops(Context.of(cfg).model, study.prompt_tokens)
    peak = max(hw.flops_per_s.values()) * at.num_gpus
    assert linear / study.prefill.linear_s <= peak
    assert attention / study.prefill.attention_s <= peak
