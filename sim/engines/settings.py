"""EngineSettings: every setting a simulation uses, resolved, with its category and rule.

`sim.engines.resolve.resolve()` builds one from (engine spec, hardware, model, parallelism,
entry point, user overrides). The fields are the simulator's knobs, shared by all engine
families; each engine shows (and accepts as engine_args) the knobs it has, under its own
argument names. upgrade_diff compares two of them field by field; the category says which kind
of cause a difference is, the rule says where the value came from.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum


class Category(StrEnum):
    DEFAULTS = "defaults"  # budgets and limits
    KERNELS = "kernels"  # attention/GEMM backend, CUDA graphs, compile
    SCHEDULING = "scheduling"  # policy, preemption, CPU overhead, async / overlapped scheduling
    MEMORY = "memory"  # utilisation, block size, KV dtype, reserved memory, swap


@dataclass(frozen=True, slots=True)
class EngineSettings:
    engine: str  # "vllm" | "sglang" | "trtllm" | "orca" | "static"
    version: str  # as asked for, e.g. "0.9.2"
    rule_set: str  # the release whose rules applied (the nearest not after `version`)
    entry_point: str  # "server" (the OpenAI-compatible server) | "offline" (the LLM class)
    # defaults: budgets and limits
    max_num_seqs: int
    max_num_batched_tokens: int  # the per-step token budget (chunk size for SGLang)
    max_model_len: int
    enable_chunked_prefill: bool
    enable_prefix_caching: bool
    long_prefill_token_threshold: int  # 0 = no cap on one request's chunk
    max_prefill_tokens: int  # tokens one prefill step may admit (SGLang); else the budget
    # kernels
    attention_backend: str
    cudagraph_mode: str  # NONE | FULL_DECODE_ONLY | PIECEWISE | FULL_AND_PIECEWISE
    cudagraph_capture_sizes: tuple[int, ...]
    compile: bool
    # scheduling
    scheduler: str  # which scheduler runs: vllm_v0 | vllm_v1 | sglang | trtllm | orca | static
    policy: str  # fcfs | priority | lpm
    preemption_mode: str  # recompute | swap
    scheduler_reserve_full_isl: bool  # admit only if the whole prompt fits in free blocks
    async_scheduling: bool  # step n+1 planned (CPU) while step n runs: schedulers/ahead.py
    async_output_proc: bool  # output processing overlaps the next step (vLLM V0 0.6+)
    num_scheduler_steps: int  # multi-step scheduling: decode steps per scheduler call
    multi_step_streams: bool  # tokens reach the client step by step (False: vLLM V0 before
    # 0.6.2 sends a multi-step window's tokens at its end)
    capacity_policy: str  # TensorRT-LLM: GUARANTEED_NO_EVICT | MAX_UTILIZATION
    new_token_ratio: float  # SGLang: share of max_new_tokens admission reserves, at first
    min_new_token_ratio: float  # ... and the floor it decays to
    new_token_ratio_decay: float  # ... per decode step
    retract_decode_steps: int  # SGLang: retract until what is left can decode this many steps
    retract_ratio_offset: int  # SGLang: added to the ratio's denominator after a retraction
    cpu_step_overhead_s: float  # engine-loop CPU time per step: scheduling, input prep
    cpu_per_seq_overhead_s: float  # ... and per running sequence
    cpu_output_per_seq_s: float  # output processing per running sequence (detokenise, stream)
    cpu_exposed_s: float  # CPU time left on the critical path when scheduling asynchronously
    cpu_executor_s: float  # a multi-GPU replica's executor per step (0 on one GPU)
    prefix_hash_s_per_token: float  # prefix-cache hashing per prefill token
    # memory
    gpu_memory_utilization: float  # vLLM / SGLang: of all GPU memory; TRT-LLM: of what is free
    block_size: int
    kv_cache_dtype: str
    cudagraph_memory_bytes: int  # graph pool subtracted before KV sizing (0 if not subtracted)
    non_torch_memory_bytes: int  # CUDA context, cuBLAS/NCCL workspaces
    swap_space_bytes: int  # CPU memory for swapped-out KV blocks (vLLM V0)
    block_watermark: float  # share of blocks kept free when admitting (vLLM V0)
    num_gpu_blocks_override: int  # KV blocks when set (vLLM); 0: the pool is sized from memory
    sampler_bytes_per_logit: int  # vLLM: the profile run's sampler peak per vocabulary entry
    windows_bounded: bool  # windowed layers hold only their window (sim/engines/windows.py)
    # speculative decoding (sim/engines/speculative.py)
    speculative_method: str  # none | ngram | draft_model | eagle | mtp
    num_speculative_tokens: int  # draft tokens proposed per decoding request and step
    spec_acceptance: tuple[float, ...]  # P(draft i accepted | drafts before it accepted)
    speculative_model: str  # draft_model: the draft's catalogue name
    # KV offloading (sim/kv/offload.py): evicted prefix blocks kept below the GPU pool
    kv_offload_cpu_bytes: int  # host memory per GPU (0: none)
    kv_offload_disk_bytes: int  # disk per GPU below it (0: none)
    kv_offload_disk_bytes_per_s: float  # its read bandwidth
    # disaggregated prefill/decode (sim/run/disagg.py, sim/kv/transfer.py)
    kv_transfer_layerwise: bool  # a prefill replica sends each layer's KV as it is computed
    rules: Mapping[str, str]  # field name -> the rule that set it
    applicable: tuple[str, ...] = ()  # the knobs this engine has, in the order it shows them
    names: Mapping[str, str] = None  # knob -> the engine's own argument name, where different
    enable_mixed_chunk: bool = False  # SGLang: running decodes ride in each prefill step
    fp8_gemm_backend: str = ""  # the kernel of block-FP8 linear layers: deepgemm | cutlass |
    # triton (SGLang, sim/engines/sglang_fp8.py); "": not modelled for this engine
    jit_first_use: bool = False  # JIT GEMM kernels compile at a step's first use of each
    # configuration, inside serving (sim/cost/first_use.py); False: ahead of time or at start-up

    def display_name(self, knob: str) -> str:
        return (self.names or {}).get(knob, knob)

    def displayed_value(self, knob: str):
        value = getattr(self, knob)
        if self.display_name(knob) in INVERTED:
            return not value
        return list(value) if isinstance(value, tuple) else value

    def records(self) -> list[dict]:
        """One flat record per setting this engine has: its own name, value, category, rule."""
        return [
            {
                "name": self.display_name(k),
                "value": self.displayed_value(k),
                "category": CATEGORY[k].value,
                "rule": self.rules.get(k, ""),
            }
            for k in (self.applicable or SETTING_NAMES)
        ]

    def as_mapping(self) -> dict:
        """`{name: {value, category, rule}}`, as summary.json's engine_settings."""
        return {r["name"]: {k: r[k] for k in ("value", "category", "rule")} for r in self.records()}


# Engine argument names whose meaning is the negation of the knob they set.
INVERTED = frozenset(
    {
        "disable_radix_cache",
        "disable_overlap_schedule",
        "disable_overlap_scheduler",
        "disable_async_output_proc",
    }
)

CATEGORY: dict[str, Category] = {
    "max_num_seqs": Category.DEFAULTS,
    "max_num_batched_tokens": Category.DEFAULTS,
    "max_model_len": Category.DEFAULTS,
    "enable_chunked_prefill": Category.DEFAULTS,
    "enable_prefix_caching": Category.DEFAULTS,
    "long_prefill_token_threshold": Category.DEFAULTS,
    "max_prefill_tokens": Category.DEFAULTS,
    "attention_backend": Category.KERNELS,
    "cudagraph_mode": Category.KERNELS,
    "cudagraph_capture_sizes": Category.KERNELS,
    "compile": Category.KERNELS,
    "scheduler": Category.SCHEDULING,
    "policy": Category.SCHEDULING,
    "preemption_mode": Category.SCHEDULING,
    "scheduler_reserve_full_isl": Category.SCHEDULING,
    "async_scheduling": Category.SCHEDULING,
    "async_output_proc": Category.SCHEDULING,
    "num_scheduler_steps": Category.SCHEDULING,
    "capacity_policy": Category.SCHEDULING,
    "new_token_ratio": Category.SCHEDULING,
    "min_new_token_ratio": Category.SCHEDULING,
    "new_token_ratio_decay": Category.SCHEDULING,
    "retract_decode_steps": Category.SCHEDULING,
    "retract_ratio_offset": Category.SCHEDULING,
    "cpu_step_overhead_s": Category.SCHEDULING,
    "cpu_per_seq_overhead_s": Category.SCHEDULING,
    "cpu_output_per_seq_s": Category.SCHEDULING,
    "cpu_exposed_s": Category.SCHEDULING,
    "cpu_executor_s": Category.SCHEDULING,
    "multi_step_streams": Category.SCHEDULING,
    "prefix_hash_s_per_token": Category.SCHEDULING,
    "gpu_memory_utilization": Category.MEMORY,
    "block_size": Category.MEMORY,
    "kv_cache_dtype": Category.MEMORY,
    "cudagraph_memory_bytes": Category.MEMORY,
    "non_torch_memory_bytes": Category.MEMORY,
    "swap_space_bytes": Category.MEMORY,
    "block_watermark": Category.MEMORY,
    "num_gpu_blocks_override": Category.MEMORY,
    "sampler_bytes_per_logit": Category.MEMORY,
    "windows_bounded": Category.MEMORY,
    "speculative_method": Category.DEFAULTS,
    "num_speculative_tokens": Category.DEFAULTS,
    "spec_acceptance": Category.DEFAULTS,
    "speculative_model": Category.DEFAULTS,
    "kv_offload_cpu_bytes": Category.MEMORY,
    "kv_offload_disk_bytes": Category.MEMORY,
    "kv_offload_disk_bytes_per_s": Category.MEMORY,
    "kv_transfer_layerwise": Category.SCHEDULING,
    "enable_mixed_chunk": Category.SCHEDULING,
    "fp8_gemm_backend": Category.KERNELS,
    "jit_first_use": Category.KERNELS,
}

SETTING_NAMES: tuple[str, ...] = tuple(CATEGORY)

_NOT_SETTINGS = {"engine", "version", "rule_set", "entry_point", "rules", "applicable", "names"}
assert {f.name for f in fields(EngineSettings)} - _NOT_SETTINGS == set(SETTING_NAMES)

# The Python type of each setting, for converting command-line overrides.
SETTING_TYPES: dict[str, type] = {
    name: typing.get_origin(hint) or hint
    for name, hint in typing.get_type_hints(EngineSettings).items()
    if name in CATEGORY
}


def user_value(overrides: Mapping[str, object] | None, knob: str, names: Mapping[str, str]):
    """The user's engine_args value for `knob`, by its own name or the engine's, or None."""
    overrides = overrides or {}
    for key in (knob, names.get(knob, knob)):
        if overrides.get(key) is not None:
            return overrides[key]
    return None
