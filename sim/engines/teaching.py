"""Two engines for teaching, to compare with continuous batching:

  orca    iteration-level scheduling (requests join and leave at any step) but no paged KV:
          each request reserves KV for its whole sequence (prompt + max output) on admission;
  static  request-level batching: a batch of up to max_num_seqs requests runs until its last
          request finishes, and only then does the next batch start.
Both run on vLLM-like kernels (FlashAttention, CUDA graphs) and leave CPU time out.
"""

from __future__ import annotations

from sim.engines.overheads import cpu_overheads
from sim.engines.settings import user_value
from sim.specs.hardware import Hardware
from sim.specs.model import ModelSpec

RELEASES = ("1",)
CAPTURE_MAX = 256
APPLICABLE = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "attention_backend",
    "cudagraph_mode",
    "cudagraph_capture_sizes",
    "scheduler",
    "policy",
    "gpu_memory_utilization",
    "block_size",
    "kv_cache_dtype",
)


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
    values, rules = {}, {}
    at = f"{engine} (teaching engine)"

    def put(knob, value, rule):
        values[knob], rules[knob] = value, rule

    put("scheduler", engine, at)
    put("max_num_seqs", 64 if engine == "static" else 256, f"{at}: batch size")
    put("max_num_batched_tokens", 16384, f"{at}: token budget of a step")
    put("max_prefill_tokens", 16384, f"{at}: token budget of a step")
    put(
        "max_model_len",
        min(_max_model_len(model, overrides, {}), 32768),
        f"{at}: the model's context, capped at 32K for a teaching-sized KV reservation",
    )
    put("enable_chunked_prefill", False, f"{at}: whole prompts")
    put("enable_prefix_caching", False, f"{at}: no prefix cache")
    put("long_prefill_token_threshold", 0, at)
    put("policy", "fcfs", at)
    put("preemption_mode", "recompute", at)
    put("scheduler_reserve_full_isl", True, f"{at}: the whole sequence is reserved")
    for knob, value in (
        ("async_scheduling", False),
        ("async_output_proc", False),
        ("num_scheduler_steps", 1),
        ("capacity_policy", ""),
        ("new_token_ratio", 0.0),
        ("min_new_token_ratio", 0.0),
        ("new_token_ratio_decay", 0.0),
        ("retract_decode_steps", 0),
        ("retract_ratio_offset", 0),
        ("swap_space_bytes", 0),
        ("block_watermark", 0.0),
        ("num_gpu_blocks_override", 0),
    ):
        put(knob, value, f"{at}: not modelled (CPU time left out)")
    cpu, rule = cpu_overheads("teaching", "1")
    for knob, value in cpu.items():
        put(knob, value, rule)
    put("gpu_memory_utilization", 0.9, at)
    put("block_size", 16, at)
    put("kv_cache_dtype", "auto", at)
    put("cudagraph_mode", "FULL_DECODE_ONLY", f"{at}: decode batches as CUDA graphs")
    put("compile", False, at)
    return values, rules, APPLICABLE, {}


def capture_sizes(release: str, max_bs: int | None) -> tuple[tuple[int, ...], str]:
    top = max_bs or CAPTURE_MAX
    return tuple(s for s in (1, 2, 4, *range(8, top + 1, 8)) if s <= top), f"1, 2, 4, 8..{top}"


def attention_backend(
    engine: str, release: str, hw: Hardware, model: ModelSpec, kv_dtype: str
) -> tuple[str, int, str]:
    major = hw.sm_major
    fa = 3 if major == 9 else 2
    return f"FLASH_ATTN_FA{fa}", 16, f"{engine}: FlashAttention {fa}"


def after_memory(settings, pool_tokens: int):
    return settings


def _max_model_len(model: ModelSpec, overrides: dict | None, names: dict) -> int:
    """The context the engine derives its budgets from: the user's, else the model's."""
    value = user_value(overrides, "max_model_len", names)
    return int(value) if value is not None else model.max_position_embeddings
