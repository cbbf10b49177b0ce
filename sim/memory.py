"""The memory plan: how many KV blocks fit on each GPU, as the engine's start-up profiling finds.

GPU memory x gpu_memory_utilization
  - weights (this GPU's shard)
  - peak activations of a profile run at the token budget (and the sampler warm-up)
  - CUDA-graph pool (versions that subtract it before sizing the KV cache)
  - non-torch memory (CUDA context, NCCL and library workspaces)
  - linear-attention state for max_num_seqs requests
= KV cache bytes, divided into blocks of block_size tokens x KV bytes per token.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sim.errors import UserError
from sim.hardware import Hardware
from sim.model import Attention, ModelSpec
from sim.settings import EngineSettings

GIB = 2**30
ACT_BYTES = 2  # bf16 activations
LOGIT_BYTES = 4  # logits are upcast to fp32
SAMPLER_COPIES = 3  # logits, probabilities and sorted values live together in the warm-up (prior)


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads are split across TP ranks; with fewer heads than ranks each rank keeps one."""
    return max(1, model.num_kv_heads // tp)


def kv_bytes_per_token_per_gpu(model: ModelSpec, kv_dtype: str, tp: int) -> int:
    """Per-token KV bytes one GPU stores, over all layers that keep per-token KV.

    Windowed layers are counted like full ones: the block pool does not yet free blocks that
    slide out of a window (vLLM's hybrid allocator does), so this is the conservative size.
    """
    b = model.kv_dtype_bytes(kv_dtype)
    total = 0
    for layer, count in model.layer_groups.items():
        if layer.attention is Attention.MLA:  # the latent is replicated on every rank
            total += count * model.kv_bytes_per_token_of(layer, kv_dtype)
        elif layer.attention is not Attention.LINEAR:
            total += count * int(2 * kv_heads_per_gpu(model, tp) * model.head_dim * b)
    return total


def activation_peak_bytes(model: ModelSpec, settings: EngineSettings, tp: int) -> int:
    """Peak of the start-up profile run: one forward at the token budget, then the sampler."""
    t = settings.max_num_batched_tokens
    h = model.hidden_size
    mlp_width = model.intermediate_size
    if model.moe is not None:
        mlp_width = max(
            mlp_width,
            model.moe.experts_per_token * model.moe.expert_intermediate_size
            + model.moe.shared_intermediate_size,
        )
    qkv = model.q_width + 2 * model.kv_width
    forward = t * ACT_BYTES * (4 * h + (qkv + 3 * mlp_width) // tp)
    logits = settings.max_num_seqs * model.vocab_size * LOGIT_BYTES
    return max(forward + logits, SAMPLER_COPIES * logits)


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    total_bytes: int
    gpu_memory_utilization: float
    weight_bytes: int
    activation_bytes: int
    cudagraph_bytes: int
    non_torch_bytes: int
    linear_state_bytes: int
    kv_cache_bytes: int
    kv_bytes_per_token: int
    block_size: int
    num_blocks: int  # including vLLM's null block, as num_gpu_blocks counts it

    @property
    def bytes_per_block(self) -> int:
        return self.kv_bytes_per_token * self.block_size

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens the pool can hold (the null block holds none)."""
        return (self.num_blocks - 1) * self.block_size

    def record(self) -> dict:
        return {**asdict(self), "kv_capacity_tokens": self.kv_capacity_tokens}


def plan_memory(
    hardware: Hardware, model: ModelSpec, settings: EngineSettings, tp: int, weight_dtype: str
) -> MemoryPlan:
    total = hardware.hbm_bytes
    budget = int(total * settings.gpu_memory_utilization)
    weights = model.weight_bytes(weight_dtype) // tp
    activation = activation_peak_bytes(model, settings, tp)
    linear_state = model.linear_state_bytes(settings.kv_cache_dtype) // tp * settings.max_num_seqs
    reserved = (
        weights + activation + settings.cudagraph_memory_bytes + settings.non_torch_memory_bytes
    )
    kv_bytes = budget - reserved - linear_state
    per_token = kv_bytes_per_token_per_gpu(model, settings.kv_cache_dtype, tp)
    if weights > budget:
        raise UserError(
            f"{model.name} weights need {weights / GIB:.1f} GiB per GPU at tp={tp}, more than "
            f"{settings.gpu_memory_utilization:.2f} x {hardware.hbm_gib:.1f} GiB of "
            f"{hardware.name}; "
            "raise parallel.tp, use a smaller dtype, or a larger GPU"
        )
    if kv_bytes < 2 * per_token * settings.block_size:
        raise UserError(
            f"no memory left for the KV cache on {hardware.name} at tp={tp}: budget "
            f"{budget / GIB:.1f} GiB - weights {weights / GIB:.1f} - activations "
            f"{activation / GIB:.1f} - graphs and runtime "
            f"{(settings.cudagraph_memory_bytes + settings.non_torch_memory_bytes) / GIB:.1f} - "
            f"linear-attention state {linear_state / GIB:.1f} GiB; raise parallel.tp or "
            "engine_args.gpu_memory_utilization, or lower max_num_batched_tokens / max_num_seqs"
        )
    plan = MemoryPlan(
        total_bytes=total,
        gpu_memory_utilization=settings.gpu_memory_utilization,
        weight_bytes=weights,
        activation_bytes=activation,
        cudagraph_bytes=settings.cudagraph_memory_bytes,
        non_torch_bytes=settings.non_torch_memory_bytes,
        linear_state_bytes=linear_state,
        kv_cache_bytes=kv_bytes,
        kv_bytes_per_token=per_token,
        block_size=settings.block_size,
        num_blocks=kv_bytes // (per_token * settings.block_size),
    )
    needed_blocks = -(-settings.max_model_len // settings.block_size)
    if needed_blocks > plan.num_blocks - 1:
        raise UserError(
            f"max_model_len {settings.max_model_len} needs "
            f"{needed_blocks * plan.bytes_per_block / GIB:.2f} GiB of KV cache for one request, "
            f"more than the {kv_bytes / GIB:.2f} GiB available; the longest that fits is "
            f"{plan.kv_capacity_tokens} tokens: set engine_args.max_model_len at or below it, "
            "or raise gpu_memory_utilization or parallel.tp"
        )
    return plan
