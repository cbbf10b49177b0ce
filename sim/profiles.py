"""Engine profiles: a version's defaults plus the rules that derive settings from GPU and model.

`resolve()` turns (engine spec, hardware, model, TP, entry point, user overrides) into one
EngineSettings, recording for each setting the rule that set it. Facts per version come from
../shared/reference/engine-defaults.md; this module covers vLLM's V1 engine at its newest
release there (0.33.0). Older releases, SGLang and TensorRT-LLM are separate profiles to come.
"""

from __future__ import annotations

from collections.abc import Mapping

from sim.errors import UserError
from sim.hardware import Hardware
from sim.model import KV_DTYPES, ModelSpec
from sim.settings import SETTING_NAMES, SETTING_TYPES, EngineSettings

GIB = 2**30
LATEST = {"vllm": "0.33.0"}
KNOWN_VERSIONS = {"vllm": ("0.33.0",)}
ENTRY_POINTS = ("server", "offline")
BLOCK_SIZES = (1, 8, 16, 32, 64, 128)
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL_AND_PIECEWISE")

# vLLM engine arguments the command line accepts as engine_args.NAME (beside any setting name).
ENGINE_ARGS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "long_prefill_token_threshold",
    "gpu_memory_utilization",
    "block_size",
    "kv_cache_dtype",
    "enforce_eager",
    "async_scheduling",
    "cudagraph_mode",
    "max_cudagraph_capture_size",
    "attention_backend",
    "scheduler_reserve_full_isl",
)

# Uncalibrated priors (scheduling and memory); calibration against real runs replaces them.
CPU_STEP_OVERHEAD_S = 1.5e-3
CPU_PER_SEQ_OVERHEAD_S = 1.0e-5
NON_TORCH_BYTES = int(0.5 * GIB)  # CUDA context and library workspaces, one GPU
NCCL_BYTES = int(0.4 * GIB)  # extra with TP > 1 (NCCL and custom all-reduce buffers)
CUDAGRAPH_BYTES = {"NONE": 0, "PIECEWISE": int(0.5 * GIB), "FULL_AND_PIECEWISE": int(1.0 * GIB)}


def parse_engine_spec(spec: str) -> tuple[str, str]:
    """`vllm@0.33.0` -> ("vllm", "0.33.0"); a bare `vllm` means its newest known release."""
    name, _, version = spec.partition("@")
    name = name.strip().lower()
    if name not in KNOWN_VERSIONS:
        raise UserError(
            f"engine={spec!r}: unknown engine {name!r}; known: {', '.join(sorted(KNOWN_VERSIONS))}"
            " (as name@version, e.g. vllm@0.33.0)"
        )
    version = version.strip() or LATEST[name]
    if version not in KNOWN_VERSIONS[name]:
        raise UserError(
            f"engine={spec!r}: no profile for {name} {version}; "
            f"known versions: {', '.join(KNOWN_VERSIONS[name])}"
        )
    return name, version


def capture_sizes(max_size: int, max_num_batched_tokens: int) -> tuple[int, ...]:
    """vLLM's default CUDA-graph batch sizes: 1, 2, 4, then steps of 8 to 256, then of 16."""
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, max_size + 1, 16)]
    return tuple(s for s in sizes if s <= min(max_size, max_num_batched_tokens))


def resolve(
    spec: str,
    hardware: Hardware,
    model: ModelSpec,
    tp: int,
    entry_point: str = "server",
    overrides: Mapping[str, object] | None = None,
) -> EngineSettings:
    name, version = parse_engine_spec(spec)
    if entry_point not in ENTRY_POINTS:
        raise UserError(f"entry_point={entry_point!r}: choose one of {', '.join(ENTRY_POINTS)}")
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    unknown = sorted(set(overrides) - set(ENGINE_ARGS) - set(SETTING_NAMES))
    if unknown:
        raise UserError(
            f"engine_args.{unknown[0]} is not an engine argument; known: {', '.join(ENGINE_ARGS)}"
        )
    values, rules = _vllm_v1_defaults(version, hardware, model, tp, entry_point)
    for key, value in overrides.items():
        _apply_override(values, rules, key, value)
    _derive(values, rules, overrides, hardware, model, f"{name} {version}")
    settings = EngineSettings(
        engine=name, version=version, entry_point=entry_point, rules=rules, **values
    )
    _check(settings, model)
    return settings


def _vllm_v1_defaults(version, hw: Hardware, model: ModelSpec, tp: int, entry_point: str):
    v, r = {}, {}
    mem_gib = hw.hbm_gib
    at = f"vllm {version}"
    small_name = any(s in hw.display_name.lower() for s in ("a100", "gb10"))
    if mem_gib >= 160:
        v["max_num_seqs"], r["max_num_seqs"] = 1024, f"{at}: GPU memory {mem_gib:.0f} GiB >= 160"
        budget, why = 16384, f"{at}: GPU memory {mem_gib:.0f} GiB >= 160 (both entry points)"
    elif mem_gib >= 70 and not small_name:
        v["max_num_seqs"] = 1024
        r["max_num_seqs"] = f"{at}: GPU memory {mem_gib:.0f} GiB >= 70 and not A100/GB10"
        budget = 16384 if entry_point == "offline" else 8192
        why = f"{at}: GPU memory {mem_gib:.0f} GiB >= 70, {entry_point} entry point"
    else:
        v["max_num_seqs"] = 256
        r["max_num_seqs"] = f"{at}: GPU memory {mem_gib:.0f} GiB < 70 or A100/GB10"
        budget = 8192 if entry_point == "offline" else 2048
        why = f"{at}: small-GPU tier, {entry_point} entry point"
    v["max_num_batched_tokens"], r["max_num_batched_tokens"] = budget, why
    v["max_model_len"] = model.max_position_embeddings
    r["max_model_len"] = "derived from the model: max_position_embeddings"
    for key, value in (
        ("enable_chunked_prefill", True),
        ("enable_prefix_caching", True),
        ("long_prefill_token_threshold", 0),
    ):
        v[key], r[key] = value, f"{at} default"
    _, block_size, _ = attention_backend(hw, model, "auto")
    v["block_size"] = block_size
    r["block_size"] = f"{at}: {'MLA backend needs it' if block_size != 16 else 'platform default'}"
    v["cudagraph_mode"], r["cudagraph_mode"] = "FULL_AND_PIECEWISE", f"{at}: optimization level O2"
    v["compile"], r["compile"] = True, f"{at}: optimization level O2 (torch.compile, inductor)"
    v["scheduler"], r["scheduler"] = "vllm_v1", f"{at}: V1 engine"
    v["policy"], r["policy"] = "fcfs", f"{at} default"
    v["preemption_mode"], r["preemption_mode"] = "recompute", f"{at}: V1 preempts by recompute only"
    v["scheduler_reserve_full_isl"] = True
    r["scheduler_reserve_full_isl"] = f"{at} default"
    v["async_scheduling"], r["async_scheduling"] = True, f"{at}: async scheduling auto-enabled"
    v["cpu_step_overhead_s"], r["cpu_step_overhead_s"] = CPU_STEP_OVERHEAD_S, "prior (uncalibrated)"
    v["cpu_per_seq_overhead_s"] = CPU_PER_SEQ_OVERHEAD_S
    r["cpu_per_seq_overhead_s"] = "prior (uncalibrated)"
    v["gpu_memory_utilization"], r["gpu_memory_utilization"] = 0.92, f"{at} default"
    v["kv_cache_dtype"], r["kv_cache_dtype"] = "auto", f"{at} default (the model's dtype)"
    v["non_torch_memory_bytes"] = NON_TORCH_BYTES + (NCCL_BYTES if tp > 1 else 0)
    r["non_torch_memory_bytes"] = "prior: CUDA context and workspaces" + (
        ", plus NCCL buffers for TP > 1" if tp > 1 else ""
    )
    return v, r


def attention_backend(hw: Hardware, model: ModelSpec, kv_dtype: str) -> tuple[str, int, str]:
    """(backend, block size, rule) for a CUDA or ROCm GPU, following vLLM's selector."""
    if hw.vendor == "amd":
        return "ROCM_ATTN", 16, "derived from the GPU: ROCm platform"
    major = int(hw.compute_capability.split(".")[0])
    cc = f"compute capability {hw.compute_capability}"
    if model.mla is not None:
        if major == 10:
            return "CUTLASS_MLA", 128, f"derived: MLA model on {cc} (Blackwell)"
        return "FLASHMLA", 64, f"derived: MLA model on {cc}; FlashMLA needs block size 64"
    if major == 10:
        return "FLASHINFER", 16, f"derived from the GPU: {cc} (Blackwell) prefers FlashInfer"
    sinks = model.architecture.startswith("GptOss")
    if (kv_dtype == "fp8" and major != 9) or sinks:
        why = "attention sinks" if sinks else f"FP8 KV cache on non-Hopper {cc}"
        return "TRITON_ATTN", 16, f"derived: {why}"
    version = 3 if major == 9 else 2
    return f"FLASH_ATTN_FA{version}", 16, f"derived from the GPU: {cc} -> FlashAttention {version}"


def _apply_override(values: dict, rules: dict, key: str, value) -> None:
    rule = f"user override (engine_args.{key})"
    match key:
        case "enforce_eager":
            if _coerce(key, value, bool):
                values["cudagraph_mode"], values["compile"] = "NONE", False
                rules["cudagraph_mode"] = rules["compile"] = rule
        case "max_cudagraph_capture_size":
            values[key], rules["cudagraph_capture_sizes"] = _coerce(key, value, int), rule
        case "kv_cache_dtype":
            kv = "fp8" if str(value).startswith("fp8") else str(value)
            if kv not in KV_DTYPES:
                raise UserError(
                    f"engine_args.kv_cache_dtype={value!r}: choose one of "
                    f"{', '.join(KV_DTYPES)}, fp8_e4m3, fp8_e5m2"
                )
            values[key], rules[key] = kv, rule
        case "cudagraph_mode":
            mode = str(value).upper()
            if mode not in CUDAGRAPH_MODES:
                raise UserError(
                    f"engine_args.cudagraph_mode={value!r}: choose one of "
                    f"{', '.join(CUDAGRAPH_MODES)}"
                )
            values[key], rules[key] = mode, rule
        case _:
            values[key], rules[key] = _coerce(key, value, SETTING_TYPES[key]), rule


def _derive(values: dict, rules: dict, overrides, hw: Hardware, model: ModelSpec, at: str) -> None:
    """Settings vLLM derives from the others once the user's arguments are in."""
    if "attention_backend" not in overrides:
        backend, _, why = attention_backend(hw, model, values["kv_cache_dtype"])
        values["attention_backend"], rules["attention_backend"] = backend, why
    mode = values["cudagraph_mode"]
    max_capture = values.pop("max_cudagraph_capture_size", min(2 * values["max_num_seqs"], 512))
    if "cudagraph_capture_sizes" not in overrides:
        values["cudagraph_capture_sizes"] = (
            () if mode == "NONE" else capture_sizes(max_capture, values["max_num_batched_tokens"])
        )
        rules.setdefault(
            "cudagraph_capture_sizes",
            f"{at}: 1,2,4, 8..248 step 8, 256.. step 16, "
            f"up to {max_capture} and to the token budget",
        )
    if "cudagraph_memory_bytes" not in overrides:
        values["cudagraph_memory_bytes"] = CUDAGRAPH_BYTES[mode]
        rules["cudagraph_memory_bytes"] = (
            f"{at}: the {mode} graph pool is subtracted before KV sizing; its size is a prior"
        )


def _coerce(key: str, value, kind: type):
    """Convert an override to the type of the setting it sets, or say what is expected."""
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "false"):
                return str(value).lower() == "true"
            raise ValueError
        if kind is int:
            if isinstance(value, bool) or float(value) != int(float(value)):
                raise ValueError
            return int(float(value))
        if kind is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind is tuple:
            return tuple(int(x) for x in value)
        return str(value)
    except (TypeError, ValueError):
        raise UserError(f"engine_args.{key}={value!r}: expected {kind.__name__}") from None


def _check(s: EngineSettings, model: ModelSpec) -> None:
    """Settings the real engine refuses at start-up, with its advice."""

    def bad(msg: str):
        raise UserError(msg)

    for name, allowed in (
        ("scheduler", ("vllm_v1",)),
        ("policy", ("fcfs",)),
        ("preemption_mode", ("recompute",)),
    ):
        if getattr(s, name) not in allowed:
            bad(f"{name}={getattr(s, name)!r}: this profile supports {', '.join(allowed)}")
    if s.max_num_seqs < 1:
        bad(f"max_num_seqs={s.max_num_seqs}: must be >= 1")
    if s.max_num_batched_tokens < s.max_num_seqs:
        bad(
            f"max_num_batched_tokens ({s.max_num_batched_tokens}) must be >= max_num_seqs "
            f"({s.max_num_seqs}); raise engine_args.max_num_batched_tokens or lower max_num_seqs"
        )
    if s.block_size not in BLOCK_SIZES:
        bad(f"block_size={s.block_size}: choose one of {', '.join(map(str, BLOCK_SIZES))}")
    if s.max_num_batched_tokens < s.block_size:
        bad(
            f"max_num_batched_tokens ({s.max_num_batched_tokens}) is below block_size "
            f"({s.block_size})"
        )
    if not 0 < s.gpu_memory_utilization <= 1:
        bad(f"gpu_memory_utilization={s.gpu_memory_utilization}: must be in (0, 1]")
    if s.max_model_len < 1:
        bad(f"max_model_len={s.max_model_len}: must be >= 1")
    if s.max_model_len > model.max_position_embeddings:
        bad(
            f"max_model_len ({s.max_model_len}) exceeds the model's max_position_embeddings "
            f"({model.max_position_embeddings}); lower engine_args.max_model_len"
        )
    if not s.enable_chunked_prefill and s.max_num_batched_tokens < s.max_model_len:
        bad(
            f"max_num_batched_tokens ({s.max_num_batched_tokens}) is smaller than max_model_len "
            f"({s.max_model_len}) with chunked prefill off; raise max_num_batched_tokens or "
            "lower max_model_len"
        )
    if s.long_prefill_token_threshold < 0:
        bad("long_prefill_token_threshold must be >= 0 (0 = no cap)")
    if s.cpu_step_overhead_s < 0 or s.cpu_per_seq_overhead_s < 0:
        bad("CPU overheads must be >= 0")
    if model.mla is not None and s.attention_backend == "FLASHMLA" and s.block_size != 64:
        bad(f"FlashMLA needs block_size 64, got {s.block_size}")
