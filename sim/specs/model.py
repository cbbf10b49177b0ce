"""A model's architecture and what follows from it: parameters, weight bytes, FLOPs, KV bytes.

Built from a HuggingFace `config.json` by sim/specs/model_config.py's `load_model`. Every
quantity here is a pure function of the architecture; nothing depends on the engine or the GPU.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import StrEnum

from sim.errors import UserError

# Bytes per stored value. fp4/int4 carry one 8-bit scale per 32 values (MXFP4, group-wise INT4).
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.53125, "int4": 0.53125}
DTYPE_BYTES["fp8_block"] = 1.0  # fp8 with a scale per 128 x 128 block (DeepSeek, Qwen FP8)
WEIGHT_DTYPES = ("auto", "bf16", "fp16", "fp8", "fp8_block", "fp4", "int4")
KV_DTYPES = ("auto", "bf16", "fp16", "fp8")


class Attention(StrEnum):
    FULL = "full"  # MHA / GQA: K and V per token, grows with the context
    SLIDING = "sliding"  # the last `window_tokens` tokens only
    CHUNKED = "chunked"  # chunked-local: tokens of the current `window_tokens` chunk only
    MLA = "mla"  # DeepSeek-style latent: kv_lora_rank + qk_rope_head_dim per token
    LINEAR = "linear"  # linear attention / SSM: a fixed state per request, no per-token KV


@dataclass(frozen=True, slots=True)
class Layer:
    attention: Attention
    window_tokens: int | None  # the window (SLIDING) or chunk (CHUNKED); None otherwise
    moe: bool


@dataclass(frozen=True, slots=True)
class Mla:
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def latent_dim(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True, slots=True)
class Moe:
    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    shared_intermediate_size: int  # total width of the always-on shared expert(s); 0 if none


@dataclass(frozen=True, slots=True)
class LinearAttention:
    kind: str  # "gated_deltanet" | "kda" | "lightning"
    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int  # short convolution width; 0 when the layer has none

    @property
    def state_values(self) -> int:
        """Values held per request per layer: the recurrent state plus the convolution tail."""
        recurrent = self.num_value_heads * self.key_head_dim * self.value_head_dim
        conv_width = 2 * self.num_key_heads * self.key_head_dim
        conv_width += self.num_value_heads * self.value_head_dim
        return recurrent + max(self.conv_kernel - 1, 0) * conv_width


@dataclass(frozen=True, slots=True)
class SparseIndexer:
    """DeepSeek sparse attention's lightning indexer: an fp8 key (+ fp32 scale) per token."""

    num_heads: int
    head_dim: int
    topk_tokens: int

    @property
    def bytes_per_token(self) -> int:
        return self.head_dim + 4


@dataclass(frozen=True, slots=True)
class ParamCount:
    total: int
    active: int  # per token: routed experts counted top-k, not all
    embedding: int  # input embedding + untied LM head

    @property
    def total_non_embedding(self) -> int:
        return self.total - self.embedding


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    architecture: str
    hidden_size: int
    vocab_size: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # dense MLP width (dense layers only)
    tie_word_embeddings: bool
    max_position_embeddings: int
    checkpoint_dtype: str  # bf16 | fp16 | fp8 | fp4: how the published weights are stored
    quantized_experts_only: bool  # MXFP4 checkpoints quantize the experts and keep the rest bf16
    qkv_bias: bool
    gated_attention_output: bool  # Qwen3-Next full attention also projects an output gate
    layers: tuple[Layer, ...]
    mla: Mla | None = None
    moe: Moe | None = None
    linear: LinearAttention | None = None
    indexer: SparseIndexer | None = None
    mtp_layers: int = 0  # multi-token-prediction modules shipped with the weights (DeepSeek)

    # ---- layer structure -------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def layer_groups(self) -> Counter[Layer]:
        """Identical layers grouped, so per-layer costs are computed once per kind."""
        return Counter(self.layers)

    @property
    def q_width(self) -> int:
        return self.num_q_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * self.head_dim

    def tp_degrees(self, upto: int = 64) -> list[int]:
        """Tensor-parallel sizes vLLM accepts for this model, up to `upto`: each divides the
        attention heads, and the KV heads divide evenly among the ranks or are replicated
        evenly across them (num_kv_heads % tp == 0 or tp % num_kv_heads == 0)."""
        kv = self.num_kv_heads
        return [
            t
            for t in range(1, upto + 1)
            if self.num_q_heads % t == 0 and (kv % t == 0 or t % kv == 0)
        ]

    def tp_error(self, tp: int) -> str | None:
        """Why parallel.tp=`tp` cannot run this model, naming the valid degrees (None: it can)."""
        if tp in self.tp_degrees(max(tp, 1)):
            return None
        heads = f"{self.num_q_heads} attention heads"
        if self.num_q_heads % tp == 0:
            heads = f"{self.num_kv_heads} KV heads (they must split or replicate evenly)"
        valid = ", ".join(str(t) for t in self.tp_degrees())
        return f"parallel.tp={tp} must divide {self.name}'s {heads}; valid degrees: {valid}"

    # ---- parameters ------------------------------------------------------------------------
    def attention_params(self, layer: Layer) -> int:
        h = self.hidden_size
        if layer.attention is Attention.LINEAR:
            lin = self.linear
            qk, v = (
                2 * lin.num_key_heads * lin.key_head_dim,
                lin.num_value_heads * lin.value_head_dim,
            )
            gates = 2 * lin.num_value_heads  # per-head decay and write strength
            return h * (qk + 2 * v + gates) + v * h + lin.conv_kernel * (qk + v)
        if layer.attention is Attention.MLA:
            m = self.mla
            q_out = self.num_q_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
            q = h * q_out if m.q_lora_rank is None else h * m.q_lora_rank + m.q_lora_rank * q_out
            kv = h * m.latent_dim + m.kv_lora_rank * self.num_q_heads * (
                m.qk_nope_head_dim + m.v_head_dim
            )
            return q + kv + self.num_q_heads * m.v_head_dim * h
        q_out = self.q_width * (2 if self.gated_attention_output else 1)
        params = h * (q_out + 2 * self.kv_width) + self.q_width * h
        if self.qkv_bias:
            params += self.q_width + 2 * self.kv_width
        return params

    def mlp_params(self, layer: Layer) -> tuple[int, int]:
        """(total, active) parameters of one layer's MLP; gated (3 matrices) throughout."""
        h = self.hidden_size
        if not layer.moe:
            dense = 3 * h * self.intermediate_size
            return dense, dense
        m = self.moe
        expert = 3 * h * m.expert_intermediate_size
        shared = 3 * h * m.shared_intermediate_size
        router = h * m.num_experts
        return (
            m.num_experts * expert + shared + router,
            m.experts_per_token * expert + shared + router,
        )

    @property
    def params(self) -> ParamCount:
        h = self.hidden_size
        embedding = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        total = active = embedding + h  # + final norm
        for layer, count in self.layer_groups.items():
            attn = self.attention_params(layer)
            mlp_total, mlp_active = self.mlp_params(layer)
            total += count * (attn + mlp_total + 2 * h)
            active += count * (attn + mlp_active + 2 * h)
        return ParamCount(total=total, active=active, embedding=embedding)

    @property
    def expert_params(self) -> int:
        """Routed-expert parameters (the part MXFP4 checkpoints quantize)."""
        if self.moe is None:
            return 0
        per_layer = self.moe.num_experts * 3 * self.hidden_size * self.moe.expert_intermediate_size
        return per_layer * sum(1 for layer in self.layers if layer.moe)

    def resolve_weight_dtype(self, dtype: str) -> str:
        if dtype not in WEIGHT_DTYPES:
            raise UserError(f"dtype={dtype!r}: choose one of {', '.join(WEIGHT_DTYPES)}")
        return self.checkpoint_dtype if dtype == "auto" else dtype

    def weight_bytes(self, dtype: str = "auto") -> int:
        """Bytes of weights. Quantized formats keep embeddings and the LM head in bf16."""
        dtype = self.resolve_weight_dtype(dtype)
        p = self.params
        if dtype in ("bf16", "fp16"):
            return int(p.total * DTYPE_BYTES[dtype])
        if dtype == self.checkpoint_dtype and self.quantized_experts_only:
            quantized = self.expert_params
        else:
            quantized = p.total_non_embedding
        rest = p.total - quantized
        return int(quantized * DTYPE_BYTES[dtype] + rest * DTYPE_BYTES["bf16"])

    # ---- KV cache --------------------------------------------------------------------------
    def kv_dtype_bytes(self, kv_dtype: str) -> float:
        if kv_dtype not in KV_DTYPES:
            raise UserError(f"kv_cache_dtype={kv_dtype!r}: choose one of {', '.join(KV_DTYPES)}")
        if kv_dtype == "auto":  # the model's activation dtype
            return DTYPE_BYTES["fp16" if self.checkpoint_dtype == "fp16" else "bf16"]
        return DTYPE_BYTES[kv_dtype]

    def kv_bytes_per_token_of(self, layer: Layer, kv_dtype: str = "auto") -> int:
        """Per-token KV bytes of one layer (0 for linear attention, which holds a fixed state)."""
        b = self.kv_dtype_bytes(kv_dtype)
        match layer.attention:
            case Attention.LINEAR:
                return 0
            case Attention.MLA:
                latent = int(self.mla.latent_dim * b)
                return latent + (self.indexer.bytes_per_token if self.indexer else 0)
            case _:
                return int(2 * self.kv_width * b)

    def kv_bytes_per_token_by_kind(self, kv_dtype: str = "auto") -> dict[str, int]:
        """Per-token KV bytes summed over the layers of each attention kind."""
        out: dict[str, int] = {}
        for layer, count in self.layer_groups.items():
            kind = layer.attention.value
            out[kind] = out.get(kind, 0) + count * self.kv_bytes_per_token_of(layer, kv_dtype)
        return out

    def kv_bytes_per_token(self, kv_dtype: str = "auto") -> int:
        """Per-token KV bytes over all layers that keep per-token KV (windowed layers included)."""
        return sum(self.kv_bytes_per_token_by_kind(kv_dtype).values())

    def kv_bytes_for_sequence(
        self, num_tokens: int, kv_dtype: str = "auto", windows_bounded: bool = True
    ) -> int:
        """KV bytes one sequence of `num_tokens` holds: windowed layers bounded by their window
        (an allocator that frees what slides out), or at full length (`windows_bounded` False:
        one that gives every layer a slot per token, sim/engines/windows.py)."""
        total = 0
        for layer, count in self.layer_groups.items():
            held = num_tokens
            if windows_bounded and layer.window_tokens:
                held = min(num_tokens, layer.window_tokens)
            total += count * held * self.kv_bytes_per_token_of(layer, kv_dtype)
        return total + self.linear_state_bytes(kv_dtype)

    def linear_state_bytes(self, kv_dtype: str = "auto") -> int:
        """Fixed state one request holds in linear-attention layers (stored at the KV dtype)."""
        if self.linear is None:
            return 0
        n = sum(1 for layer in self.layers if layer.attention is Attention.LINEAR)
        return int(n * self.linear.state_values * self.kv_dtype_bytes(kv_dtype))

    # ---- FLOPs -----------------------------------------------------------------------------
    def attention_flops_per_token(self, context_tokens: int) -> int:
        """Score and value FLOPs of one new token attending to `context_tokens` (all layers)."""
        flops = 0
        for layer, count in self.layer_groups.items():
            ctx = context_tokens
            if layer.attention in (Attention.SLIDING, Attention.CHUNKED):
                ctx = min(ctx, layer.window_tokens)
            if layer.attention is Attention.LINEAR:
                lin = self.linear
                flops += count * 4 * lin.num_value_heads * lin.key_head_dim * lin.value_head_dim
            elif layer.attention is Attention.MLA:
                m = self.mla
                flops += count * 2 * self.num_q_heads * ctx * (m.latent_dim + m.kv_lora_rank)
            else:
                flops += count * 4 * self.num_q_heads * self.head_dim * ctx
        return flops

    def flops_per_token(self, context_tokens: int = 0) -> int:
        """Forward FLOPs of one token: 2 x active non-embedding weights + attention + LM head."""
        p = self.params
        lm_head = self.vocab_size * self.hidden_size
        linear = 2 * (p.active - p.embedding + lm_head)
        return linear + self.attention_flops_per_token(context_tokens)
