"""scenario=long_context, one decode step of the long request alone at its context, split into
reading the weights and reading the KV cache, with the bytes each reads per GPU: the KV of
every token (windowed layers: their window), and the weights a step of one sequence touches,
which for a mixture of experts is the dense part and its one token's routed experts, not
every expert the GPU holds."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from sim.cost.roofline import WEIGHT_BYTES
from sim.cost.routing import experts_touched
from sim.cost.step import CostModel
from sim.scenarios.long_context.arithmetic import Fit, kv_bytes_sequence_per_gpu
from sim.specs.model import ModelSpec


@dataclass(frozen=True, slots=True)
class Decode:
    """One decode step of the sequence alone at `context` tokens."""

    context: int
    total_s: float
    weights_s: float  # GEMMs, experts, LM head: reading the weights
    kv_s: float  # attention: reading the KV cache
    other_s: float  # all-reduce, norms, launches, CPU
    weights_bytes_per_gpu: int  # the weights one step reads (weights_read_bytes_per_gpu)
    kv_bytes_per_gpu: int  # the KV one step reads
    weights_resident_bytes_per_gpu: int  # every weight the GPU holds (section 1's)
    experts_read_per_layer: float  # routed experts one step reads per MoE layer (0: dense)
    num_experts: int  # routed experts per MoE layer (0: dense)

    @property
    def total_ms(self) -> float:
        return self.total_s * 1e3

    @property
    def weights_ms(self) -> float:
        return self.weights_s * 1e3

    @property
    def kv_ms(self) -> float:
        return self.kv_s * 1e3

    @property
    def other_ms(self) -> float:
        return self.other_s * 1e3

    @property
    def summary(self) -> dict:
        """summary.json's `decode`: the fields, every `*_s` as `*_ms`."""
        return {
            (k[:-2] + "_ms" if k.endswith("_s") else k): (v * 1e3 if k.endswith("_s") else v)
            for k, v in asdict(self).items()
        }


def kv_read_bytes_per_gpu(model: ModelSpec, fit: Fit, kv_dtype: str) -> int:
    """The KV one decode step of `fit`'s sequence reads on one GPU: windowed layers read their
    window only, whatever the allocator holds for them."""
    return kv_bytes_sequence_per_gpu(model, fit.num_tokens, kv_dtype, fit.tp, fit.pp, fit.cp)


def weights_read_bytes_per_gpu(cost: CostModel) -> int:
    """The weight bytes one decode step of one sequence reads on one GPU, as the step cost
    prices them (sim/cost/step.py's layer terms and sim/cost/roofline.py's rooflines): every
    dense GEMM's weights (attention projections, dense MLP, shared experts, router), the routed
    experts its one token goes to (experts_touched: its top-k per MoE layer, not every expert
    the GPU holds) and the LM head, over the pp stages. The embedding table is looked up, not
    read. The scenario's cost models slice every expert over tensor parallelism (ep = 1)."""
    m, tp = cost.model, cost.tp
    dense_bytes = WEIGHT_BYTES[cost.dense_dtype]
    total = 0.0
    for term in cost.terms:
        total += term.count * dense_bytes * float(np.dot(term.gemm_n, term.gemm_k))
        if term.layer.moe:
            e = m.moe
            expert = 3.0 * m.hidden_size * e.expert_intermediate_size / tp
            touched = float(experts_touched(1, e.experts_per_token, e.num_experts))
            total += term.count * touched * expert * WEIGHT_BYTES[cost.expert_dtype]
    total += WEIGHT_BYTES["bf16"] * m.vocab_size / tp * m.hidden_size  # the LM head
    return int(total / cost.pp)


def decode_at(cost: CostModel, context: int, kv_bytes_per_gpu: int, resident_bytes: int) -> Decode:
    """One decode step alone at `context` (`resident_bytes`: the weights one GPU holds)."""
    step = cost.cost([], [], [context])
    weights = step.linear_s + step.moe_s + step.lm_head_s
    kv = step.attention_decode_s
    total = step.total_s
    e = cost.model.moe
    return Decode(
        context, total, weights, kv, total - weights - kv, weights_read_bytes_per_gpu(cost),
        kv_bytes_per_gpu, resident_bytes,
        float(experts_touched(1, e.experts_per_token, e.num_experts)) if e else 0.0,
        e.num_experts if e else 0,
    )  # fmt: skip
