"""Which vLLM engine a 0.8-0.10 release runs: V1 by default, V0 when an argument or the GPU is
one V1 does not take yet (engine/arg_utils.py `_is_v1_supported_oracle`, read in the wheels of
0.8.0 .. 0.8.5, 0.9.0, 0.9.2, 0.10.0 .. 0.10.2), and whether that V0 can serve the model.

An FP8 KV cache (kv_cache_dtype fp8, fp8_e4m3, fp8_e5m2), release by release:
    0.8.0, 0.8.1  V0, whatever the GPU ("No Fp8 KV cache so far": any kv_cache_dtype other than
                  auto falls back)
    0.8.2 ..      V1 when FlashAttention takes it: flash_attn_supports_fp8() (vllm_flash_attn/
                  fa_utils.py; attention/utils/fa_utils.py from 0.8.5) is FlashAttention 3 on
                  compute capability 9.x, and no VLLM_ATTENTION_BACKEND may be set (here: no
                  attention_backend other than FlashAttention 3 asked for)
    0.9.0 ..      ... or a ROCm GPU (current_platform.is_rocm(): supported)
    0.10.0 ..     the check moves to platforms/cuda.py is_kv_cache_dtype_supported: also every
                  backend on compute capability 10.0 (is_device_capability(100))
    0.10.2        ... and an MLA model, whose default backend (FlashMLA, CUTLASS MLA) takes FP8
    0.11.0        V0 removed: V1 only (sim/engines/vllm.py picks the backend that takes it)

V0 and Llama 4: 0.8.3 added Llama4ForConditionalGeneration, whose attention layers pass
use_irope to the backend; V1's FlashAttention and Triton backends take it, but none of 0.8.3's
V0 backends do (attention/backends/flash_attn.py, xformers.py: no such argument), so a V0
engine cannot build the model. From 0.8.4 every V0 backend takes it and warns that it falls back
to global attention (the chunked-local layers sized at full length: sim/engines/windows.py).
"""

from __future__ import annotations

from sim.engines.versions import version_tuple
from sim.specs.hardware import Hardware
from sim.specs.model import ModelSpec

V1_FROM = (0, 8, 0)
V0_LAST = (0, 11, 0)  # 0.11.0 removed the V0 engine
FP8_KV_FROM = (0, 8, 2)
SRC = "engine/arg_utils.py _is_v1_supported_oracle"
IROPE_V0_FROM = (0, 8, 4)  # the first release whose V0 backends take Llama 4's use_irope


def v0_fallback(release: str, hw: Hardware, model: ModelSpec, overrides: dict) -> str | None:
    """Why a 0.8-0.10 release falls back from V1 to the V0 engine, if it does."""
    v = version_tuple(release)
    if not V1_FROM <= v < V0_LAST:
        return None
    for arg in ("preemption_mode", "num_scheduler_steps"):
        if overrides.get(arg) not in (None, "recompute", 1, "1"):
            return f"--{arg.replace('_', '-')} is V0-only"
    if str(overrides.get("disable_async_output_proc")).lower() == "true":
        return "--disable-async-output-proc is V0-only"
    policy = overrides.get("scheduling_policy", overrides.get("policy"))
    if policy == "priority" and v < (0, 9, 2):
        return "--scheduling-policy priority is V0-only before 0.9.2"
    if hw.vendor == "nvidia" and hw.sm_major < 8:
        return f"compute capability {hw.compute_capability} < 8.0"
    kv = str(overrides.get("kv_cache_dtype") or "auto")
    if kv != "auto":
        return _fp8_kv_fallback(v, kv, hw, model, overrides.get("attention_backend"))
    return None


def _fp8_kv_fallback(v: tuple, kv: str, hw: Hardware, model: ModelSpec, backend) -> str | None:
    at = f"kv_cache_dtype={kv}"
    if v < FP8_KV_FROM:
        return f"{at} (V1 takes no FP8 KV cache before 0.8.2)"
    if hw.vendor == "amd":
        return None if v >= (0, 9, 0) else f"{at} on ROCm (V1 takes it there from 0.9.0)"
    if v >= (0, 10, 0) and hw.compute_capability == "10.0":
        return None
    if v >= (0, 10, 2) and model.mla is not None and backend in (None, "FLASHMLA", "CUTLASS_MLA"):
        return None
    if backend not in (None, "FLASH_ATTN_FA3"):
        return f"{at} with attention_backend={backend} (V1 takes FP8 KV through FlashAttention 3)"
    if not (kv.startswith("fp8") and hw.compute_capability.startswith("9.")):
        return f"{at} (V1 takes FP8 KV only with FlashAttention 3 on Hopper)"
    return None


def v0_cannot_serve(release: str, model: ModelSpec, fallback: str) -> str | None:
    """Why the V0 engine this release falls back to (for `fallback`) could not build `model`:
    the real engine would stop at start-up, so the simulator refuses the run."""
    if model.architecture != "Llama4ForConditionalGeneration":
        return None
    if version_tuple(release) >= IROPE_V0_FROM:
        return None
    return (
        f"vLLM before 0.8.4 cannot serve {model.name} here: the run falls back to the V0 engine "
        f"({fallback}; {SRC}), and no V0 attention backend of 0.8.3 takes Llama 4's use_irope "
        "argument (attention/backends/*.py; they do from 0.8.4, at global attention); use "
        "engine_args.kv_cache_dtype=auto, a Hopper GPU, or engine=vllm@0.8.4 or later"
    )
