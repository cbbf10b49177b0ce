"""vLLM's defaults and derivation rules, release by release, 0.4 to 0.33.

Facts from ../shared/reference/engine-defaults.md, checked against the released sources
(`vllm/engine/arg_utils.py`, `vllm/config.py`, `vllm/platforms/cuda.py`, the attention
selector); each rule's text names its source. A published release between two listed ones
(sim/engines/published.py) takes the rules of the nearest earlier one. Whether a 0.8-0.10
release runs V1 or falls back to V0 is sim/engines/v1_oracle.py's.
"""

from __future__ import annotations

from sim.engines.multistep import steps_asked
from sim.engines.overheads import cpu_overheads
from sim.engines.settings import user_value
from sim.engines.v1_oracle import V1_FROM, v0_cannot_serve, v0_fallback
from sim.engines.versions import version_tuple
from sim.engines.vllm_attention import attention_backend, windowed
from sim.engines.vllm_budget import CAPTURE_MAX, budgets, capture_sizes  # noqa: F401 (resolve.py's)
from sim.errors import UserError
from sim.specs.hardware import Hardware
from sim.specs.model import ModelSpec

# Releases whose rules differ from the one before (a release in between takes the rules of the
# nearest earlier one). Each rule below names the release and source file it was read from.
RELEASES = (
    "0.4.0",
    "0.4.1",  # chunked-prefill token budget 768 (config.py SchedulerConfig)
    "0.4.2",  # ... 512
    "0.4.3",
    "0.5.3",
    "0.5.5",
    "0.6.0",
    "0.6.2",  # V0 multi-step takes chunked prefill (PR #8378)
    "0.6.3",  # ... with a max(max_model_len, 2048) budget (config.py SchedulerConfig)
    "0.6.4",
    "0.6.5",
    "0.6.6",  # DeepSeek-V3 forced eager (config.py ModelConfig._verify_cuda_graph), 0.6.6 only
    "0.7.0",
    "0.7.1",  # MLA: V0 turns chunked prefill and prefix caching off (config.py VllmConfig)
    "0.7.3",
    "0.8.0",
    "0.8.2",  # V1 takes an FP8 KV cache with FlashAttention 3 on Hopper (v1_oracle.py)
    "0.8.4",
    "0.8.5",
    "0.9.0",
    "0.9.1",
    "0.9.2",
    "0.10.0",
    "0.10.1",  # V1: sinks -> Triton off Hopper; Blackwell MLA -> CUTLASS MLA (platforms/cuda.py)
    "0.10.2",
    "0.11.0",
    "0.11.1",
    "0.12.0",
    "0.13.0",  # Gemma 3 (PrefixLM over images) -> Triton attention (v1/attention/backends)
    "0.14.0",
    "0.15.0",  # Blackwell MLA: FlashInfer MLA forced, block 64 (platforms/cuda.py)
    "0.18.0",  # ... chosen by the selector at its smallest block, 32 (platforms/interface.py)
    "0.19.0",
    "0.20.0",
    "0.24.0",  # ... except on compute capability 10, where FlashAttention 4 takes it
    "0.28.0",
    "0.33.0",
)
# The first release whose model registry (model_executor/models/__init__.py, later registry.py)
# lists an architecture of the catalogue, read from every release's source between 0.4.0 and
# 0.33.0 (older architectures: since 0.4.0 or before).
ARCHITECTURE_FROM = {
    "DeepseekV3ForCausalLM": "0.6.6",
    "Gemma3ForConditionalGeneration": "0.8.0",
    "Llama4ForConditionalGeneration": "0.8.3",
    "MiniMaxText01ForCausalLM": "0.8.3",
    "Qwen3ForCausalLM": "0.8.4",
    "Qwen3MoeForCausalLM": "0.8.4",
    "GptOssForCausalLM": "0.10.1",
    "Qwen3NextForCausalLM": "0.10.2",
    "DeepseekV32ForCausalLM": "0.11.0",
    "KimiLinearForCausalLM": "0.11.1",
}

APPLICABLE_V0 = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "attention_backend",
    "cudagraph_mode",
    "cudagraph_capture_sizes",
    "scheduler",
    "policy",
    "preemption_mode",
    "async_output_proc",
    "num_scheduler_steps",
    "cpu_step_overhead_s",
    "cpu_per_seq_overhead_s",
    "cpu_output_per_seq_s",
    "prefix_hash_s_per_token",
    "gpu_memory_utilization",
    "block_size",
    "kv_cache_dtype",
    "non_torch_memory_bytes",
    "swap_space_bytes",
    "block_watermark",
    "num_gpu_blocks_override",
)
APPLICABLE_V1 = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "long_prefill_token_threshold",
    "attention_backend",
    "cudagraph_mode",
    "cudagraph_capture_sizes",
    "compile",
    "scheduler",
    "policy",
    "preemption_mode",
    "scheduler_reserve_full_isl",
    "async_scheduling",
    "cpu_step_overhead_s",
    "cpu_per_seq_overhead_s",
    "cpu_output_per_seq_s",
    "cpu_exposed_s",
    "prefix_hash_s_per_token",
    "gpu_memory_utilization",
    "block_size",
    "kv_cache_dtype",
    "cudagraph_memory_bytes",
    "non_torch_memory_bytes",
    "num_gpu_blocks_override",
)


NAMES = {  # knob -> vLLM's argument name, where they differ
    "policy": "scheduling_policy",
    "async_output_proc": "disable_async_output_proc",
}
SRC_AU = "engine/arg_utils.py"
SRC_CFG = "config.py"
SRC_ORACLE = "arg_utils _is_v1_supported_oracle; sim/engines/v1_oracle.py"


def releases(engine: str) -> tuple[str, ...]:
    return RELEASES


def after_memory(settings, pool_tokens: int):
    return settings  # vLLM's limits do not depend on the pool


def unsupported_model(version: str, model: ModelSpec) -> str | None:
    """Why vLLM `version` cannot load `model`, if it cannot."""
    first = ARCHITECTURE_FROM.get(model.architecture)
    if first and version_tuple(version) < version_tuple(first):
        return (
            f"vLLM {version} cannot serve {model.name}: {model.architecture} first appears in "
            f"vLLM {first}'s model registry; use engine=vllm@{first} or later"
        )
    return None


def defaults(
    engine: str,
    release: str,
    hw: Hardware,
    model: ModelSpec,
    tp: int,
    entry_point: str,
    overrides: dict | None = None,
):
    """(values, rules, applicable knobs, argument names) of vLLM `release` on this GPU, model
    and entry point; vLLM's argument names are the knob names."""
    v = version_tuple(release)
    at = f"vllm {release}"
    values, rules = {}, {}

    def put(knob, value, rule):
        values[knob], rules[knob] = value, rule

    fallback = v0_fallback(release, hw, model, overrides or {})
    refusal = fallback and v0_cannot_serve(release, model, fallback)
    if refusal:
        raise UserError(refusal)
    v1 = v >= V1_FROM and fallback is None
    if v1:
        why = "V1 engine (VLLM_USE_V1 defaults to 1 from 0.8.0; V1 only from 0.11.0)"
    elif fallback:
        why = f"falls back to the V0 engine: {fallback} ({SRC_ORACLE})"
    else:
        why = "V0 engine (V1 opt-in from 0.6.5 with VLLM_USE_V1=1)"
    put("scheduler", "vllm_v1" if v1 else "vllm_v0", f"{at}: {why}")
    max_len = _max_model_len(model, overrides, NAMES)
    put("max_model_len", max_len, "derived from the model: max_position_embeddings")
    if v1:
        put("enable_chunked_prefill", True, f"{at}: V1 always chunks prefills ({SRC_AU})")
    elif v >= (0, 5, 3) and max_len > 32768 and not windowed(model) and not _mla_v0(v, model):
        put(
            "enable_chunked_prefill",
            True,
            f"{at}: V0 auto-on when max_model_len {max_len} > 32768 on CUDA "
            f"(PR #6666; {SRC_AU} create_engine_config)",
        )
    else:
        if v < (0, 5, 3):
            why = "V0 default off"
        elif max_len <= 32768:
            why = f"V0: off, max_model_len {max_len} <= 32768"
        else:
            why = "V0: off, sliding window or MLA (from 0.7.1) blocks the >32K auto-on"
        put("enable_chunked_prefill", False, f"{at}: {why} ({SRC_AU})")
    steps = steps_asked(overrides)
    if values["enable_chunked_prefill"] and not v1 and steps > 1 and v < (0, 6, 2):
        put(  # 0.6.2 first took both (PR #8378)
            "enable_chunked_prefill",
            False,
            f"{at}: off with num_scheduler_steps > 1: multi-step runs prefills whole before "
            f"0.6.2 ({SRC_AU} create_engine_config refuses both, issue #8274 on 0.6.0)",
        )
    asked = user_value(overrides, "enable_chunked_prefill", NAMES)  # the budget follows it
    chunked = values["enable_chunked_prefill"]
    if asked is not None and not v1:  # V0's SchedulerConfig sizes the budget from the final flag
        chunked = str(asked).lower() == "true"
    seqs, budget, why = budgets(v, v1, at, hw, entry_point)
    put("max_num_seqs", seqs, why)
    if chunked and not v1 and steps > 1 and v >= (0, 6, 3):
        put(
            "max_num_batched_tokens",
            max(max_len, 2048),
            f"{at}: V0 multi-step with chunked prefill: max(max_model_len, 2048) (0.6.3-0.10.0; "
            f"{SRC_CFG} SchedulerConfig)",
        )
    elif chunked and (v1 or v >= (0, 4, 1)):
        put("max_num_batched_tokens", budget, why)
    else:
        put(
            "max_num_batched_tokens",
            max(max_len, 2048),
            f"{at}: V0 {'without chunked prefill' if not chunked else '(0.4.0)'}: "
            f"max(max_model_len, 2048) ({SRC_CFG} SchedulerConfig)",
        )
    if v >= (0, 12, 0):  # _set_default_max_num_seqs_and_batched_tokens_args
        values["max_num_seqs"] = min(values["max_num_seqs"], values["max_num_batched_tokens"])
    put(
        "enable_prefix_caching",
        v1,
        f"{at}: {'V1 default on' if v1 else 'V0 default off'} ({SRC_AU})",
    )
    put(
        "long_prefill_token_threshold",
        0,
        f"{at}: {'0 = no cap' if v >= (0, 7, 3) else 'absent (no cap)'}",
    )
    put("max_prefill_tokens", values["max_num_batched_tokens"], "the token budget")
    put("policy", "fcfs", f"{at}: scheduling_policy fcfs")
    put(
        "preemption_mode",
        "recompute",
        f"{at}: {'recompute only (V1)' if v1 else 'recompute for single-sequence requests (V0)'}",
    )
    put(
        "scheduler_reserve_full_isl",
        v >= (0, 19, 0),
        f"{at}: "
        + (
            "admission needs room for the whole prompt (added in 0.19.0)"
            if v >= (0, 19, 0)
            else "absent: admission needs room for the first chunk only"
        ),
    )
    if v1:
        put("async_output_proc", True, f"{at}: V1 processes outputs in the frontend process")
    elif v >= (0, 6, 0):
        put("async_output_proc", True, f"{at}: async output processing on (0.6.0, PR #7049)")
    else:
        put("async_output_proc", False, f"{at}: outputs processed inside the step (before 0.6)")
    put(
        "num_scheduler_steps",
        1,
        f"{at}: "
        + (
            "V0 only (multi-step scheduling: 0.5.5-0.10.0)"
            if v1
            else "multi-step scheduling is opt-in (0.5.5-0.10.0, PR #7000)"
            if v >= (0, 5, 5)
            else "absent: multi-step scheduling arrives in 0.5.5 (PR #7000)"
        ),
    )
    async_on = v1 and v >= (0, 14, 0)
    put(
        "async_scheduling",
        async_on,
        f"{at}: "
        + (
            "async_scheduling auto-enabled (0.14.0, config VllmConfig.__post_init__)"
            if async_on
            else "async_scheduling False (an opt-in flag 0.10.0-0.13.0)"
            if v >= (0, 10, 0)
            else "no async scheduling (the flag arrives in 0.10.0)"
        ),
    )
    cpu, rule = cpu_overheads("vllm", release, values["scheduler"])  # a V0 fallback: V0's
    for knob, value in cpu.items():
        put(knob, value, rule)
    util = 0.92 if v >= (0, 20, 0) else 0.90
    put("gpu_memory_utilization", util, f"{at}: {util} (0.92 from 0.20.0; cache config)")
    kv = "auto (the model's dtype" + (  # read in the 0.12.0 and 0.19.0 wheels
        ", for a ModelOpt FP8 checkpoint too: its kv_cache_quant_algo loads only KV scales"
        " (quantization/modelopt.py; attention/layer.py takes cache_config.cache_dtype))"
        if (0, 12, 0) <= v < (0, 20, 0) else ")"
    )  # fmt: skip
    put("kv_cache_dtype", "auto", f"{at}: {kv}")
    swap = not v1 and v < (0, 18, 0)
    put(
        "swap_space_bytes",
        4 * 2**30 if swap else 0,
        f"{at}: {'4 GiB CPU swap pool (V0)' if swap else 'no swap (V1 recomputes)'}",
    )
    put(
        "block_watermark",
        0.0 if v1 else 0.01,
        f"{at}: {'no watermark (V1)' if v1 else 'V0 block manager watermark 0.01'}",
    )
    put("num_gpu_blocks_override", 0, f"{at}: not set (the pool is sized from memory)")
    _graphs(v, v1, at, values, rules)
    if v == (0, 6, 6) and model.architecture == "DeepseekV3ForCausalLM":
        values["cudagraph_mode"], values["compile"] = "NONE", False
        values["async_output_proc"] = False  # use_async_output_proc = not enforce_eager
        rules["async_output_proc"] = rules["cudagraph_mode"] = (
            f"{at}: DeepSeek-V3 runs eager (enforce_eager forced; {SRC_CFG} "
            "ModelConfig._verify_cuda_graph, 0.6.6 only)"
        )
    put("capacity_policy", "", "not a vLLM setting")
    for knob in ("new_token_ratio", "min_new_token_ratio", "new_token_ratio_decay"):
        put(knob, 0.0, "not a vLLM setting")
    for knob in ("retract_decode_steps", "retract_ratio_offset"):
        put(knob, 0, "not a vLLM setting")
    _, block_size, _ = attention_backend(engine, release, hw, model, "auto", v1)
    put(
        "block_size",
        block_size,
        f"{at}: {'the MLA backend needs it' if block_size != 16 else 'CUDA platform default 16'}",
    )
    return values, rules, APPLICABLE_V1 if v1 else APPLICABLE_V0, NAMES


def _mla_v0(v: tuple, model: ModelSpec) -> bool:
    """vLLM runs `model` as MLA: from 0.7.1 (config.py VllmConfig.__post_init__ use_mla; until
    then DeepSeek-V3 ran as plain attention)."""
    return model.mla is not None and v >= (0, 7, 1)


def _graphs(v, v1: bool, at: str, values: dict, rules: dict) -> None:
    """CUDA-graph mode and compilation by release (capture sizes are derived later, once
    max_num_seqs and the budget are final)."""
    if not v1:
        mode, why = "FULL_DECODE_ONLY", f"{at}: V0 captures whole decode batches only"
        compiled = False
    elif v < (0, 11, 0):
        mode, why = "PIECEWISE", f"{at}: piecewise graphs inside torch.compile (level 3)"
        compiled = True
    else:
        mode, why = "FULL_AND_PIECEWISE", f"{at}: FULL_AND_PIECEWISE (PR #25444, 0.11.0)"
        compiled = True
    values["cudagraph_mode"], rules["cudagraph_mode"] = mode, why
    values["compile"] = compiled
    rules["compile"] = f"{at}: {'torch.compile, inductor' if compiled else 'no torch.compile'}"


def graph_memory_subtracted(release: str) -> bool:
    """From 0.20.0 the CUDA-graph pool is profiled and subtracted before KV sizing
    (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 1)."""
    return version_tuple(release) >= (0, 20, 0)


STREAM_EACH_STEP_FROM = (0, 6, 2)  # V0 multi-step: multi_step_stream_outputs, default True
# (PR #8335); before, a window's tokens reach the client at its end


def profile_sampler_bytes_per_logit(release: str, v1: bool) -> int:
    """GPU bytes per (row x vocabulary) entry at the peak of the profile run's sampler warm-up
    (one row per sequence, max_num_seqs rows; the lm-head output in bf16 is held meanwhile).

    V0 (worker/model_runner.py profile_run: top_p 0.99, top_k vocab-1) and V1 from 0.8.0
    (PR #13594, v1/worker/gpu_model_runner.py _dummy_sampler_run: top_p 0.9, top_k vocab-1) run
    the sort-based top-k/top-p of the PyTorch path (FlashInfer sampling is opt-in), whose peak
    is the sort itself: bf16 logits 2 + fp32 copy 4 + sorted values 4 + sort indices (int64) 8,
    and inside torch.sort (aten/src/ATen/native/cuda/SortStable.cu segmented_sort_pairs, the
    path for rows of more than 2,048 entries in 128 segments or more) the int64 iota of
    original indices 8 and cub's DeviceSegmentedRadixSort alternate key and value buffers
    4 + 8 = 38. After the sort the masks, softmax, cumsum and re-sorted scatter hold at most 32
    (bf16 2 + fp32 4 + values 4 + indices 8 + top-k mask 1 + softmax 4 + cumsum 4 + top-p mask
    1 + scatter 4), below it. vLLM's own logs agree: Llama-3-8B on an H100 (0.6.5, 256 rows x
    128,256) peaks at 1.26 GiB, this gives 1.22 (32 gave 1.04); on 2 x RTX 4090 (0.7.2) the
    sampling rank's pool is 1.23 GiB smaller than the other rank's, this gives 1.21 (0.99);
    validation/memory/memory_logs.yaml. V1 before 0.8.0 ran no sampler in the profile: the
    logits only (bf16 2 + fp32 4). From 0.18.0 (the first release whose API docs list
    v1/sample/ops/topk_topp_triton.py, PR #33538) the Triton kernel masks in place: bf16 2 +
    fp32 4 + probabilities 4 + exponential noise 4 = 14."""
    v = version_tuple(release)
    if v1 and v < (0, 8, 0):
        return 6
    if v1 and v >= (0, 18, 0):
        return 14
    return 38


def _max_model_len(model: ModelSpec, overrides: dict | None, names: dict) -> int:
    """The context the engine derives its budgets from: the user's, else the model's."""
    value = user_value(overrides, "max_model_len", names)
    return int(value) if value is not None else model.max_position_embeddings
