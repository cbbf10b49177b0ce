"""Pricing single kernels on one GPU: a roofline per kernel class, times its efficiency.

A calibrated profile holds, per kernel class, a Surface of log(measured / roofline) over the
class's shape features (sim/cost/roofline.py), fitted to measured kernel tables by
sim/calibrate/fitting.py; without one, the uncalibrated prior applies fixed efficiencies to the
compute and memory terms. A surface below zero (a fitted kernel faster than its roofline:
smoothing between measured shapes, or microbenchmark rows that kept their weights in L2, which a
forward pass over many layers cannot) prices at the roofline: no kernel beats the GPU's peaks.
All functions take numpy arrays and broadcast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sim.cost.fp8 import REFERENCE
from sim.cost.measured_moe import MeasuredExperts
from sim.cost.prior import CostProfile
from sim.cost.roofline import (
    ACT_BYTES,
    WEIGHT_BYTES,
    attention_dtype,
    causal_pairs,
    causal_pairs_scalar,
    compute_dtype,
    decode_shape,
    gemm_shape,
    log2,
    log2_scalar,
    moe_shape,
    prefill_shape,
    sparse,
)
from sim.cost.surface import Surface
from sim.specs.hardware import Hardware


@dataclass(frozen=True, slots=True)
class AttentionShape:
    """What an attention kernel is, apart from its sequences (scalars or per-row arrays)."""

    heads: float | np.ndarray  # query heads on this GPU
    kv_heads: float | np.ndarray
    head_dim: float | np.ndarray
    window: float | np.ndarray = 0  # sliding window or local chunk; 0: none
    chunked: bool = False  # chunked-local rather than sliding
    kv_dtype: str = "bf16"
    backend: str = "FLASH_ATTN_FA3"
    # Sparse prefill (MInference-style vertical + slash patterns): prefill attends to each
    # query's own key and this share of its other causal keys, reading as much of the cached
    # KV (roofline.sparse); 1.0: dense. Decode ignores it (the patterns are a prefill's).
    density: float = 1.0

    @property
    def kv_bytes(self) -> float:
        return WEIGHT_BYTES[self.kv_dtype]


@dataclass(frozen=True, slots=True)
class CommTable:
    """Measured collective latency by message size for one GPU count (log-log interpolation;
    beyond the largest size, time grows linearly with bytes)."""

    nbytes: np.ndarray
    seconds: np.ndarray

    def __call__(self, nbytes) -> np.ndarray:
        x = np.log(np.maximum(np.asarray(nbytes, dtype=np.float64), 1.0))
        lx, ly = np.log(self.nbytes), np.log(self.seconds)
        inside = np.exp(np.interp(x, lx, ly))
        beyond = self.seconds[-1] * np.exp(x - lx[-1])
        return np.where(x > lx[-1], beyond, inside)

    def to_dict(self) -> dict:
        return {
            "bytes": [int(v) for v in self.nbytes],
            "seconds": [float(f"{v:.5g}") for v in self.seconds],
        }

    @classmethod
    def from_dict(cls, data: dict) -> CommTable:
        return cls(
            np.asarray(data["bytes"], dtype=np.float64),
            np.asarray(data["seconds"], dtype=np.float64),
        )


def _inside(bounds, feats: np.ndarray, slack: float = 1e-3) -> bool:
    """Every row's features within the measured range (bounds rounded to 4 decimals)."""
    return all(
        bool(((feats[:, j] >= lo - slack) & (feats[:, j] <= hi + slack)).all())
        for j, (lo, hi) in enumerate(bounds)
    )


def twin_moved_s(twin_s, nbytes, twin_bytes_per_s, bytes_per_s):
    """A memory-bound kernel measured on a twin GPU (same SMs and clocks, another HBM), on this
    one: latency plus bytes over bandwidth. What the twin's kernel took beyond its bytes at the
    twin's peak is latency (launch, ramp-up, tail), the same on the same die; the bytes move at
    this GPU's peak. Never under this GPU's roofline (the twin's time is never under the
    twin's). AIConfigurator's vLLM 0.24 tables time one elementwise kernel on both Hopper
    GPUs (quantize/vllm/0.24.0/scale_matrix_perf.parquet, static_scaled_fp8_quant, 2 bytes
    read and 1 written per element; ai-dynamo/aiconfigurator@095f58a, ../shared/data/
    aiconfigurator): the H200's 1,628 shapes from the H100's by this rule are off by a median
    |error| of 3.1% under 1 MB, 11.8% at 1-67 MB and 1.7% above (scaled by the bandwidth
    ratio instead: 27.7%, 29.0%, 4.4%); under 1 MB both take about 2 us (medians 2.16 and
    2.07 us), where bytes alone would price 0.3 us at most (tests/test_twin_elementwise.py)."""
    return twin_s - nbytes / twin_bytes_per_s + nbytes / bytes_per_s


@dataclass
class KernelPricer:
    """Prices kernels on `hardware` with calibrated surfaces where it has them, else the prior.

    Surface keys: "gemm/<dtype>", "attention_prefill/<backend>/<kv dtype>",
    "attention_decode/<backend>/<kv dtype>", "moe/<dtype>", "elementwise/<kind>"; comm tables:
    "allreduce/<gpus>", "sendrecv/<gpus>". `used` records which key priced each class.
    """

    hardware: Hardware
    prior: CostProfile
    surfaces: dict[str, Surface] = field(default_factory=dict)
    comm: dict[str, CommTable] = field(default_factory=dict)
    floors: dict[str, float] = field(default_factory=dict)  # fixed cost of one attention launch
    used: dict[str, str] = field(default_factory=dict)
    # Elementwise kernels measured on a twin GPU (the same die: SM count and compute
    # capability), for the kinds this GPU's profile did not measure, and the twin's HBM bytes/s
    # (elementwise_s moves them over; sim.cost.profiles gives them)
    twin_elementwise: dict[str, Surface] = field(default_factory=dict)
    twin_hbm_bytes_per_s: float = 0.0
    # The same key's surfaces from the profile's other families, in lookup order: what prices
    # an expert shape the first one never measured (moe_s)
    alternates: dict[str, list[Surface]] = field(default_factory=dict)
    measured_moe: MeasuredExperts | None = None  # timed expert shapes (measured_moe.py)
    # What determines every price (profile, family, GPU, prior), set by choose_pricer: two
    # pricers with the same fingerprint price everything alike, so the cost model may share
    # their per-context decode tables across runs in one process (None: no sharing).
    fingerprint: str | None = None
    # id of a prefill shape -> what prefill_chunk_s reads of it (_prefill_terms)
    _chunk_terms: dict = field(default_factory=dict, compare=False, repr=False)

    def _find(self, kind: str, *key: str) -> str | None:
        """The exact surface key, else one of the same kind with the same last key part."""
        exact = "/".join((kind, *key))
        if exact in self.surfaces:
            self.used.setdefault(kind, exact)
            return exact
        suffix = key[-1] if key else ""
        for name in sorted(self.surfaces):
            if name.startswith(kind + "/") and name.endswith("/" + suffix):
                self.used.setdefault(kind, f"{name} (nearest to {exact})")
                return name
        self.used.setdefault(kind, "prior")
        return None

    def _surface(self, kind: str, *key: str) -> Surface | None:
        name = self._find(kind, *key)
        return None if name is None else self.surfaces[name]

    def attention_floor_s(self, kind: str, shape: AttentionShape) -> float:
        """The launch floor of one attention kernel, paid once per step however many
        sequences it covers (0 under the prior, whose launch costs are counted per layer)."""
        name = self._find(kind, shape.backend, shape.kv_dtype)
        return self.floors.get(name, 0.0) if name else 0.0

    def _price(self, surface, flops, nbytes, feats, peak, compute_eff) -> np.ndarray:
        hw, p = self.hardware, self.prior
        if surface is None:
            return np.maximum(
                flops / (peak * compute_eff),
                nbytes / (hw.hbm_bytes_per_s * p.memory_bandwidth_efficiency),
            )
        roof = np.maximum(flops / peak, nbytes / hw.hbm_bytes_per_s)
        return roof * np.exp(np.maximum(surface(feats), 0.0))  # never under the roofline

    def _measured_as(self, kind: str, dtype: str) -> str:
        """The surface key a weight format is priced with: its own, but weight-only FP8
        (Marlin, on a GPU without FP8 tensor cores) unmeasured on this GPU takes the measured
        BF16 kernel's efficiency at its own roofline (sim/cost/fp8.py)."""
        weight_only = dtype.startswith("fp8") and compute_dtype(self.hardware, dtype) != "fp8"
        if weight_only and f"{kind}/{dtype}" not in self.surfaces:
            if f"{kind}/bf16" in self.surfaces:
                self.used.setdefault(f"{kind}_{dtype}", f"{kind}/bf16's efficiency, W8A16 roofline")
            return "bf16"
        return dtype

    def gemm_s(self, m, n, k, dtype: str = "bf16") -> np.ndarray:
        """C[m,n] = A[m,k] @ W[k,n] in weight format `dtype`; FP8 by the kernel its release runs
        on this GPU (sim/cost/fp8.py)."""
        hw = self.hardware
        flops, nbytes, feats = gemm_shape(hw, m, n, k, dtype)
        fp8_rate = compute_dtype(hw, dtype) == "fp8"
        surface = self._surface("gemm", self._measured_as("gemm", dtype))
        peak = hw.peak_flops_per_s(compute_dtype(hw, dtype))
        seconds = self._price(surface, flops, nbytes, feats, peak, self.prior.gemm_flops_efficiency)
        if dtype == "fp8" and fp8_rate:  # W8A8: at most the same shape in BF16 (fp8.py)
            return np.minimum(seconds, self.gemm_s(m, n, k, "bf16"))
        reference = self.surfaces.get(f"{REFERENCE}/gemm/fp8_block")
        if dtype == "fp8_block" and fp8_rate and reference is not None:
            self.used.setdefault("gemm_fp8_block", "the faster of it and the block reference")
            # at most as the reference collection prices the same shape (fp8.py)
            return np.minimum(seconds, self._price(reference, flops, nbytes, feats, peak, 1))
        return seconds

    def prefill_s(self, q, c, num_seqs, shape: AttentionShape) -> np.ndarray:
        """Per-sequence seconds of prefill attention (q new tokens after c cached): a batch
        costs their sum plus one attention_floor_s."""
        flops, nbytes, feats = prefill_shape(
            self.hardware,
            q,
            c,
            num_seqs,
            shape.heads,
            shape.kv_heads,
            shape.head_dim,
            shape.window,
            shape.chunked,
            shape.kv_bytes,
            shape.density,
        )
        surface = self._surface("attention_prefill", shape.backend, shape.kv_dtype)
        # The measured prefill tables start from an empty cache, so their shapes lie on the
        # line keys-per-query ~ q / 2. A chunk after c cached tokens lies off it; it takes the
        # efficiency of the measured prefill whose queries see as many keys (q' = 2 x keys
        # per query) rather than an extrapolation of the surface into unmeasured shapes.
        cached = np.broadcast_to(np.asarray(c, dtype=np.float64), (feats.shape[0],)) > 0
        feats = feats.copy()
        feats[cached, 0] = np.maximum(feats[cached, 0], feats[cached, 2] + 1.0)
        return self._price(
            surface,
            flops,
            nbytes,
            feats,
            self.hardware.peak_flops_per_s(attention_dtype(self.hardware, shape.kv_dtype)),
            self.prior.attention_prefill_flops_efficiency,
        )

    def prefill_chunk_s(self, q: int, c: int, num_seqs: int, shape: AttentionShape) -> float:
        """prefill_s of one chunk, in plain Python (the same roofline, features and surface;
        equal to prefill_s up to rounding): what a step prices chunk by chunk."""
        terms = self._chunk_terms.get(id(shape))
        if terms is None:
            terms = self._chunk_terms[id(shape)] = self._prefill_terms(shape)
        heads, kv_heads, head_dim, w, kv_bytes, peak, hbm, surface, head, fixed, _ = terms
        pairs = causal_pairs_scalar(q, c, w, shape.chunked)
        kv_len = c + q
        kv_read = min(kv_len, max(w, 1.0) + q) if w > 0 else kv_len
        if shape.density != 1.0:  # sparse prefill (prefill_shape's, in plain Python)
            pairs, kv_read = sparse(pairs, q, shape.density), sparse(kv_read, q, shape.density)
        flops = 4 * heads * head_dim * pairs
        nbytes = q * 2 * heads * head_dim * ACT_BYTES + kv_read * 2 * kv_heads * head_dim * kv_bytes
        if surface is None:
            p = self.prior
            return max(
                flops / (peak * p.attention_prefill_flops_efficiency),
                nbytes / (hbm * p.memory_bandwidth_efficiency),
            )
        feats = [log2_scalar(q), log2_scalar(num_seqs * heads), log2_scalar(pairs / q)]
        if c > 0:  # as prefill_s: a chunk after cached tokens takes the matching prefill's
            feats[0] = max(feats[0], feats[2] + 1.0)
        roof = max(flops / peak, nbytes / hbm)
        if fixed is None:
            return roof * math.exp(max(surface.at([*feats, *head]), 0.0))
        return roof * math.exp(max(fixed.at(feats), 0.0))  # (as _price: never under the roofline)

    def _prefill_terms(self, shape: AttentionShape) -> tuple:
        """What prefill_chunk_s reads of a shape, once per shape: its sizes as floats, the GPU's
        rates, its surface, its head features and, for a surface of five features, the
        surface with those fixed (Surface.fixing: the same bits as at() of all five); the
        shape last, so that its id stays its own while the entry lives."""
        hw = self.hardware
        heads, kv_heads, head_dim = float(shape.heads), float(shape.kv_heads), float(shape.head_dim)
        surface = self._surface("attention_prefill", shape.backend, shape.kv_dtype)
        head = (log2_scalar(head_dim), log2_scalar(heads / kv_heads))  # the shape's own
        fixed = None
        if surface is not None and len(surface.features) == 5:
            fixed = surface.fixing(head)
        peak = hw.peak_flops_per_s(attention_dtype(hw, shape.kv_dtype))
        terms = (heads, kv_heads, head_dim, float(shape.window), shape.kv_bytes, peak)
        return (*terms, hw.hbm_bytes_per_s, surface, head, fixed, shape)

    def decode_s(self, ctx, num_seqs, shape: AttentionShape, mixed: bool = False) -> np.ndarray:
        """Per-sequence seconds of decode attention: a batch costs their sum plus one
        attention_floor_s. `mixed`: the batch also holds a prefill chunk, which on some
        backends runs decodes without split-KV (priced by a surface of its own if fitted)."""
        flops, nbytes, feats = decode_shape(
            self.hardware,
            ctx,
            num_seqs,
            shape.heads,
            shape.kv_heads,
            shape.head_dim,
            shape.window,
            shape.chunked,
            shape.kv_bytes,
        )
        surface = self.decode_surface(shape, mixed)
        hw = self.hardware
        peak = hw.peak_flops_per_s(attention_dtype(hw, shape.kv_dtype))
        if surface is None:
            p = self.prior
            return np.maximum(
                flops / (peak * p.attention_prefill_flops_efficiency),
                nbytes / (hw.hbm_bytes_per_s * p.attention_decode_bandwidth_efficiency),
            )
        return self._price(surface, flops, nbytes, feats, peak, 1.0)

    def decode_surface(self, shape: AttentionShape, mixed: bool) -> Surface | None:
        """The surface decode_s prices `shape` with (recorded in `used`)."""
        mixed_key = f"attention_decode_mixed/{shape.backend}/{shape.kv_dtype}"
        kind = (
            "attention_decode_mixed" if mixed and mixed_key in self.surfaces else "attention_decode"
        )
        return self._surface(kind, shape.backend, shape.kv_dtype)

    def moe_s(self, tokens, hidden, inter, topk, experts, dtype="bf16", spread=1) -> np.ndarray:
        """Routed experts on one GPU (spread: the expert-parallel group; the routing is
        sim/cost/routing.py's, as the tables measured it; roofline.moe_shape): a shape a table
        timed at its timings (sim/cost/measured_moe.py), any other by the surface."""
        seconds, roof = self._moe_surface_s(tokens, hidden, inter, topk, experts, dtype, spread)
        timed = self.measured_moe
        if timed and np.all(np.asarray(spread) <= 1):
            shape, again = (hidden, inter, topk, experts), self._moe_surface_s
            at = lambda t, *one: again(t, *one, dtype, 1)[0]  # noqa: E731 (one shape's surface)
            seconds, hit = timed.apply(seconds, roof, tokens, shape, dtype, at)
            if hit:
                self.used.setdefault("moe_measured", f"moe/{dtype} at a table's timings")
        return seconds

    def _moe_surface_s(self, tokens, hidden, inter, topk, experts, dtype, spread):
        """(seconds by the MoE surface, the roofline) of routed experts on one GPU."""
        hw = self.hardware
        flops, nbytes, feats = moe_shape(hw, tokens, hidden, inter, topk, experts, dtype, spread)
        peak = hw.peak_flops_per_s(compute_dtype(hw, dtype))
        surface = self._measured_experts(self._find("moe", self._measured_as("moe", dtype)), feats)
        seconds = self._price(surface, flops, nbytes, feats, peak, self.prior.gemm_flops_efficiency)
        return seconds, np.maximum(flops / peak, nbytes / hw.hbm_bytes_per_s)

    def _measured_experts(self, name: str | None, feats: np.ndarray) -> Surface | None:
        """The MoE surface `name`, unless its table never measured these experts (their count
        and size, per GPU: a release whose collection timed an MXFP4 MoE at TP1 only, the H200's
        vLLM 0.18, extrapolates to TP8's eighth of each expert at a quarter of what the 0.24
        collection measured there for one token, on either GPU); then the first of the
        profile's other families whose table did, in lookup order (the default family
        first)."""
        if name is None:
            return None
        own = self.surfaces[name]
        for surface in (own, *self.alternates.get(name, ())):
            if surface.bounds is None or _inside(surface.bounds[1:], feats[:, 1:]):
                if surface is not own:
                    self.used.setdefault("moe_experts", f"{name} of a family that measured them")
                return surface
        return own

    def elementwise_s(self, nbytes, kind: str) -> np.ndarray:
        """Norms, residual adds, activations, rotary embedding, embedding lookup, sampler:
        memory-bound kernels, priced by bytes moved. A kind measured only on the twin GPU
        takes the twin's time with its bytes moved at this GPU's bandwidth (twin_moved_s)."""
        nbytes = np.asarray(nbytes, dtype=np.float64)
        feats = log2(nbytes).reshape(-1, 1)
        flat = nbytes.reshape(-1)
        twin = self.twin_elementwise.get(kind)
        if twin is not None and f"elementwise/{kind}" not in self.surfaces:
            self.used.setdefault("elementwise", f"elementwise/{kind} of the twin GPU")
            twin_roof = flat / self.twin_hbm_bytes_per_s
            twin_s = twin_roof * np.exp(np.maximum(twin(feats), 0.0))  # as _price on the twin
            out = twin_moved_s(
                twin_s, flat, self.twin_hbm_bytes_per_s, self.hardware.hbm_bytes_per_s
            )
            return out.reshape(nbytes.shape)
        surface = self._surface("elementwise", kind)
        out = self._price(surface, np.zeros(feats.shape[0]), flat, feats, 1.0, 1.0)
        return out.reshape(nbytes.shape)

    def _comm(self, kind: str, nbytes, num_gpus: int) -> np.ndarray:
        tables = {int(k.split("/")[1]): t for k, t in self.comm.items() if k.startswith(kind)}
        if num_gpus in tables:
            self.used.setdefault(kind, f"{kind}/{num_gpus}")
            return tables[num_gpus](nbytes)
        if tables:  # the nearest measured GPU count, scaled by the ring's traffic factor
            near = min(tables, key=lambda g: (abs(g - num_gpus), g))
            self.used.setdefault(kind, f"{kind}/{near} (scaled to {num_gpus} GPUs)")
            scale = ((num_gpus - 1) / num_gpus) / ((near - 1) / near) if kind == "allreduce" else 1
            return tables[near](nbytes) * scale
        self.used.setdefault(kind, "prior")
        p = self.prior
        factor = 2 * (num_gpus - 1) / num_gpus if kind == "allreduce" else 1.0
        link = self.hardware.peer_bytes_per_s * p.allreduce_bandwidth_efficiency
        return p.allreduce_latency_s + factor * np.asarray(nbytes, dtype=np.float64) / link

    def allreduce_s(self, nbytes, num_gpus: int) -> np.ndarray:
        return self._comm("allreduce", nbytes, num_gpus)

    def sendrecv_s(self, nbytes, num_gpus: int = 2) -> np.ndarray:
        return self._comm("sendrecv", nbytes, num_gpus)

    # ---- kernel classes without measured tables yet: roofline x prior efficiencies --------
    def _prior(self, kind: str, flops, nbytes, compute_eff: float, memory_eff: float):
        self.used.setdefault(kind, "prior")
        hw = self.hardware
        return np.maximum(
            flops / (hw.peak_flops_per_s("bf16") * compute_eff),
            nbytes / (hw.hbm_bytes_per_s * memory_eff),
        )

    def mla_prefill_s(
        self, q, c, heads, qk_head_dim, v_head_dim, kv_lora_rank, latent_bytes_per_token
    ) -> np.ndarray:
        """Per sequence: MLA prefill decompresses the cached latent, then attends per head."""
        q, c = np.asarray(q, dtype=np.float64), np.asarray(c, dtype=np.float64)
        pairs = causal_pairs(q, c, 0, False)
        flops = 2 * heads * (qk_head_dim + v_head_dim) * pairs
        flops = flops + 2 * kv_lora_rank * heads * (qk_head_dim + v_head_dim) * c
        nbytes = (c + q) * latent_bytes_per_token + q * 2 * heads * qk_head_dim * ACT_BYTES
        return self._mla_prefill_prior(flops, nbytes)

    def _mla_prefill_prior(self, flops, nbytes) -> np.ndarray:
        p = self.prior
        return self._prior(
            "mla",
            flops,
            nbytes,
            p.attention_prefill_flops_efficiency,
            p.memory_bandwidth_efficiency,
        )

    def sparse_mla_prefill_s(
        self, q, c, heads, latent_dim, kv_lora_rank, latent_bytes_per_token, topk
    ) -> np.ndarray:
        """Per sequence: sparse MLA (DeepSeek V3.2) runs in the latent space, as decode does,
        each query over the at most `topk` positions its indexer picked, whatever the
        context: the pairs of a sliding window of topk keys. Each query gathers its own picks
        (all its heads share them)."""
        q, c = np.asarray(q, dtype=np.float64), np.asarray(c, dtype=np.float64)
        pairs = causal_pairs(q, c, topk, False)
        flops = 2 * heads * (latent_dim + kv_lora_rank) * pairs
        nbytes = pairs * latent_bytes_per_token + q * heads * latent_dim * ACT_BYTES
        return self._mla_prefill_prior(flops, nbytes)

    def mla_decode_s(
        self, ctx, heads, latent_dim, kv_lora_rank, latent_bytes_per_token, topk=0
    ) -> np.ndarray:
        """Per sequence: absorbed MLA decode reads the latent of every cached token (of at
        most `topk` of them with sparse attention)."""
        keys = np.asarray(ctx, dtype=np.float64) + 1
        if topk:
            keys = np.minimum(keys, topk)
        flops = 2 * heads * (latent_dim + kv_lora_rank) * keys
        p = self.prior
        return self._prior(
            "mla",
            flops,
            keys * latent_bytes_per_token,
            p.attention_prefill_flops_efficiency,
            p.attention_decode_bandwidth_efficiency,
        )

    def indexer_s(self, q, c, heads, head_dim, key_bytes_per_token) -> np.ndarray:
        """Per sequence: DeepSeek sparse attention's lightning indexer. Every new token scores
        every earlier position (fp8 dot products over `heads` x `head_dim`) to pick its top k:
        quadratic in the context like dense attention, at a fraction of its width. q = 1 is
        a decode (one query over c cached keys and its own)."""
        q, c = np.asarray(q, dtype=np.float64), np.asarray(c, dtype=np.float64)
        pairs = causal_pairs(q, c, 0, False)
        flops = 2 * heads * head_dim * pairs
        nbytes = (c + q) * key_bytes_per_token + q * heads * head_dim
        self.used.setdefault("indexer", "prior")
        hw, p = self.hardware, self.prior
        peak = hw.flops_per_s.get("fp8", hw.peak_flops_per_s("bf16"))
        return np.maximum(
            flops / (peak * p.attention_prefill_flops_efficiency),
            nbytes / (hw.hbm_bytes_per_s * p.memory_bandwidth_efficiency),
        )

    def linear_attention_s(self, tokens, seqs, flops_per_token, state_bytes) -> float:
        """Linear attention / SSM: O(1) work per token and one state read+write per sequence."""
        p = self.prior
        return float(
            self._prior(
                "linear_attention",
                flops_per_token * tokens,
                2 * state_bytes * seqs,
                p.attention_prefill_flops_efficiency,
                p.memory_bandwidth_efficiency,
            )
        )
