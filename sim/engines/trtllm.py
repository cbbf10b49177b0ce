"""TensorRT-LLM's defaults: the LLM API / trtllm-serve on the PyTorch backend, 1.x.

Read from the NVIDIA/TensorRT-LLM sources (tensorrt_llm/llmapi/llm_args.py, builder.py
BuildConfig, _torch/pyexecutor/_util.py, cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp
and microBatchScheduler.cpp) in 1.x snapshots that carry no release tag, and the versioned
docs of 1.4.0rc4; the defaults below were the same in every 1.x snapshot read, so 1.0 and 1.4
share one rule set. The releases (release candidates among them) a run may name are those
sim/engines/published.py lists.
"""

from __future__ import annotations

from sim.engines.overheads import cpu_overheads
from sim.engines.settings import user_value
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
    return values, rules, APPLICABLE, NAMES


def capture_sizes(release: str, max_bs: int | None) -> tuple[tuple[int, ...], str]:
    top = max_bs or CAPTURE_MAX
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
