"""TensorRT-LLM's defaults: the LLM API / trtllm-serve on the PyTorch backend, 1.x.

Read from the NVIDIA/TensorRT-LLM sources (tensorrt_llm/llmapi/llm_args.py, builder.py
BuildConfig, _torch/pyexecutor/_util.py, cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp
and microBatchScheduler.cpp) in 1.x snapshots that carry no release tag, and the versioned
docs of 1.4.0rc4; the defaults below were the same in every 1.x snapshot read, so 1.0 and 1.4
share one rule set. The releases (release candidates among them) a run may name are those
sim/engines/published.py lists.

The entry point "server" is trtllm-serve (the LLM API's own defaults); "offline" is
trtllm-bench throughput, which derives its batch and token limits, max_seq_len, KV cache
dtype and CUDA-graph sizes from its dataset's lengths (sim/engines/trtllm_bench.py). It reads
them from BENCH_ARGS, trtllm-bench's own option names (the average ISL and OSL), and the run's
weight dtype from `dtype`; without them the LLM API's defaults stand, and the rule says so.
"""

from __future__ import annotations

import math

from sim.engines import trtllm_bench
from sim.engines.overheads import cpu_overheads
from sim.engines.settings import user_value
from sim.errors import UserError
from sim.specs.hardware import Hardware
from sim.specs.model import ModelSpec

RELEASES = ("1.0.0", "1.4.0")
CAPTURE_MAX = 128
APPLICABLE = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "attention_backend",
    "cudagraph_mode",
    "cudagraph_capture_sizes",
    "scheduler",
    "capacity_policy",
    "async_scheduling",
    "cpu_step_overhead_s",
    "cpu_per_seq_overhead_s",
    "cpu_exposed_s",
    "gpu_memory_utilization",
    "block_size",
    "kv_cache_dtype",
    "non_torch_memory_bytes",
)
NAMES = {
    "max_num_seqs": "max_batch_size",
    "max_num_batched_tokens": "max_num_tokens",
    "max_model_len": "max_seq_len",
    "enable_prefix_caching": "enable_block_reuse",
    "capacity_policy": "capacity_scheduler_policy",
    "async_scheduling": "disable_overlap_scheduler",
    "gpu_memory_utilization": "free_gpu_memory_fraction",
    "block_size": "tokens_per_block",
    "cudagraph_capture_sizes": "cuda_graph_batch_sizes",
}
SRC = "llm_args.py"
BENCH_ARGS = ("target_input_len", "target_output_len", "dtype")  # consumed by defaults()


def releases(engine: str) -> tuple[str, ...]:
    return RELEASES


def unsupported_model(version: str, model: ModelSpec) -> str | None:
    """Every catalogue architecture is taken (no model registry is modelled)."""
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
    at = f"trtllm {release}"
    values, rules = {}, {}

    def put(knob, value, rule):
        values[knob], rules[knob] = value, rule

    put("scheduler", "trtllm", f"{at}: in-flight batching (capacity + micro-batch scheduler)")
    put("max_num_seqs", 2048, f"{at}: max_batch_size 2048 (BuildConfig, {SRC})")
    put("max_num_batched_tokens", 8192, f"{at}: max_num_tokens 8192 (BuildConfig, {SRC})")
    put("max_prefill_tokens", 8192, "the token budget")
    put("max_model_len", _max_model_len(model, overrides, NAMES), "derived from the model config")
    put("enable_chunked_prefill", False, f"{at}: enable_chunked_prefill False ({SRC})")
    put("enable_prefix_caching", True, f"{at}: KvCacheConfig.enable_block_reuse True")
    put("long_prefill_token_threshold", 0, "not a TensorRT-LLM setting")
    put("policy", "fcfs", f"{at}: requests in arrival order")
    put(
        "capacity_policy",
        "GUARANTEED_NO_EVICT",
        f"{at}: SchedulerConfig.capacity_scheduler_policy ({SRC})",
    )
    put("preemption_mode", "recompute", f"{at}: MAX_UTILIZATION pauses and recomputes")
    put("scheduler_reserve_full_isl", False, "not a TensorRT-LLM setting")
    put("async_scheduling", True, f"{at}: overlap scheduler on (disable_overlap_scheduler False)")
    put("async_output_proc", True, f"{at}: responses processed behind the next step")
    put("num_scheduler_steps", 1, "not a TensorRT-LLM setting")
    for knob in ("new_token_ratio", "min_new_token_ratio", "new_token_ratio_decay"):
        put(knob, 0.0, "not a TensorRT-LLM setting")
    for knob in ("retract_decode_steps", "retract_ratio_offset"):
        put(knob, 0, "not a TensorRT-LLM setting")
    cpu, rule = cpu_overheads("trtllm", release)
    for knob, value in cpu.items():
        put(knob, value, rule)
    put(
        "gpu_memory_utilization",
        0.9,
        f"{at}: free_gpu_memory_fraction 0.9 of the memory free after weights and the "
        "max_num_tokens profiling run (_util.py KvCacheCreator)",
    )
    put("block_size", 32, f"{at}: KvCacheConfig.tokens_per_block 32")
    put("kv_cache_dtype", "auto", f"{at}: auto")
    put("swap_space_bytes", 0, "not a TensorRT-LLM setting")
    put("block_watermark", 0.0, "not a TensorRT-LLM setting")
    put("num_gpu_blocks_override", 0, "not a TensorRT-LLM setting")
    put(
        "cudagraph_mode",
        "FULL_DECODE_ONLY",
        f"{at}: CUDA graphs for generation-only batches (CudaGraphConfig)",
    )
    put("compile", False, f"{at}: no torch.compile")
    if entry_point == "offline":
        _bench(values, rules, hw, model, tp, overrides or {}, at)
    return values, rules, APPLICABLE, NAMES


def _bench(values: dict, rules: dict, hw, model: ModelSpec, tp: int, overrides: dict, at: str):
    """trtllm-bench throughput's own settings (sim/engines/trtllm_bench.py) over the LLM API's."""
    isl, osl = overrides.get("target_input_len"), overrides.get("target_output_len")
    bench = f"{at} trtllm-bench"
    if isl is None or osl is None:
        for knob in ("max_num_seqs", "max_num_batched_tokens"):
            rules[knob] += (
                " (trtllm-bench derives it from its dataset: give engine_args "
                "target_input_len and target_output_len)"
            )
        return
    isl, osl = _length("target_input_len", isl), _length("target_output_len", osl)
    dtype = str(overrides.get("dtype") or model.checkpoint_dtype)
    kv, kv_rule = trtllm_bench.kv_dtype(dtype)
    fraction = user_value(overrides, "gpu_memory_utilization", NAMES)
    fraction = trtllm_bench.KV_FRACTION if fraction is None else float(fraction)
    bs, tokens, rule = trtllm_bench.limits(hw, model, tp, 1, dtype, kv, isl, osl, fraction)
    values["max_num_seqs"], rules["max_num_seqs"] = bs, f"{bench}: max_batch_size: {rule}"
    chunked = user_value(overrides, "enable_chunked_prefill", NAMES)
    if not chunked or str(chunked).lower() == "false":
        need = math.ceil(isl) + bs
        if need > tokens:
            rule += f"; chunked context off: raised to ISL + max_batch_size = {need}"
            tokens = need
    values["max_num_batched_tokens"] = values["max_prefill_tokens"] = tokens
    rules["max_num_batched_tokens"] = f"{bench}: max_num_tokens: {rule}"
    if user_value(overrides, "max_model_len", NAMES) is None:
        values["max_model_len"] = math.ceil(isl) + math.ceil(osl)
        rules["max_model_len"] = f"{bench}: max_seq_len = the dataset's ISL + OSL"
    values["kv_cache_dtype"], rules["kv_cache_dtype"] = kv, f"{bench}: {kv_rule}"
    values["gpu_memory_utilization"] = fraction
    rules["gpu_memory_utilization"] = (
        f"{bench}: --kv_cache_free_gpu_mem_fraction {fraction:g} of the memory free after "
        "start-up (throughput.py)"
    )
    values["graph_max_bs"] = bs
    rules["cudagraph_capture_sizes"] = (
        f"{bench}: CUDA graphs with padding up to max_batch_size {bs} (get_settings)"
    )


def _length(key: str, value) -> float:
    """A dataset length trtllm-bench takes: a finite number > 0, or a one-line error."""
    try:
        length = float(value)
    except (TypeError, ValueError):
        length = math.nan
    if isinstance(value, bool) or not math.isfinite(length) or length <= 0:
        raise UserError(f"engine_args.{key}={value!r}: give the dataset's mean length in tokens")
    return length


def capture_sizes(release: str, max_bs: int | None) -> tuple[tuple[int, ...], str]:
    """trtllm-serve's sizes up to 128; trtllm-bench's (`max_bs`: its max_batch_size), padded."""
    if max_bs is not None:
        sizes = trtllm_bench.capture_sizes(max_bs)
        return sizes, f"1, 2, 4, 8..128 step 8, powers of 2, {max_bs} (CudaGraphConfig, padding)"
    top = CAPTURE_MAX
    sizes = [*range(1, 32), 32, 64, 128, *range(256, top + 1, 128)]
    return tuple(s for s in sizes if s <= top), f"1..31, 32, 64, 128 up to {top} (CudaGraphConfig)"


def attention_backend(
    engine: str, release: str, hw: Hardware, model: ModelSpec, kv_dtype: str
) -> tuple[str, int, str]:
    return "TRTLLM", 32, f"trtllm {release}: attn_backend TRTLLM"


def after_memory(settings, pool_tokens: int):
    return settings


def _max_model_len(model: ModelSpec, overrides: dict | None, names: dict) -> int:
    """The context the engine derives its budgets from: the user's, else the model's."""
    value = user_value(overrides, "max_model_len", names)
    return int(value) if value is not None else model.max_position_embeddings
