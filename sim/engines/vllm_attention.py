"""vLLM's attention backend and KV block size by release, GPU, model and KV-cache dtype,
following each release's attention selector (attention/selector.py through 0.6;
platforms/cuda.py and the backends' own validation from 0.7); each rule's text names its
release and, where it was read from a wheel, the file. Used by sim/engines/vllm.py.
"""

from __future__ import annotations

from sim.engines.v1_oracle import V1_FROM
from sim.engines.versions import version_tuple
from sim.specs.hardware import Hardware
from sim.specs.model import ModelSpec

MM_PREFIX = ("Gemma3ForConditionalGeneration",)  # model_type gemma3: config/model.py
# is_mm_prefix_lm (MM_PREFIX_LM_MODELS) from 0.13.0


def attention_backend(
    engine: str, release: str, hw: Hardware, model: ModelSpec, kv_dtype: str, v1: bool = True
) -> tuple[str, int, str]:
    """(backend, block size, rule), following the attention selector of that release
    (attention/selector.py through 0.6; platforms/cuda.py from 0.7)."""
    v = version_tuple(release)
    v1 = v1 and v >= V1_FROM
    at = f"vllm {release}"
    if hw.vendor == "amd":
        return "ROCM_ATTN", 16, f"{at}: ROCm platform"
    major = hw.sm_major
    cc = f"compute capability {hw.compute_capability}"
    if model.mla is not None:
        if not v1:
            return "TRITON_MLA", 16, f"{at}: V0 MLA -> Triton MLA"
        if major == 10:
            if v >= (0, 33, 0):
                return "FLASHINFER_MLA", 32, f"{at}: MLA on {cc}: FlashInfer MLA first"
            dense = model.indexer is None
            if v >= (0, 18, 0) and dense and model.mla.qk_nope_head_dim in (64, 128):
                return (  # the first valid backend, at the smallest block size it takes (32, 64)
                    "FLASHINFER_MLA",  # (platforms/interface.py, attention/backends/mla/
                    32,  # flashinfer_mla.py of the 0.18.0 wheel)
                    f"{at}: MLA on {cc}: FlashInfer MLA first, block 32 (its smallest)",
                )
            if v >= (0, 15, 0) and dense and model.mla.qk_nope_head_dim == 128:
                return (  # platforms/cuda.py check_and_update_config (0.15.0 wheel)
                    "FLASHINFER_MLA",
                    64,
                    f"{at}: MLA on {cc}, qk_nope_head_dim 128, not sparse: FlashInfer MLA forced "
                    "(block 64)",
                )
            if v >= (0, 10, 1):  # platforms/cuda.py check_and_update_config (0.10.1 wheel)
                return "CUTLASS_MLA", 128, f"{at}: MLA on {cc}: CUTLASS MLA (block 128)"
        if major == 9:
            if v >= (0, 12, 0):
                return "FLASH_ATTN_MLA", 16, f"{at}: MLA on {cc}: FlashAttention MLA first"
            return "FLASHMLA", 64, f"{at}: MLA on {cc}: FlashMLA (block 64)"
        return "TRITON_MLA", 16, f"{at}: MLA on {cc}: Triton MLA"
    if v < (0, 4, 3):
        return "XFORMERS", 16, f"{at}: flash_attn is not a dependency of 0.4.0 -> xFormers"
    if not v1:
        window = windowed(model) and v < (0, 6, 4)
        if major < 8 or kv_dtype == "fp8" or window:
            why = "FP8 KV cache" if kv_dtype == "fp8" else "sliding window" if window else cc
            return "XFORMERS", 16, f"{at}: V0 falls back to xFormers ({why})"
        fa3 = v >= (0, 7, 0) and major >= 9
        return (
            f"FLASH_ATTN_FA{3 if fa3 else 2}",
            16,
            f"{at}: V0 FlashAttention {3 if fa3 else 2} on {cc}",
        )
    if model.architecture in MM_PREFIX and v >= (0, 13, 0):
        if major == 10 and v >= (0, 24, 0):  # FlashAttention takes PrefixLM under FA4, which
            return (  # fa_utils.py picks on compute capability 10 (bundled: vllm_flash_attn/cute)
                "FLASH_ATTN_FA4",
                16,
                f"{at}: {model.architecture}'s PrefixLM on {cc}: FlashInfer refuses it -> "
                "FlashAttention 4",
            )
        return (  # only Triton and Flex attention take PrefixLM (v1/attention/backends/*.py
            "TRITON_ATTN",  # supports_mm_prefix in the 0.13.0-0.23.0 wheels; FlashAttention
            16,  # from 0.24.0 under FA4 alone, FA3 on Hopper and FA2 elsewhere refuse it)
            f"{at}: {model.architecture} attends bidirectionally over images (is_mm_prefix_lm); "
            "FlashAttention and FlashInfer refuse it -> Triton",
        )
    if major == 10 and v >= (0, 9, 1):
        return "FLASHINFER", 16, f"{at}: {cc} (Blackwell) prefers FlashInfer (0.9.1)"
    sinks = model.architecture.startswith("GptOss")
    if sinks and major != 9 and v >= (0, 10, 1):
        return "TRITON_ATTN", 16, f"{at}: attention sinks on {cc} -> Triton"
    if kv_dtype == "fp8" and major != 9:
        if v >= (0, 12, 0):
            return (
                "FLASHINFER",
                16,
                f"{at}: FP8 KV cache on {cc}: FlashAttention invalid -> FlashInfer",
            )
        if v >= (0, 11, 0):
            return "TRITON_ATTN", 16, f"{at}: FP8 KV cache on {cc} -> Triton"
    fa = 3 if major == 9 else 2
    return f"FLASH_ATTN_FA{fa}", 16, f"{at}: {cc} -> FlashAttention {fa}"


def windowed(model: ModelSpec) -> bool:
    return any(layer.window_tokens for layer in model.layers)
