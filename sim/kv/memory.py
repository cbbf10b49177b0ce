"""The memory plan: how many KV blocks fit on each GPU, as the engine's start-up profiling finds.

vLLM (and the teaching engines):
    GPU memory x gpu_memory_utilization
      - weights (this GPU's shard)
      - the peak of the profile run: one forward over max_num_batched_tokens tokens split over
        max_num_seqs sequences, then the sampler warm-up on one row per sequence (the larger of
        the two; see activation_peak_bytes)
      - CUDA-graph pool (versions that subtract it before sizing the KV cache)
      - non-torch memory (CUDA context, NCCL and library workspaces)
      - linear-attention state for max_num_seqs requests
SGLang: mem_fraction_static is the share for weights and the KV pool together (activations and
    graphs live in the rest): GPU memory x mem_fraction_static - weights - non-torch - state.
TensorRT-LLM: free_gpu_memory_fraction of what is free once weights, activations, graphs and
    the runtime are in: (GPU memory - all of those) x fraction - state.
= KV cache bytes, divided into blocks of block_size tokens x KV bytes per token (every layer's
slot for those tokens). Windowed layers: where the release's allocator bounds them
(sim/engines/windows.py), a sequence longer than a window holds fewer blocks (blocks_for), else
they count at full length. SGLang's
page_size 1 is tracked in pages of KV_MIN_BLOCK tokens (a request's last page may hold up to
15 unused slots; the radix cache matches prefixes to 16 tokens, not 1). With pipeline
parallelism each GPU holds its stage's layers: a 1/pp share of weights and per-token KV.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from sim.engines.mxfp4 import PADDING as MXFP4_PADDING
from sim.engines.mxfp4 import mxfp4_moe_kernel
from sim.engines.settings import EngineSettings
from sim.engines.versions import version_tuple
from sim.errors import UserError
from sim.specs.hardware import Hardware
from sim.specs.model import DTYPE_BYTES, Attention, ModelSpec
from sim.specs.model_config import load_model

GIB = 2**30
ACT_BYTES = 2  # bf16 activations
LOGIT_BYTES = 4  # logits are upcast to fp32
SAMPLER_COPIES = 3  # other engines: logits, probabilities and sorted values together (prior)
SAMPLERS = ("pytorch", "flashinfer")  # the top-k/top-p path a vLLM installation runs


def installed_sampler_bytes_per_logit(release: str, scheduler: str, sampler: str) -> int | None:
    """Bytes per (row x vocabulary) entry at the peak of the profile run's sampler warm-up
    where the installation, not the release alone, decides the top-k/top-p path; None keeps
    the release's own rule (sim/engines/vllm.py profile_sampler_bytes_per_logit, the PyTorch
    sort path of a `pip install vllm`, which installs no FlashInfer).

    "flashinfer": vLLM V1 0.8.x with FlashInfer older than 0.2.3 installed. Read in the 0.8.2
    wheel (`pip download vllm==0.8.2 --no-deps`): v1/sample/ops/topk_topp_sampler.py
    TopKTopPSampler runs forward_cuda ("Using FlashInfer for top-p & top-k sampling.") when
    flashinfer imports, its version is below 0.2.3 and VLLM_USE_FLASHINFER_SAMPLER is not 0
    (V1 reads unset as on); v1/worker/gpu_model_runner.py _dummy_sampler_run warms it up with
    top_k = vocab - 1 and top_p 0.9 on max_num_seqs rows. Its peak: the lm head's bf16 logits
    2 (held by _dummy_sampler_run), v1/sample/sampler.py's fp32 copy 4 (temperature divides
    it in place), forward_cuda's fp32 softmax 4 and, in FlashInfer 0.2.1.post2
    (flashinfer/sampling.py of its sdist, `pip download flashinfer-python==0.2.1.post2`),
    top_k_top_p_sampling_from_probs's default filter_apply_order "top_k_first", which first
    writes top_k_renorm_probs into a new fp32 tensor 4, then samples it in one kernel: 14 (the
    sort path holds 38). vLLM's Docker images of the 0.8 line install exactly that wheel
    (the Dockerfile's vllm-base stage: flashinfer_python-0.2.1.post2+cu124torch2.6 on x86_64).
    "pytorch": the release's own rule. Other releases and V0 (whose sampler uses FlashInfer
    only when VLLM_USE_FLASHINFER_SAMPLER=1, by another path) are not modelled."""
    if sampler not in SAMPLERS:
        raise UserError(f"sampler {sampler!r}: choose one of {', '.join(SAMPLERS)}")
    if sampler == "pytorch":
        return None
    if scheduler != "vllm_v1" or version_tuple(release)[:2] != (0, 8):
        raise UserError(
            f"sampler 'flashinfer' is modelled for vLLM V1 0.8.x only (read in 0.8.2), "
            f"not {scheduler} {release}"
        )
    return FLASHINFER_SAMPLER_BYTES_PER_LOGIT


FLASHINFER_SAMPLER_BYTES_PER_LOGIT = 14  # bf16 2 + fp32 4 + softmax 4 + top-k renorm 4


def cuda_total_bytes(hardware: Hardware) -> int:
    """The device total the engines size against: what the CUDA driver reports to the process
    (torch.cuda.mem_get_info()'s total: vLLM's total_gpu_memory, which gpu_memory_utilization
    multiplies; SGLang and TensorRT-LLM take free memory from the same call), not nvidia-smi's
    total: the driver keeps the difference. The GPU file's cuda_total_bytes where public logs
    give it (hardware/h100-sxm.yaml), else its hbm_bytes."""
    return hardware.engine_total_bytes


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads are split across TP ranks; with fewer heads than ranks each rank keeps one."""
    return max(1, model.num_kv_heads // tp)


KV_MIN_BLOCK = 16  # the finest KV page the simulator tracks (SGLang's page_size 1 -> 16)


def kv_block_tokens(settings: EngineSettings) -> int:
    """Tokens per KV block as the simulator tracks the pool."""
    return max(settings.block_size, KV_MIN_BLOCK)


def kv_bytes_per_token_per_gpu(model: ModelSpec, kv_dtype: str, tp: int, pp: int = 1) -> int:
    """Per-token KV bytes one GPU stores, over all layers that keep per-token KV: a block's
    bytes per token (windowed layers included; what a bounded window saves is in blocks_for)."""
    total = sum(
        count * layer_kv_bytes_per_token_per_gpu(model, layer, kv_dtype, tp)
        for layer, count in model.layer_groups.items()
    )
    return -(-total // pp)


def layer_kv_bytes_per_token_per_gpu(model: ModelSpec, layer, kv_dtype: str, tp: int) -> int:
    """Per-token KV bytes one GPU stores for one layer: its share of the KV heads (one head at
    least), the whole MLA latent (replicated on every rank), nothing for linear attention."""
    match layer.attention:
        case Attention.LINEAR:
            return 0
        case Attention.MLA:
            return model.kv_bytes_per_token_of(layer, kv_dtype)
        case _:
            return int(
                2 * kv_heads_per_gpu(model, tp) * model.head_dim * model.kv_dtype_bytes(kv_dtype)
            )


def window_bytes_per_token(model: ModelSpec, kv_dtype: str, tp: int, pp: int = 1):
    """((window tokens, KV bytes per token one GPU stores in the layers with that window), ...),
    smallest window first; () for a model without windowed layers."""
    by_window: dict[int, int] = {}
    for layer, count in model.layer_groups.items():
        if layer.window_tokens:
            b = count * layer_kv_bytes_per_token_per_gpu(model, layer, kv_dtype, tp)
            by_window[layer.window_tokens] = by_window.get(layer.window_tokens, 0) + b
    return tuple((w, b // pp) for w, b in sorted(by_window.items()))


def activation_peak_bytes(model: ModelSpec, settings: EngineSettings, tp: int) -> int:
    """Peak of the start-up profile run: one forward at the token budget, then the sampler.

    The forward (vLLM): per token, in bf16, the larger of a layer's two phases
    (vllm/model_executor/models/llama.py of 0.6.4, LlamaModel/LlamaDecoderLayer/LlamaMLP
    .forward). When SiluAndMul runs, the residual stream, the previous layer's output (still
    held by LlamaModel.forward's loop until the layer returns), this layer's attention output
    (post_attention_layernorm works in place), gate_up (2 x intermediate / tp) and the
    activation's new output (intermediate / tp) are alive: 3 x hidden + 3 x intermediate / tp.
    At o_proj the same 2 x hidden, this rank's q/k/v and attention output and o_proj's output
    (hidden): 3 x hidden + (2 q + 2 kv) / tp. The two phases do not add up (q/k/v are freed
    before gate_up is allocated). vLLM 0.6.4's log on an RTX 3090 agrees
    (vllm-project/vllm#10517, Llama-3.1-8B, profile at 20,000 and 29,000 tokens:
    peak_torch_memory less the weights 2.07 and 2.99 GiB; this gives 2.06 and 2.99 GiB, the
    sum of both phases 2.44 and 3.54 GiB). Other engines keep the prior sum of both phases
    (4 x hidden, q/k/v and the MLP's 3 x intermediate / tp). vLLM then frees the forward's
    buffers but keeps its hidden states (tokens x hidden) while the sampler warms up on
    max_num_seqs rows of the full vocabulary (every rank: V1 gathers the logits to all, V0
    sizes the pool by the smallest rank's count, which is the sampling rank's); its peak
    bytes per entry come by release from profile_sampler_bytes_per_logit. Other engines:
    the forward plus fp32 logits, or three fp32 copies of them (a prior), for max_num_seqs
    rows (SGLang: its largest CUDA-graph batch, the one its reserve outside
    mem_fraction_static is sized for; TensorRT-LLM: one row per dummy request of its profile
    run, trtllm_profile_requests).
    """
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
    if settings.scheduler in ("vllm_v0", "vllm_v1"):
        # the larger of a layer's two phases, not their sum (see above)
        attention = 3 * h + (model.q_width + qkv) // tp
        forward = t * ACT_BYTES * max(attention, 3 * h + 3 * mlp_width // tp)
        rows = min(settings.max_num_seqs, t)
        per_logit = settings.sampler_bytes_per_logit
        return max(forward, t * h * ACT_BYTES + rows * model.vocab_size * per_logit)
    forward = t * ACT_BYTES * (4 * h + (qkv + 3 * mlp_width) // tp)  # other engines: a prior
    rows = settings.max_num_seqs
    if settings.scheduler == "sglang":  # its reserve for activations (server_args) is sized
        # by chunked_prefill_size and cuda_graph_max_bs: the batch it plans memory for
        rows = min(rows, max(settings.cudagraph_capture_sizes, default=rows))
    elif settings.scheduler == "trtllm":  # one logit row per dummy context request
        rows = trtllm_profile_requests(settings)
    logits = rows * model.vocab_size * LOGIT_BYTES
    return max(forward + logits, SAMPLER_COPIES * logits)


def trtllm_profile_requests(settings: EngineSettings) -> int:
    """Requests in TensorRT-LLM's KV-sizing profile run: KvCacheCreator fills max_num_tokens with
    dummy context requests of min(max_num_tokens, max_seq_len) tokens each, max_tokens=1, so the
    run computes one row of logits per request, not max_batch_size rows
    (tensorrt_llm/_torch/pyexecutor/_util.py, KvCacheCreator._create_dummy_context_requests and
    the estimate it feeds, read at NVIDIA/TensorRT-LLM 0004396 and in its 0.19-0.20-era form:
    the same loop)."""
    tokens = settings.max_num_batched_tokens
    per_request = max(1, min(tokens, settings.max_model_len))
    return -(-tokens // per_request)


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
    # windowed layers the release's allocator bounds: ((window tokens, their KV bytes per
    # token on this GPU), ...); () where windows count at full length, or there are none
    windows: tuple[tuple[int, int], ...] = ()
    window_rule: str = ""  # how the release sizes windowed layers ("" without any)

    @property
    def bytes_per_block(self) -> int:
        return self.kv_bytes_per_token * self.block_size

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens the pool can hold (the null block holds none)."""
        return (self.num_blocks - 1) * self.block_size

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks one sequence of `num_tokens` holds: one per block_size tokens, less what its
        bounded windowed layers no longer keep beyond their windows, in whole blocks."""
        blocks = -(-num_tokens // self.block_size)
        freed = 0
        for window, nbytes in self.windows:
            if num_tokens > window:
                freed += (num_tokens - window) * nbytes
        if not freed:
            return blocks
        return -(-(num_tokens * self.kv_bytes_per_token - freed) // self.bytes_per_block)

    def blocks_for_each(self, num_tokens: np.ndarray) -> np.ndarray:
        """blocks_for of every entry of an integer array, by the same integer arithmetic."""
        n = num_tokens.astype(np.int64)
        freed = np.zeros_like(n)
        for window, nbytes in self.windows:
            freed += np.maximum(n - window, 0) * nbytes
        bounded = -(-(n * self.kv_bytes_per_token - freed) // self.bytes_per_block)
        return np.where(freed > 0, bounded, -(-n // self.block_size))

    def longest_sequence_tokens(self) -> int:
        """The longest sequence the pool holds alone (kv_capacity_tokens without bounded
        windows; longer with them)."""
        usable = self.num_blocks - 1
        if not self.windows:
            return usable * self.block_size
        lo, hi = 0, 1 << 40
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.blocks_for(mid) <= usable else (lo, mid)
        return lo

    def record(self) -> dict:
        """summary.json's memory_plan; the window keys only for a model with windowed layers."""
        out = {**asdict(self), "kv_capacity_tokens": self.kv_capacity_tokens}
        if not self.window_rule:
            del out["windows"], out["window_rule"]
        else:
            out["windows"] = [list(w) for w in self.windows]
        return out


def plan_memory(
    hardware: Hardware,
    model: ModelSpec,
    settings: EngineSettings,
    tp: int,
    weight_dtype: str,
    pp: int = 1,
    ep: int = 1,
    check_fit: bool = True,
) -> MemoryPlan:
    """The KV pool one GPU of a replica gets. With experts spread over every data-parallel
    rank's GPUs (ep > tp), each GPU holds num_experts / ep of them. `check_fit=False` returns
    the plan even where the engine would refuse to start (a pool under two blocks, or one
    that cannot hold max_model_len): the memory-plan comparison holds such plans to the
    engines' logs (sim/scenarios/validate/memory_plans.py)."""
    total = cuda_total_bytes(hardware)
    frac = settings.gpu_memory_utilization
    weights = (model.weight_bytes(weight_dtype) + mxfp4_padding_bytes(
        hardware, model, settings, weight_dtype, tp
    )) // (tp * pp)  # fmt: skip
    if ep > tp:
        experts = int(model.expert_params * DTYPE_BYTES[model.resolve_weight_dtype(weight_dtype)])
        weights = (model.weight_bytes(weight_dtype) - experts) // (tp * pp) + experts // (ep * pp)
    activation = activation_peak_bytes(model, settings, tp)
    graphs, runtime = settings.cudagraph_memory_bytes, settings.non_torch_memory_bytes
    linear_state = (
        model.linear_state_bytes(settings.kv_cache_dtype) // (tp * pp) * settings.max_num_seqs
    )
    if settings.scheduler == "sglang":  # weights + KV pool = total x mem_fraction_static
        budget = int(total * frac)
        kv_bytes = budget - weights - runtime - linear_state
        what = f"{frac:.3f} x {total / GIB:.1f} GiB - weights - runtime"
    elif settings.scheduler == "trtllm":  # a fraction of what is free after start-up
        budget = total
        kv_bytes = int((total - weights - activation - graphs - runtime) * frac) - linear_state
        what = f"{frac:.2f} x (the {total / GIB:.1f} GiB left after weights and runtime)"
    else:
        budget = int(total * frac)
        kv_bytes = budget - weights - activation - graphs - runtime - linear_state
        what = f"{frac:.2f} x {total / GIB:.1f} GiB - weights - activations - runtime"
    block = kv_block_tokens(settings)
    per_token = kv_bytes_per_token_per_gpu(model, settings.kv_cache_dtype, tp, pp)
    if settings.speculative_method != "none":  # the proposer's weights and KV
        more_weights, more_kv = draft_memory(model, settings, weight_dtype, tp, pp, per_token)
        weights, per_token = weights + more_weights, per_token + more_kv
        kv_bytes -= more_weights
    if weights > budget:
        raise UserError(
            f"{model.name} weights need {weights / GIB:.1f} GiB per GPU at tp={tp}"
            f"{f' pp={pp}' if pp > 1 else ''}, more than {frac:.2f} x "
            f"{total / GIB:.1f} GiB of {hardware.name}; "
            "raise parallel.tp, use a smaller dtype, or a larger GPU"
        )
    if check_fit and kv_bytes < 2 * per_token * block:
        raise UserError(
            f"no memory left for the KV cache on {hardware.name} at tp={tp}: {what} = "
            f"{kv_bytes / GIB:.1f} GiB (weights {weights / GIB:.1f}, activations "
            f"{activation / GIB:.1f}, graphs and runtime {(graphs + runtime) / GIB:.1f}, "
            f"linear-attention state {linear_state / GIB:.1f} GiB); raise parallel.tp or the "
            "memory fraction, or lower the token budget / batch size"
        )
    windowed = window_bytes_per_token(model, settings.kv_cache_dtype, tp, pp)  # () without any
    windows = windowed if settings.windows_bounded else ()
    plan = MemoryPlan(
        total_bytes=total,
        gpu_memory_utilization=frac,
        weight_bytes=weights,
        activation_bytes=activation,
        cudagraph_bytes=graphs,
        non_torch_bytes=runtime,
        linear_state_bytes=linear_state,
        kv_cache_bytes=kv_bytes,
        kv_bytes_per_token=per_token,
        block_size=block,
        num_blocks=settings.num_gpu_blocks_override or kv_bytes // (per_token * block),
        windows=windows,
        window_rule=settings.rules.get("windows_bounded", "") if windowed else "",
    )
    # SGLang does not refuse a context longer than its pool: it caps a request at the pool
    # (sglang 0.5.8.post1 srt/managers/tp_worker.py: max_req_len = min(context_len - 1,
    # max_token_pool_size - 1)) and refuses longer requests on arrival (its scheduler's
    # admission_error); vLLM and TensorRT-LLM refuse to start
    sized = check_fit and settings.scheduler != "sglang"
    needed_blocks = plan.blocks_for(settings.max_model_len) if sized else 0
    if sized and needed_blocks > plan.num_blocks - 1:
        raise UserError(
            f"max_model_len {settings.max_model_len} needs "
            f"{needed_blocks * plan.bytes_per_block / GIB:.2f} GiB of KV cache for one request, "
            f"more than the {(plan.num_blocks - 1) * plan.bytes_per_block / GIB:.2f} GiB the "
            f"pool holds; the longest that fits is {plan.longest_sequence_tokens()} tokens: "
            "set engine_args.max_model_len at or below it, "
            "or raise the memory fraction or parallel.tp"
        )
    return plan


def mxfp4_padding_bytes(
    hardware: Hardware, model: ModelSpec, settings: EngineSettings, weight_dtype: str, tp: int
) -> int:
    """Bytes vLLM adds to MXFP4 expert weights to fit the kernel it runs them with (all its
    GPUs, over all layers; 0 elsewhere): each expert's intermediate size (per TP rank) and the
    hidden size padded to that kernel's tiles (sim/engines/mxfp4.py). gpt-oss-120b on Marlin:
    2,880 x 2,880 experts become 2,944 x 3,072, 9.0% more expert bytes, 5.13 GiB on one GPU;
    vLLM 0.10.1 logged 65.97 GiB loaded on an H100 with its Marlin FP4 warning
    (vllm-project/vllm#23278), the checkpoint's bytes are 60.69. On Hopper's Triton path (0.12
    on) one GPU's 2,880 need none, TP8's 360 become 384."""
    if model.moe is None or model.resolve_weight_dtype(weight_dtype) != "fp4":
        return 0
    kernel, _ = mxfp4_moe_kernel(settings.engine, settings.version, hardware)
    if kernel not in MXFP4_PADDING:
        return 0
    inter_tile, hidden_tile = MXFP4_PADDING[kernel]
    inter = model.moe.expert_intermediate_size // tp
    if not inter:
        return 0
    padded = (-(-inter // inter_tile) * inter_tile) * (
        -(-model.hidden_size // hidden_tile) * hidden_tile
    )
    experts = model.expert_params * DTYPE_BYTES["fp4"]
    return int(experts * padded // (inter * model.hidden_size)) - int(experts)


def draft_memory(model, settings, weight_dtype: str, tp: int, pp: int, per_token: int):
    """(weight bytes, KV bytes per token) the proposer adds on each GPU: an EAGLE head or an
    MTP module is about one decoder layer of the target (its weights, its KV in the same
    blocks); a draft model its own weights and KV; n-gram lookup nothing."""
    match settings.speculative_method:
        case "eagle" | "mtp":
            layers = max(model.mtp_layers, 1)
            weights = model.weight_bytes(weight_dtype) * layers // model.num_layers // tp
            return weights, per_token * pp * layers // model.num_layers
        case "draft_model":
            draft = load_model(settings.speculative_model)
            kv = kv_bytes_per_token_per_gpu(draft, settings.kv_cache_dtype, tp, 1)
            return draft.weight_bytes(weight_dtype) // tp, kv
        case _:
            return 0, 0
