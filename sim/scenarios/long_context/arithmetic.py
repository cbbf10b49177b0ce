"""scenario=long_context, the arithmetic of one very long request.

Memory as the engine's start-up plan sizes it (sim/kv/memory.py) against what one sequence holds on
each GPU; the prefill walked chunk by chunk through the step cost model the engine itself
prices steps with (so the walk's total is the TTFT of the request alone, split by component);
the FLOPs of a prefill. Decode at that context: sim/scenarios/long_context/decode.py; the engine
runs with traffic: sim/scenarios/long_context/runs.py.

Per GPU, one sequence of n tokens holds, per layer kind:
    full (MHA / GQA)   n x 2 x kv_heads_per_gpu x head_dim x dtype     (KV heads split by TP)
    sliding / chunked  min(n, window) x the same where the release's allocator bounds them,
                       else n x the same (a slot per token; sim/engines/windows.py)
    MLA                n x (kv_lora_rank + rope_dim) x dtype             (replicated on every TP
                       + n x the sparse indexer's fp8 key and scale      rank, not split)
    linear attention   a fixed state per request, split by TP
each over 1/pp of the layers and, with decode context parallelism, 1/cp of the tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.cost.roofline import causal_pairs_scalar
from sim.cost.step import CostModel
from sim.engines.settings import EngineSettings
from sim.errors import UserError
from sim.kv.memory import GIB, activation_peak_bytes, layer_kv_bytes_per_token_per_gpu, plan_memory
from sim.specs.hardware import Hardware
from sim.specs.model import Attention, ModelSpec

NODE_GPUS = 8  # tensor parallelism stays inside one NVLink node
MAX_PP = 16  # pipeline stages searched for a fit beyond one node


def kv_bytes_sequence_per_gpu(
    model: ModelSpec,
    num_tokens: int,
    kv_dtype: str,
    tp: int,
    pp: int = 1,
    cp: int = 1,
    bounded: bool = True,
) -> int:
    """KV bytes one GPU holds for one sequence of `num_tokens` (see the module docstring);
    windowed layers at full length unless `bounded`."""
    held_tokens = -(-num_tokens // cp)
    total = 0
    for layer, count in model.layer_groups.items():
        held = held_tokens
        if bounded and layer.window_tokens:
            held = min(held_tokens, layer.window_tokens)
        total += count * held * layer_kv_bytes_per_token_per_gpu(model, layer, kv_dtype, tp)
    total += model.linear_state_bytes(kv_dtype) // tp
    return -(-total // pp)


@dataclass(frozen=True, slots=True)
class Fit:
    """Whether one sequence of `num_tokens` fits one GPU of a replica at (tp, pp, cp)."""

    tp: int
    pp: int
    cp: int
    num_tokens: int
    fits: bool
    weights_bytes_per_gpu: int
    activation_bytes: int  # peak of a prefill chunk at the token budget (the plan's profile run)
    kv_pool_bytes_per_gpu: int  # what the plan leaves for the KV cache (0 if weights do not fit)
    kv_bytes_sequence_per_gpu: int
    max_context_tokens: int  # the longest sequence the pool holds (0 if weights do not fit)
    why: str  # one line when it does not fit, else ""

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.cp

    @property
    def parallel(self) -> str:
        return parallel_label(self.tp, self.pp, self.cp)


def parallel_label(tp: int, pp: int = 1, cp: int = 1) -> str:
    """`tp=8`, `tp=8 pp=2`, `tp=8 cp=4`."""
    return " ".join([f"tp={tp}"] + [f"{k}={v}" for k, v in (("pp", pp), ("cp", cp)) if v > 1])


def check_fit(
    hardware: Hardware,
    model: ModelSpec,
    settings: EngineSettings,
    num_tokens: int,
    weight_dtype: str,
    tp: int,
    pp: int = 1,
    cp: int = 1,
) -> Fit:
    """The engine's memory plan at (tp, pp) against one sequence of `num_tokens`."""
    kv_dtype = settings.kv_cache_dtype
    bounded = settings.windows_bounded
    need = kv_bytes_sequence_per_gpu(model, num_tokens, kv_dtype, tp, pp, cp, bounded)
    activation = activation_peak_bytes(model, settings, tp)
    weights = model.weight_bytes(weight_dtype) // (tp * pp)
    try:  # max_model_len is what is being asked: size the pool without it
        plan = plan_memory(
            hardware, model, replace(settings, max_model_len=1), tp, weight_dtype, pp
        )
    except UserError as exc:
        return Fit(tp, pp, cp, num_tokens, False, weights, activation, 0, need, 0, str(exc))
    pool = plan.kv_cache_bytes
    longest = max_context_tokens(model, kv_dtype, pool, tp, pp, cp, bounded)
    why = ""
    if need > pool:
        why = (
            f"one {num_tokens:,}-token sequence needs {need / GIB:.1f} GiB of KV cache per GPU "
            f"at {parallel_label(tp, pp, cp)}; the memory plan "
            f"leaves {pool / GIB:.1f} GiB (the longest that fits: {longest:,} tokens)"
        )
    return Fit(tp, pp, cp, num_tokens, need <= pool, weights, activation, pool, need, longest, why)


def max_context_tokens(
    model: ModelSpec,
    kv_dtype: str,
    pool_bytes: int,
    tp: int,
    pp: int = 1,
    cp: int = 1,
    bounded: bool = True,
) -> int:
    """The longest sequence whose KV fits `pool_bytes` on one GPU (bisection: the need grows
    with the length, step by step where windows cap it)."""
    lo, hi = 0, 1 << 40
    args = (kv_dtype, tp, pp, cp, bounded)
    if kv_bytes_sequence_per_gpu(model, hi, *args) <= pool_bytes:
        return hi  # nothing grows with the context (linear attention only)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if kv_bytes_sequence_per_gpu(model, mid, *args) <= pool_bytes:
            lo = mid
        else:
            hi = mid
    return lo


def tp_choices(model: ModelSpec, upto: int = NODE_GPUS) -> list[int]:
    """Tensor-parallel sizes a replica can use: powers of two the model's heads allow."""
    return [t for t in (1, 2, 4, 8, 16) if t in model.tp_degrees(upto)]


def smallest_fit(fit_at, model: ModelSpec, allow_pp: bool) -> Fit | None:
    """The first configuration on which the sequence fits, by GPU count: tp within a node,
    then pipeline stages of the largest tp (`fit_at(tp, pp)` -> Fit)."""
    tps = tp_choices(model)
    for tp in tps:
        fit = fit_at(tp, 1)
        if fit.fits:
            return fit
    if allow_pp:
        for pp in range(2, min(MAX_PP, model.num_layers) + 1):
            fit = fit_at(tps[-1], pp)
            if fit.fits:
                return fit
    return None


# ---- time ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Prefill:
    """A prompt of `num_tokens` prefilled alone in chunks of `budget` tokens: seconds by part.

    linear: GEMMs, experts, norms, activations, LM head (grow with n); attention: every
    layer's attention kernels (grow with n^2, or n x window / top-k); communication:
    tensor-parallel all-reduces; overhead: kernel launches and CPU time not hidden."""

    num_tokens: int
    budget: int
    num_chunks: int
    linear_s: float
    attention_s: float
    communication_s: float
    overhead_s: float
    first_chunk_s: float
    last_chunk_s: float

    @property
    def total_s(self) -> float:
        return self.linear_s + self.attention_s + self.communication_s + self.overhead_s

    def breakdown(self) -> dict:
        return {
            "linear": self.linear_s,
            "attention": self.attention_s,
            "communication": self.communication_s,
            "overhead": self.overhead_s,
        }


def walk_prefill(cost: CostModel, num_tokens: int, budget: int) -> Prefill:
    """Price each chunk of a prompt prefilled alone as the engine's step would.

    With pipeline parallelism a chunk enters the first stage as soon as the one before leaves
    it, and leaves the last stage no earlier than the one before plus its own time there (the
    stages are first in, first out), as sim/run/driver.py runs micro-batches: the first token
    lands when the last chunk does. The parts are then each chunk's GPU parts, scaled in
    proportion so that they and the CPU/launch overhead add up to that time."""
    parts = [0.0, 0.0, 0.0, 0.0]
    first = last = 0.0
    done = chunks = 0
    start = land = 0.0
    while done < num_tokens:
        q = min(budget, num_tokens - done)
        step = cost.cost([q], [done], [])
        done += q
        chunks += 1
        linear = step.linear_s + step.moe_s + step.elementwise_s + step.lm_head_s
        attention = step.attention_prefill_s + step.attention_decode_s
        comm = step.allreduce_s + step.p2p_s * (step.pp - 1)
        for k, v in enumerate(
            (linear, attention, comm, step.latency_s - linear - attention - comm)
        ):
            parts[k] += v
        land = max(start + step.latency_s, land + step.gpu_s / step.pp)
        start += step.stage_s
        first = first or step.latency_s
        last = step.latency_s
    if cost.pp > 1:  # overlapped in the pipeline: the same split of a shorter time
        gpu = parts[0] + parts[1] + parts[2]
        scale = max(land - parts[3], 0.0) / gpu
        parts = [parts[0] * scale, parts[1] * scale, parts[2] * scale, land - gpu * scale]
    return Prefill(num_tokens, budget, chunks, *parts, first, last)


# ---- FLOPs ---------------------------------------------------------------------------------
def prefill_flops(model: ModelSpec, num_tokens: int) -> tuple[float, float]:
    """(linear, attention) FLOPs of prefilling `num_tokens` from scratch. Linear: 2 x the
    active non-embedding weights per token, and the LM head on the last position. Attention:
    4 x heads x head_dim per query-key pair (scores and values), over n(n+1)/2 causal pairs
    for full layers, n x window for windowed ones, n x top-k for sparse ones plus the indexer
    over every pair; linear-attention layers update a fixed state per token."""
    p = model.params
    n = float(num_tokens)
    linear = 2.0 * (p.active - p.embedding) * n + 2.0 * model.vocab_size * model.hidden_size
    attention = 0.0
    for layer, count in model.layer_groups.items():
        if layer.attention is Attention.LINEAR:
            lin = model.linear
            attention += count * 4 * lin.num_value_heads * lin.key_head_dim * lin.value_head_dim * n
            continue
        window = layer.window_tokens or 0
        if model.indexer is not None:
            window = model.indexer.topk_tokens
            ix = model.indexer
            attention += (
                count * 2 * ix.num_heads * ix.head_dim * causal_pairs_scalar(n, 0, 0, False)
            )
        pairs = causal_pairs_scalar(n, 0.0, float(window), layer.attention is Attention.CHUNKED)
        if layer.attention is Attention.MLA:
            m = model.mla
            width = 2 * model.num_q_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim)
        else:
            width = 4 * model.num_q_heads * model.head_dim
        attention += count * width * pairs
    return linear, attention


def flops_crossover_tokens(model: ModelSpec) -> int:
    """The prompt length from which prefill spends more FLOPs in attention than in the linear
    layers (bisection; 0 when attention never catches up within 2^40 tokens)."""
    lo, hi = 1, 1 << 40
    linear, attention = prefill_flops(model, hi)
    if attention < linear:
        return 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        linear, attention = prefill_flops(model, mid)
        lo, hi = (mid, hi) if attention < linear else (lo, mid)
    return hi
