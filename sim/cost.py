"""A step's time: per-operator rooflines x efficiencies, summed over layers, plus CPU time.

Each operator costs max(FLOPs / (peak x efficiency), bytes / (bandwidth x efficiency)). The
efficiencies come from a CostProfile under calibration/profiles/ (the prior until issue #3 fits
per-GPU profiles from measured kernels). Per layer kind:

    linear (QKV, O, dense MLP, shared expert, router)   weights streamed once per step
    MoE experts        FLOPs of top-k routing; bytes of the distinct experts the batch touches
    attention prefill  per sequence: q new tokens over c cached (causal, window-bounded)
    attention decode   reads each sequence's KV cache
    elementwise        norms, residuals, activation: memory-bound
    all-reduce         twice per layer with TP > 1
plus the LM head and sampler once per step, kernel launches not hidden by CUDA graphs, and the
engine's CPU time (overlapped with the GPU when the engine schedules asynchronously).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import yaml

from sim.errors import UserError
from sim.hardware import Hardware
from sim.memory import kv_heads_per_gpu
from sim.model import DTYPE_BYTES, Attention, Layer, ModelSpec
from sim.paths import CALIBRATION_DIR
from sim.scheduler import StepPlan
from sim.settings import EngineSettings

ACT_BYTES = 2


@dataclass(frozen=True, slots=True)
class CostProfile:
    name: str
    calibrated: bool
    gemm_flops_efficiency: float
    memory_bandwidth_efficiency: float
    attention_prefill_flops_efficiency: float
    attention_decode_bandwidth_efficiency: float
    allreduce_bandwidth_efficiency: float
    allreduce_latency_s: float
    kernel_launch_s: float
    eager_kernels_per_layer: int
    compiled_kernels_per_layer: int
    piecewise_eager_kernels_per_layer: int

    @classmethod
    def load(cls, name: str, root: Path = CALIBRATION_DIR / "profiles") -> CostProfile:
        path = root / f"{name}.yaml"
        if not path.is_file():
            names = ", ".join(sorted(p.stem for p in root.glob("*.yaml")))
            raise UserError(f"cost_profile={name!r} not found; choose one of: {names}")
        data = yaml.safe_load(path.read_text())
        expected = {f.name for f in fields(cls)}
        missing = sorted(expected - set(data or {}))
        if missing:
            raise UserError(f"{path}: missing fields {', '.join(missing)}")
        return cls(**{k: data[k] for k in expected})


@dataclass(frozen=True, slots=True)
class StepCost:
    """Seconds per component of one step; `total_s` is what the clock advances by."""

    linear_s: float
    moe_s: float
    attention_prefill_s: float
    attention_decode_s: float
    elementwise_s: float
    allreduce_s: float
    lm_head_s: float
    launch_s: float
    cpu_s: float
    async_cpu: bool

    @property
    def gpu_s(self) -> float:
        return (
            self.linear_s
            + self.moe_s
            + self.attention_prefill_s
            + self.attention_decode_s
            + self.elementwise_s
            + self.allreduce_s
            + self.lm_head_s
            + self.launch_s
        )

    @property
    def total_s(self) -> float:
        return max(self.gpu_s, self.cpu_s) if self.async_cpu else self.gpu_s + self.cpu_s


def _causal_pairs(first: np.ndarray, last: np.ndarray, window: int | None, chunked: bool):
    """Sum over positions p in [first, last] (1-based) of how many keys position p attends to."""

    def upto(x):  # sum for positions 1..x
        x = x.astype(np.float64)
        if window is None:
            return x * (x + 1) / 2
        if chunked:  # keys from the start of p's chunk
            full, rest = np.floor_divide(x, window), np.mod(x, window)
            return full * window * (window + 1) / 2 + rest * (rest + 1) / 2
        capped = np.minimum(x, window)
        return capped * (capped + 1) / 2 + (x - capped) * window

    return float(np.sum(upto(last) - upto(first - 1)))


class CostModel:
    def __init__(
        self,
        model: ModelSpec,
        hardware: Hardware,
        settings: EngineSettings,
        tp: int,
        weight_dtype: str,
        profile: CostProfile,
    ):
        self.model, self.hw, self.settings, self.tp, self.profile = (
            model,
            hardware,
            settings,
            tp,
            profile,
        )
        dtype = model.resolve_weight_dtype(weight_dtype)
        experts_only = dtype == model.checkpoint_dtype and model.quantized_experts_only
        self.dense_wb = DTYPE_BYTES["bf16" if experts_only else dtype]
        self.expert_wb = DTYPE_BYTES[dtype]
        self.embed_wb = DTYPE_BYTES["fp16" if dtype == "fp16" else "bf16"]
        self.dense_peak = self._peak("bf16" if experts_only else dtype)
        self.expert_peak = self._peak(dtype)
        self.attn_peak = hardware.peak_flops_per_s("bf16")
        self.kv_b = model.kv_dtype_bytes(settings.kv_cache_dtype)
        self.heads = model.num_q_heads // tp
        self.kv_heads = kv_heads_per_gpu(model, tp)
        self.capture_sizes = list(settings.cudagraph_capture_sizes)
        self.layer_terms = [
            (layer, count, *self._dense_params(layer))
            for layer, count in model.layer_groups.items()
        ]

    def _peak(self, dtype: str) -> float:
        """Tensor-core peak a GEMM with weights of `dtype` runs at (weight-only formats: bf16)."""
        compute = dtype if dtype in ("fp8", "fp4") and dtype in self.hw.flops_per_s else "bf16"
        return self.hw.peak_flops_per_s(compute)

    # ---- per-layer pieces ------------------------------------------------------------------
    def _roofline(self, flops: float, peak: float, flop_eff: float, nbytes: float) -> float:
        return max(
            flops / (peak * flop_eff),
            nbytes / (self.hw.hbm_bytes_per_s * self.profile.memory_bandwidth_efficiency),
        )

    def _dense_params(self, layer: Layer) -> tuple[int, int, int]:
        """(parameters, GEMM input+output width, MLP width) of one layer's dense part, one GPU."""
        m, tp = self.model, self.tp
        params = m.attention_params(layer)
        h = m.hidden_size
        if layer.moe:
            e = m.moe
            params += 3 * h * e.shared_intermediate_size + h * e.num_experts
            mlp_width = (
                e.shared_intermediate_size + e.experts_per_token * e.expert_intermediate_size
            )
        else:
            params += 3 * h * m.intermediate_size
            mlp_width = m.intermediate_size
        width = 4 * h + (m.q_width + 2 * m.kv_width + m.q_width + 3 * mlp_width) // tp
        return params // tp, width, mlp_width // tp

    def _attention(self, layer: Layer, pre_q, pre_c, dec_c) -> tuple[float, float]:
        """(prefill, decode) attention seconds of one layer."""
        m, p = self.model, self.profile
        window = layer.window_tokens
        chunked = layer.attention is Attention.CHUNKED
        bw = self.hw.hbm_bytes_per_s
        prefill = decode = 0.0
        if layer.attention is Attention.LINEAR:
            # a fixed state per sequence, read and written once; O(1) work per token
            lin = m.linear
            state_bytes = 2 * lin.state_values * self.kv_b / self.tp
            flops_per_token = 4 * lin.num_value_heads / self.tp * lin.key_head_dim
            flops_per_token *= lin.value_head_dim
            eff = p.attention_prefill_flops_efficiency
            return (
                self._roofline(
                    flops_per_token * float(pre_q.sum()),
                    self.attn_peak,
                    eff,
                    state_bytes * len(pre_q),
                )
                if len(pre_q)
                else 0.0,
                self._roofline(
                    flops_per_token * len(dec_c), self.attn_peak, eff, state_bytes * len(dec_c)
                )
                if len(dec_c)
                else 0.0,
            )
        if layer.attention is Attention.MLA:
            mla = m.mla
            kv_per_token = m.kv_bytes_per_token_of(layer, self.settings.kv_cache_dtype)
            qk_v = mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim
            decompress = 2 * mla.kv_lora_rank * self.heads * (mla.qk_nope_head_dim + mla.v_head_dim)
            score_flops_per_pair = 2 * self.heads * qk_v
            decode_flops_per_key = 2 * self.heads * (mla.latent_dim + mla.kv_lora_rank)
        else:
            kv_per_token = 2 * self.kv_heads * m.head_dim * self.kv_b
            decompress = 0
            score_flops_per_pair = 4 * self.heads * m.head_dim
            decode_flops_per_key = score_flops_per_pair
        if len(pre_q):
            pairs = _causal_pairs(pre_c + 1, pre_c + pre_q, window, chunked)
            keys = pre_c + pre_q if window is None else np.minimum(pre_c + pre_q, window)
            flops = score_flops_per_pair * pairs + decompress * float(pre_c.sum())
            nbytes = float(keys.sum()) * kv_per_token
            nbytes += float(pre_q.sum()) * 2 * self.heads * m.head_dim * ACT_BYTES
            prefill = self._roofline(
                flops, self.attn_peak, p.attention_prefill_flops_efficiency, nbytes
            )
        if len(dec_c):
            keys = dec_c + 1 if window is None else np.minimum(dec_c + 1, window)
            if chunked:
                keys = np.mod(dec_c, window) + 1
            n_keys = float(keys.sum())
            decode = max(
                decode_flops_per_key
                * n_keys
                / (self.attn_peak * p.attention_prefill_flops_efficiency),
                n_keys * kv_per_token / (bw * p.attention_decode_bandwidth_efficiency),
            )
        return prefill, decode

    def _allreduce_s(self, nbytes: float) -> float:
        if self.tp == 1:
            return 0.0
        ring = 2 * (self.tp - 1) / self.tp * nbytes
        link = self.hw.peer_bytes_per_s * self.profile.allreduce_bandwidth_efficiency
        return self.profile.allreduce_latency_s + ring / link

    def _launch_s(self, num_tokens: int, decode_only: bool) -> tuple[float, int]:
        """(launch seconds, token count GEMMs run at after CUDA-graph padding)."""
        s, p = self.settings, self.profile
        layers = self.model.num_layers
        if (
            s.cudagraph_mode != "NONE"
            and self.capture_sizes
            and num_tokens <= self.capture_sizes[-1]
        ):
            padded = self.capture_sizes[bisect.bisect_left(self.capture_sizes, num_tokens)]
            if s.cudagraph_mode == "FULL_AND_PIECEWISE" and decode_only:
                return 0.0, padded
            return layers * p.piecewise_eager_kernels_per_layer * p.kernel_launch_s, padded
        per_layer = p.compiled_kernels_per_layer if s.compile else p.eager_kernels_per_layer
        return layers * per_layer * p.kernel_launch_s, num_tokens

    # ---- one step --------------------------------------------------------------------------
    def step_cost(self, plan: StepPlan) -> StepCost:
        q = np.asarray(plan.num_new_tokens, dtype=np.int64)
        c = np.asarray(plan.num_context_tokens, dtype=np.int64)
        is_decode = q == 1
        return self.cost(q[~is_decode], c[~is_decode], c[is_decode])

    def cost(self, pre_q: np.ndarray, pre_c: np.ndarray, dec_c: np.ndarray) -> StepCost:
        """Cost of a batch: prefill chunks (q new tokens over c cached) and decodes (c cached)."""
        m, p, tp = self.model, self.profile, self.tp
        batch = len(pre_q) + len(dec_c)
        num_tokens = int(pre_q.sum()) + len(dec_c)
        launch, t = self._launch_s(num_tokens, decode_only=len(pre_q) == 0)
        h = m.hidden_size
        linear = moe = prefill = decode = elementwise = 0.0
        for layer, count, params, width, mlp_width in self.layer_terms:
            linear += count * self._roofline(
                2 * t * params,
                self.dense_peak,
                p.gemm_flops_efficiency,
                params * self.dense_wb + t * width * ACT_BYTES,
            )
            if layer.moe:
                e = m.moe
                expert_params = 3 * h * e.expert_intermediate_size // tp
                touched = e.num_experts * (1 - (1 - e.experts_per_token / e.num_experts) ** t)
                moe += count * self._roofline(
                    2 * t * e.experts_per_token * expert_params,
                    self.expert_peak,
                    p.gemm_flops_efficiency,
                    touched * expert_params * self.expert_wb,
                )
            pre_s, dec_s = self._attention(layer, pre_q, pre_c, dec_c)
            prefill += count * pre_s
            decode += count * dec_s
            elementwise += count * t * (8 * h + 3 * mlp_width) * ACT_BYTES
        bw = self.hw.hbm_bytes_per_s * p.memory_bandwidth_efficiency
        vocab = m.vocab_size
        lm_head = (
            self._roofline(
                2 * batch * h * vocab / tp,
                self.dense_peak,
                p.gemm_flops_efficiency,
                h * vocab / tp * self.embed_wb,
            )
            + 3 * batch * vocab * 4 / bw
        )  # sampler: logits, softmax, top-p
        s = self.settings
        return StepCost(
            linear_s=linear,
            moe_s=moe,
            attention_prefill_s=prefill,
            attention_decode_s=decode,
            elementwise_s=elementwise / bw,
            allreduce_s=2 * m.num_layers * self._allreduce_s(t * h * ACT_BYTES),
            lm_head_s=lm_head,
            launch_s=launch,
            cpu_s=s.cpu_step_overhead_s + s.cpu_per_seq_overhead_s * batch,
            async_cpu=s.async_scheduling,
        )

    def step_time_s(self, plan: StepPlan) -> float:
        return self.step_cost(plan).total_s
