"""EngineSettings: every setting a simulation uses, resolved, with its category and rule.

`sim.profiles.resolve()` builds one from (engine spec, hardware, model, parallelism, entry point,
user overrides). upgrade_diff compares two of them field by field; the category says which kind
of cause a difference is, the rule says where the value came from.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum


class Category(StrEnum):
    DEFAULTS = "defaults"  # budgets and limits
    KERNELS = "kernels"  # attention/GEMM/sampler backend, CUDA graphs, compile
    SCHEDULING = "scheduling"  # policy, preemption, CPU overhead, async scheduling
    MEMORY = "memory"  # utilisation, block size, KV dtype, reserved memory


@dataclass(frozen=True, slots=True)
class EngineSettings:
    engine: str  # "vllm"
    version: str  # "0.33.0"
    entry_point: str  # "server" (vllm serve) | "offline" (the LLM class)
    # defaults
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    enable_chunked_prefill: bool
    enable_prefix_caching: bool
    long_prefill_token_threshold: int  # 0 = no cap on one request's chunk
    # kernels
    attention_backend: str
    cudagraph_mode: str  # NONE | PIECEWISE | FULL_AND_PIECEWISE
    cudagraph_capture_sizes: tuple[int, ...]
    compile: bool
    # scheduling
    scheduler: str  # which scheduler class runs: "vllm_v1"
    policy: str  # fcfs
    preemption_mode: str  # recompute
    scheduler_reserve_full_isl: bool  # admit only if the whole prompt fits in free blocks
    async_scheduling: bool  # CPU work of step n+1 overlaps GPU work of step n
    cpu_step_overhead_s: float  # scheduling + input prep + output processing, per step
    cpu_per_seq_overhead_s: float  # the part that grows with the batch
    # memory
    gpu_memory_utilization: float
    block_size: int
    kv_cache_dtype: str
    cudagraph_memory_bytes: int  # graph pool subtracted before KV sizing (0 if not subtracted)
    non_torch_memory_bytes: int  # CUDA context, cuBLAS/NCCL workspaces
    rules: Mapping[str, str]  # field name -> the rule that set it

    def records(self) -> list[dict]:
        """One flat record per setting: name, value, category, rule."""
        return [
            {
                "name": name,
                "value": _plain(getattr(self, name)),
                "category": CATEGORY[name].value,
                "rule": self.rules.get(name, ""),
            }
            for name in SETTING_NAMES
        ]


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


CATEGORY: dict[str, Category] = {
    "max_num_seqs": Category.DEFAULTS,
    "max_num_batched_tokens": Category.DEFAULTS,
    "max_model_len": Category.DEFAULTS,
    "enable_chunked_prefill": Category.DEFAULTS,
    "enable_prefix_caching": Category.DEFAULTS,
    "long_prefill_token_threshold": Category.DEFAULTS,
    "attention_backend": Category.KERNELS,
    "cudagraph_mode": Category.KERNELS,
    "cudagraph_capture_sizes": Category.KERNELS,
    "compile": Category.KERNELS,
    "scheduler": Category.SCHEDULING,
    "policy": Category.SCHEDULING,
    "preemption_mode": Category.SCHEDULING,
    "scheduler_reserve_full_isl": Category.SCHEDULING,
    "async_scheduling": Category.SCHEDULING,
    "cpu_step_overhead_s": Category.SCHEDULING,
    "cpu_per_seq_overhead_s": Category.SCHEDULING,
    "gpu_memory_utilization": Category.MEMORY,
    "block_size": Category.MEMORY,
    "kv_cache_dtype": Category.MEMORY,
    "cudagraph_memory_bytes": Category.MEMORY,
    "non_torch_memory_bytes": Category.MEMORY,
}

SETTING_NAMES: tuple[str, ...] = tuple(CATEGORY)

_NOT_SETTINGS = {"engine", "version", "entry_point", "rules"}
assert {f.name for f in fields(EngineSettings)} - _NOT_SETTINGS == set(SETTING_NAMES)

# The Python type of each setting, for converting command-line overrides.
SETTING_TYPES: dict[str, type] = {
    name: typing.get_origin(hint) or hint
    for name, hint in typing.get_type_hints(EngineSettings).items()
    if name in CATEGORY
}
