"""Rooflines and shape features of each kernel class, from the GPU's datasheet peaks.

One function per kernel class returns (FLOPs, bytes, features): the roofline is
max(FLOPs / peak, bytes / bandwidth); the features are what a calibrated efficiency surface
is a function of. Fitting (sim/calibrate/fitting.py) and pricing (sim/cost/kernels.py) both
use these, so they cannot drift apart. All functions take numpy arrays and broadcast.
"""

from __future__ import annotations

import math

import numpy as np

from sim.cost.routing import routed_experts
from sim.specs.hardware import Hardware

ACT_BYTES = 2.0
WEIGHT_BYTES = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp8_block": 1.0,
    "int4": 0.53125,
    "fp4": 0.53125,
}
GEMM_TILE = (128, 256)  # output tile used to measure how evenly a GEMM fills the SMs


def log2(x) -> np.ndarray:
    return np.log2(np.maximum(np.asarray(x, dtype=np.float64), 1e-30))


def _stack(*columns) -> np.ndarray:
    """Feature columns, broadcast to one length, as an n x features matrix."""
    return np.stack([np.atleast_1d(c) for c in np.broadcast_arrays(*columns)], 1)


def compute_dtype(hw: Hardware, dtype: str) -> str:
    """The tensor-core rate a weight format runs at (weight-only formats compute in bf16)."""
    base = "fp8" if dtype.startswith("fp8") else dtype
    return base if base in ("fp8", "fp4") and base in hw.flops_per_s else "bf16"


def attention_dtype(hw: Hardware, kv_dtype: str) -> str:
    """The tensor-core rate attention runs at: FP8 over an FP8 KV cache where the GPU has an
    FP8 rate (FlashAttention 3's and TensorRT-LLM's FP8 paths quantize the queries too, and
    measured FP8 prefills beat the bf16 peak), else bf16."""
    return "fp8" if kv_dtype == "fp8" and "fp8" in hw.flops_per_s else "bf16"


# ---- rooflines and features, one pair per kernel class -------------------------------------
def gemm_shape(hw: Hardware, m, n, k, dtype: str):
    """(FLOPs, bytes, features) of C[m,n] = A[m,k] @ W[k,n]. The activations are read in FP8
    where the GEMM runs on FP8 tensor cores (W8A8), else in 16 bits (weight-only FP8: Marlin)."""
    m, n, k = (np.asarray(v, dtype=np.float64) for v in (m, n, k))
    wb = WEIGHT_BYTES[dtype]
    ab = 1.0 if compute_dtype(hw, dtype) == "fp8" else ACT_BYTES
    flops = 2 * m * n * k
    nbytes = wb * n * k + ab * m * k + ACT_BYTES * m * n
    tiles = np.ceil(m / GEMM_TILE[0]) * np.ceil(n / GEMM_TILE[1])
    fill = tiles / (np.ceil(tiles / hw.sm_count) * hw.sm_count)
    return flops, nbytes, _stack(log2(m), log2(n), log2(k), fill)


GEMM_FEATURES = ("log2_m", "log2_n", "log2_k", "wave_fill")


def causal_pairs(q, c, window, chunked) -> np.ndarray:
    """Query-key pairs of q new tokens after c cached ones (positions c+1..c+q), each query
    attending causally, limited to the last `window` keys, or to its own chunk of `window`
    tokens when `chunked`; window 0 means unlimited."""
    q, c, w = (np.asarray(v, dtype=np.float64) for v in (q, c, window))
    if w.ndim == 0 and w == 0:  # unlimited: the common case, without the window branches
        end = c + q
        return end * (end + 1) / 2 - c * (c + 1) / 2

    def upto(x):  # sum over positions 1..x of the keys each attends to
        full = x * (x + 1) / 2
        ww = np.maximum(w, 1)
        capped = np.minimum(x, ww)
        sliding = capped * (capped + 1) / 2 + (x - capped) * ww
        whole, rest = np.floor_divide(x, ww), np.mod(x, ww)
        local = whole * ww * (ww + 1) / 2 + rest * (rest + 1) / 2
        return np.where(w > 0, np.where(chunked, local, sliding), full)

    return upto(c + q) - upto(c)


def causal_pairs_scalar(q: float, c: float, window: float, chunked: bool) -> float:
    """causal_pairs for one chunk, in plain Python."""
    if window <= 0:  # (upto below, inlined)
        hi, lo = float(c + q), float(c)
        return hi * (hi + 1) / 2 - lo * (lo + 1) / 2
    ww = max(window, 1.0)

    def upto(x: float) -> float:
        if chunked:
            whole, rest = x // ww, x % ww
            return whole * ww * (ww + 1) / 2 + rest * (rest + 1) / 2
        capped = min(x, ww)
        return capped * (capped + 1) / 2 + (x - capped) * ww

    return upto(float(c + q)) - upto(float(c))


def log2_scalar(x: float) -> float:
    return math.log2(max(float(x), 1e-30))


def sparse(total, q, density):
    """What a sparse prefill keeps of a chunk's `total` (query-key pairs, or keys read) for its
    q queries: each query's own key, and `density` of the rest."""
    return q + density * (total - q)


def prefill_shape(
    hw, q, c, num_seqs, heads, kv_heads, head_dim, window, chunked, kv_bytes, density=1.0
):
    """Per sequence: (FLOPs, bytes, features) of attention for a prefill chunk; `density` < 1:
    a sparse prefill (AttentionShape.density), its pairs and KV read as `sparse` keeps them."""
    q = np.asarray(q, dtype=np.float64)
    pairs = causal_pairs(q, c, window, chunked)
    kv_len = np.asarray(c, dtype=np.float64) + q
    w = np.asarray(window, dtype=np.float64)
    kv_read = np.where(w > 0, np.minimum(kv_len, np.maximum(w, 1) + q), kv_len)
    if np.any(np.asarray(density) != 1.0):  # (dense: the pairs and bytes untouched)
        pairs, kv_read = sparse(pairs, q, density), sparse(kv_read, q, density)
    flops = 4 * heads * head_dim * pairs
    nbytes = q * 2 * heads * head_dim * ACT_BYTES + kv_read * 2 * kv_heads * head_dim * kv_bytes
    feats = _stack(
        log2(q),
        log2(num_seqs * heads),
        log2(pairs / q),
        log2(head_dim),
        log2(heads / kv_heads),
    )
    return flops, nbytes, feats


PREFILL_FEATURES = (
    "log2_q",
    "log2_seqs_x_heads",
    "log2_keys_per_query",
    "log2_head_dim",
    "log2_gqa",
)


def decode_keys(ctx, window, chunked) -> np.ndarray:
    """Keys one decode token reads at context `ctx` (plus itself), window-bounded."""
    ctx, w = np.asarray(ctx, dtype=np.float64), np.asarray(window, dtype=np.float64)
    if w.ndim == 0 and w == 0:
        return ctx + 1
    ww = np.maximum(w, 1)
    bounded = np.where(chunked, np.mod(ctx, ww) + 1, np.minimum(ctx + 1, ww))
    return np.where(w > 0, bounded, ctx + 1)


def decode_shape(hw, ctx, num_seqs, heads, kv_heads, head_dim, window, chunked, kv_bytes):
    """Per sequence: (FLOPs, bytes, features) of one decode token's attention."""
    keys = decode_keys(ctx, window, chunked)
    flops = 4 * heads * head_dim * keys
    nbytes = keys * 2 * kv_heads * head_dim * kv_bytes + 2 * heads * head_dim * ACT_BYTES
    feats = _stack(log2(keys), log2(num_seqs * kv_heads), log2(head_dim), log2(heads / kv_heads))
    return flops, nbytes, feats


DECODE_FEATURES = ("log2_keys", "log2_seqs_x_kv_heads", "log2_head_dim", "log2_gqa")


def moe_shape(hw, tokens, hidden, inter, topk, experts, dtype, spread=1):
    """(FLOPs, bytes, features) of the routed experts on one GPU (inter, experts: local;
    spread: the expert-parallel group, 1 without). The weights read are those of the experts
    the batch's tokens touch under the routing the tables measured and a served batch is
    priced at (sim/cost/routing.py: fitting and pricing alike)."""
    tokens = np.asarray(tokens, dtype=np.float64)
    expert_params = 3.0 * np.asarray(hidden, dtype=np.float64) * inter
    flops = 2 * tokens * topk * expert_params
    touched = routed_experts(tokens, topk, experts, spread)
    nbytes = touched * expert_params * WEIGHT_BYTES[dtype]
    nbytes = nbytes + tokens * hidden * 2 * ACT_BYTES
    feats = _stack(log2(tokens * topk / experts), log2(experts), log2(expert_params))
    return flops, nbytes, feats


MOE_FEATURES = ("log2_tokens_per_expert", "log2_experts", "log2_expert_params")
ELEMENTWISE_FEATURES = ("log2_bytes",)
