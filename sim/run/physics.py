"""What physics asks of a step or a kernel at the least: the bytes it must move through HBM and
over a link, and the FLOPs it must do, from the model's architecture and the replica's layout
alone. The audit (sim/run/audit.py) holds the run's prices against these; they are worked out
here from the model, not from the cost model's rooflines, so that a wrong byte count in a
roofline cannot hide itself. Every figure is a lower bound, so a price under it is a price no
GPU can reach:

    weights    every dense weight of this GPU's shard is read once a step (attention
               projections, dense MLPs, shared experts, routers; replicated pieces counted at
               1/tp), the LM head's once a step with a row sampled
    experts    the routed experts the step's tokens touch, expected: each of E experts is
               touched by t tokens choosing top-k with probability 1 - (1 - k/E)^t
    FLOPs      2 x tokens x dense parameters / tp, 2 x tokens x top-k x expert parameters over
               the GPUs sharing them, 2 x rows x vocab x hidden / tp, each at its dtype's peak
    attention  per sequence: the KV it reads (its keys, window-bounded, at the KV dtype) and
               4 x heads x head_dim x the query-key pairs it scores (MLA: its latent)
    links      an all-reduce of S bytes over n GPUs inside a server sends (n - 1)/n x S from
               each GPU; across N servers, (N - 1)/N x S leaves each server through its NICs,
               after at least one crossing of the server link's latency
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.cost.comm import Topology
from sim.cost.roofline import attention_dtype, causal_pairs, compute_dtype
from sim.cost.routing import routed_experts
from sim.kv.memory import kv_heads_per_gpu
from sim.specs.hardware import Hardware
from sim.specs.model import DTYPE_BYTES, Attention, Layer, ModelSpec

ACT_BYTES = 2  # bf16 activations and LM head


@dataclass(frozen=True, slots=True)
class GpuShare:
    """What one GPU of a replica reads and computes per step, at the least (per pipeline
    column: a step's stages together read one TP rank's share of every layer)."""

    dense_bytes: float  # dense weights read every step
    dense_flops_per_token: float
    dense_peak: float  # FLOP/s of the dense GEMMs' dtype
    lm_head_bytes: float
    lm_head_flops_per_row: float
    bf16_peak: float
    local_experts: float  # routed experts this GPU holds (a 1/tp slice of each without EP)
    expert_bytes: float  # bytes of one local expert on this GPU, every MoE layer together
    expert_flops_per_token: float  # this GPU's share of one token's routed expert FLOPs
    expert_peak: float
    topk: int
    num_experts: int

    @classmethod
    def of(cls, model: ModelSpec, hw: Hardware, tp: int, ep: int, dense: str, expert: str):
        """`dense`, `expert`: the weight formats the GEMMs run in (CostModel.dense_dtype,
        .expert_dtype)."""
        p, h = model.params, model.hidden_size
        dense_params = (p.total_non_embedding - model.expert_params) / tp
        bf16 = hw.peak_flops_per_s("bf16")
        share = dict(
            dense_bytes=dense_params * DTYPE_BYTES[dense],
            dense_flops_per_token=2 * dense_params,
            dense_peak=hw.peak_flops_per_s(compute_dtype(hw, dense)),
            lm_head_bytes=model.vocab_size * h / tp * ACT_BYTES,
            lm_head_flops_per_row=2 * model.vocab_size * h / tp,
            bf16_peak=bf16,
        )
        moe = model.moe
        if moe is None:
            return cls(**share, local_experts=0.0, expert_bytes=0.0, expert_flops_per_token=0.0,
                       expert_peak=bf16, topk=0, num_experts=1)  # fmt: skip
        layers = sum(1 for layer in model.layers if layer.moe)
        each = 3 * h * moe.expert_intermediate_size * layers  # one expert, every MoE layer
        sliced = ep <= 1  # without EP every GPU holds a 1/tp slice of every expert
        return cls(
            **share,
            local_experts=moe.num_experts if sliced else moe.num_experts / ep,
            expert_bytes=each * DTYPE_BYTES[expert] / (tp if sliced else 1),
            expert_flops_per_token=2 * moe.experts_per_token * each / max(tp, ep),
            expert_peak=hw.peak_flops_per_s(compute_dtype(hw, expert)),
            topk=moe.experts_per_token,
            num_experts=moe.num_experts,
        )

    def experts_read(self, tokens) -> np.ndarray:
        """Bytes of the routed experts `tokens` tokens touch on this GPU (expected)."""
        t = np.asarray(tokens, dtype=np.float64)
        if not self.local_experts:
            return np.zeros_like(t)
        # the cost model's routing (sim/cost/routing.py): an EP rank sees 1/spread of the picks
        spread = self.num_experts / self.local_experts
        touched = routed_experts(t / spread, self.topk, self.local_experts, spread)
        return touched * self.expert_bytes

    def step_bytes(self, tokens, rows) -> np.ndarray:
        """HBM bytes a step of `tokens` tokens sampling `rows` rows reads at the least."""
        lm_head = np.where(np.asarray(rows) > 0, self.lm_head_bytes, 0.0)
        return self.dense_bytes + lm_head + self.experts_read(tokens)

    def step_flops_s(self, tokens, rows) -> np.ndarray:
        """Seconds the step's FLOPs take at the least, each at its dtype's peak."""
        t = np.asarray(tokens, dtype=np.float64)
        return (
            t * self.dense_flops_per_token / self.dense_peak
            + t * self.expert_flops_per_token / self.expert_peak
            + np.asarray(rows, dtype=np.float64) * self.lm_head_flops_per_row / self.bf16_peak
        )


@dataclass(frozen=True, slots=True)
class AttentionLayer:
    """One layer kind's attention on one GPU: what a sequence reads and scores per key."""

    attention: Attention
    window: int  # 0: none
    kv_bytes_per_key: float  # KV (or MLA latent) bytes per cached token on this GPU
    flops_per_pair: float  # FLOPs per query-key pair on this GPU
    topk: int  # sparse attention: keys attended per query (0: all)
    index_bytes_per_key: float  # DeepSeek's indexer: key bytes it reads per cached token
    density: float  # the share of the query-key pairs a sparse prefill computes
    peak_dtype: str  # the tensor-core rate its FLOPs run at (fp8 over an FP8 KV cache)

    @classmethod
    def of(
        cls, model: ModelSpec, layer: Layer, tp: int, kv_dtype: str, hw: Hardware,
        density: float = 1.0,
    ):  # fmt: skip
        heads = model.num_q_heads // tp
        if layer.attention is Attention.MLA:
            m = model.mla
            flops = 2 * heads * (m.latent_dim + m.kv_lora_rank)
            per_key = m.latent_dim * model.kv_dtype_bytes(kv_dtype)
        else:
            flops = 4 * heads * model.head_dim
            per_key = 2 * kv_heads_per_gpu(model, tp) * model.head_dim
            per_key *= model.kv_dtype_bytes(kv_dtype)
        indexer = model.indexer if layer.attention is Attention.MLA else None
        return cls(
            layer.attention,
            layer.window_tokens or 0,
            float(per_key),
            float(flops),
            indexer.topk_tokens if indexer else 0,
            float(indexer.bytes_per_token) if indexer else 0.0,
            density,
            attention_dtype(hw, kv_dtype),
        )

    def keys(self, position) -> np.ndarray:
        """Keys the query at `position` (1-based) attends to: all earlier tokens and itself,
        or the last `window`, or its own chunk's; at most top-k with sparse attention."""
        x = np.asarray(position, dtype=np.float64)
        if self.window and self.attention is Attention.CHUNKED:
            x = np.mod(x - 1, self.window) + 1
        elif self.window:
            x = np.minimum(x, self.window)
        return np.minimum(x, self.topk) if self.topk else x

    def decode_s(self, context, hw: Hardware) -> np.ndarray:
        """Least seconds of one decode token's attention after `context` cached tokens."""
        keys = self.keys(np.asarray(context, dtype=np.float64) + 1)
        nbytes = keys * self.kv_bytes_per_key + (np.asarray(context) + 1) * self.index_bytes_per_key
        flops = keys * self.flops_per_pair
        return np.maximum(nbytes / hw.hbm_bytes_per_s, flops / hw.peak_flops_per_s(self.peak_dtype))

    def prefill_s(self, q, c, hw: Hardware) -> np.ndarray:
        """Least seconds of prefill chunks' attention: q new tokens after c cached (arrays)."""
        q, c = np.asarray(q, dtype=np.float64), np.asarray(c, dtype=np.float64)
        last = c + q
        chunked = self.window and self.attention is Attention.CHUNKED
        bound = self.topk or self.window  # keys a query attends to at most (0: every one)
        pairs = causal_pairs(q, c, bound, chunked)  # (the count of each query's keys)
        read = self.keys(last)  # the last query's keys: the widest, but for a chunk boundary
        if chunked:  # crossed inside the chunk, where the query before it saw a whole window
            crossed = (q >= self.window) | ((c // self.window) != ((last - 1) // self.window))
            read = np.where(crossed, float(self.window), read)
        # a sparse prefill scores `density` of the pairs and reads as much of the keys at least
        flops = pairs * self.density * self.flops_per_pair
        nbytes = read * self.density * self.kv_bytes_per_key + last * self.index_bytes_per_key
        return np.maximum(nbytes / hw.hbm_bytes_per_s, flops / hw.peak_flops_per_s(self.peak_dtype))


def allreduce_floor_s(nbytes, gpus: int, topo: Topology, hw: Hardware) -> np.ndarray:
    """Least seconds of an all-reduce of `nbytes` per GPU over `gpus` consecutive ranks: what
    must leave each GPU (inside a server) or each server (across servers) at the link's rate,
    plus one crossing of the server link's latency."""
    s = np.asarray(nbytes, dtype=np.float64)
    servers = topo.servers(gpus)
    if servers <= 1:
        return (gpus - 1) / gpus * s / hw.peer_bytes_per_s
    link, g = topo.node_link, min(gpus, topo.gpus_per_node)
    nics = 1 if link.shared_by_gpus else g
    return link.latency_s + (servers - 1) / servers * s / (nics * link.bytes_per_s)
