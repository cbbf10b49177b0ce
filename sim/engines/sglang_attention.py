"""SGLang's default attention backend by release, GPU and model (`attention_backend` unset).

Read from the wheels (`pip download sglang==X --no-deps`): model_executor/model_runner.py
(`model_specific_adjustment`, where the default is chosen from 0.4.4.post4 on; server_args.py
before) and srt/utils.py (`is_fa3_default_architecture`, the architectures that take FA3):
- before 0.4.5.post1: FlashInfer (Triton for MLA); read in 0.4.4.post4 and 0.4.5.
- 0.4.5.post1 on: on Hopper (`is_hopper_with_cuda_12_3`) without speculative top-k > 1, FA3 for
  an MLA model and for the architectures of utils.py's list, which grows and shrinks:
  0.4.5.post1 Qwen2, Llama4, Llama, Mistral; 0.4.5.post3 + Gemma2; 0.4.6 + Gemma3;
  0.4.6.post2 + Mixtral, Qwen3, Qwen3Moe; 0.4.6.post4 without Mixtral; 0.4.6.post5 without
  Mistral (the same list read in 0.4.7, 0.4.7.post1, 0.4.8, 0.4.9; 0.4.10.post2 adds Glm4Moe
  and Step3VL, not in the catalogue).
- ROCm (the catalogue's AMD GPUs): Triton from 0.3.1.post1 (server_args.py `is_hip()`; from 0.4.0
  FlashInfer only where it is installed, and it has no ROCm build); from 0.4.6.post5 aiter
  (model_runner.py), a backend the simulator does not price: FlashInfer's costs stand in.
- gpt-oss (server_args.py): Triton from 0.5.0rc0; from 0.5.0rc2 trtllm_mha (page 64) on SM100,
  FA3 on SM90, Triton elsewhere (0.5.1 adds is_cuda(), the same outcome on NVIDIA GPUs).
- 0.5.3rc2 on (its package differs from 0.5.3's only in version.py): FlashInfer MLA for MLA on
  Blackwell, Triton for attention sinks elsewhere; an MHA model without a model-specific branch
  takes FA3 on Hopper only when utils.py's list names it (the 0.4.6.post5 list for the
  catalogue's architectures: Mistral, Mixtral, MiniMax-Text-01 take FlashInfer) and FlashInfer on
  Blackwell (model_runner.py in 0.5.3, server_args.py _handle_attention_backend_compatibility in
  0.5.4.post1-0.5.6; read in the 0.5.3, 0.5.4.post1, 0.5.4.post2, 0.5.5.post2, 0.5.6 wheels).
- 0.5.6.post1: `elif is_blackwell()` (compute capability 10 or 12, utils/common.py) ->
  trtllm_mha, page 64 (read in 0.5.6.post1 and 0.5.6.post2); 0.5.7: `is_sm100_supported()`
  only, SM120 (RTX PRO 6000) back to FlashInfer; 0.5.8: FA3 for every MHA model on Hopper, the
  list no longer consulted ("flashinfer 0.6.1 caused performance regression on Hopper",
  sglang issue #17411; read in 0.5.8, 0.5.8.post1, 0.5.9 and 0.5.10).
"""

from __future__ import annotations

from sim.engines.versions import release_key
from sim.specs.hardware import Hardware
from sim.specs.model import ModelSpec

FA3_FROM = "0.4.5.post1"
HIP_TRITON_FROM = "0.3.1.post1"  # server_args.py: is_hip() -> triton (FlashInfer has no ROCm build)
AITER_FROM = "0.4.6.post5"  # model_runner.py: ROCm -> aiter, a backend the simulator lacks
GPT_OSS_FROM = "0.5.0rc0"  # server_args.py: gpt-oss -> triton
GPT_OSS_BY_GPU_FROM = "0.5.0rc2"  # ... trtllm_mha on SM100, fa3 on SM90, else triton
NEWEST_FROM = "0.5.3rc2"  # the rules of the 0.5.3 line (0.5.3rc2's package is 0.5.3's)
BLACKWELL_TRTLLM_FROM = "0.5.6.post1"  # server_args.py: is_blackwell() -> trtllm_mha, page 64
SM100_TRTLLM_FROM = "0.5.7"  # ... is_sm100_supported() only: SM120 back to FlashInfer
HOPPER_FA3_ALL_FROM = "0.5.8"  # FA3 for every MHA model on Hopper (issue #17411)
# Qwen3-Next on SM100 -> triton (server_args.py _handle_model_specific_adjustments, then
# _handle_mamba_radix_cache's sm100_default_attention_backend), read in 0.5.6-0.5.10 (absent in
# 0.5.5.post2); 0.5.10 takes trtllm_mha only without the radix cache (on by default). 0.5.23's
# arg_groups/model_overrides/qwen3_5.py keeps the choice but ties it to a mamba strategy not
# read here, so its rule set keeps the generic SM100 branch.
QWEN3_NEXT_TRITON = ("0.5.6", "0.5.23")
_GEMMA3 = "Gemma3ForConditionalGeneration"
_BASE = ("Qwen2ForCausalLM", "Llama4ForConditionalGeneration", "LlamaForCausalLM")
FA3_ARCHITECTURES = (  # (from release, utils.py is_fa3_default_architecture's list)
    (FA3_FROM, (*_BASE, "MistralForCausalLM")),
    ("0.4.5.post3", (*_BASE, "MistralForCausalLM", "Gemma2ForCausalLM")),
    ("0.4.6", (*_BASE, "MistralForCausalLM", "Gemma2ForCausalLM", _GEMMA3)),
    (
        "0.4.6.post2",
        (
            *_BASE,
            "MistralForCausalLM",
            "MixtralForCausalLM",
            "Gemma2ForCausalLM",
            "Gemma3ForConditionalGeneration",
            "Qwen3ForCausalLM",
            "Qwen3MoeForCausalLM",
        ),
    ),
    (
        "0.4.6.post4",
        (
            *_BASE,
            "MistralForCausalLM",
            "Gemma2ForCausalLM",
            "Gemma3ForConditionalGeneration",
            "Qwen3ForCausalLM",
            "Qwen3MoeForCausalLM",
        ),
    ),
    (
        "0.4.6.post5",
        (
            *_BASE,
            "Gemma2ForCausalLM",
            "Gemma3ForConditionalGeneration",
            "Qwen3ForCausalLM",
            "Qwen3MoeForCausalLM",
        ),
    ),
)


def fa3_architectures(release: str) -> tuple[tuple[str, ...], str]:
    """(the architectures FA3 is the default for, the release whose list it is)."""
    key = release_key(release)
    found = ((), "")
    for start, names in FA3_ARCHITECTURES:
        if key >= release_key(start):
            found = (names, start)
    return found


def _from(release: str, start: str) -> bool:
    return release_key(release) >= release_key(start)


def attention_backend(release: str, hw: Hardware, model: ModelSpec) -> tuple[str, int, str]:
    """(backend, page size, rule) of SGLang `release` on `hw` for `model`."""
    at = f"sglang {release}"
    major = hw.sm_major
    fa3 = _from(release, FA3_FROM)
    newest = _from(release, NEWEST_FROM)
    if model.mla is not None:
        if fa3 and major == 9:
            return "FLASH_ATTN_MLA", 1, f"{at}: MLA on Hopper -> fa3 (model_runner.py)"
        if newest and major == 10:
            return "FLASHINFER_MLA", 1, f"{at}: MLA on Blackwell -> flashinfer"
        return "TRITON_MLA", 1, f"{at}: MLA -> triton"
    if hw.vendor != "nvidia" and _from(release, HIP_TRITON_FROM) and not _from(release, AITER_FROM):
        return "TRITON_ATTN", 1, f"{at}: ROCm -> triton (server_args.py is_hip(); no FlashInfer)"
    gpt_oss = model.architecture == "GptOssForCausalLM" and _from(release, GPT_OSS_FROM)
    if hw.vendor != "nvidia" and _from(release, AITER_FROM) and not gpt_oss:
        why = f"{at}: ROCm -> aiter (model_runner.py), not priced here: FlashInfer's costs stand in"
        return "FLASHINFER", 1, why
    if gpt_oss and not newest:
        if not _from(release, GPT_OSS_BY_GPU_FROM):
            return "TRITON_ATTN", 1, f"{at}: gpt-oss -> triton (server_args.py)"
        if major == 10:
            return "TRTLLM", 64, f"{at}: gpt-oss on SM100 -> trtllm_mha, page 64 (server_args.py)"
        if major == 9:
            return "FLASH_ATTN_FA3", 1, f"{at}: gpt-oss on SM90 -> fa3 (server_args.py)"
        return "TRITON_ATTN", 1, f"{at}: gpt-oss -> triton (server_args.py)"
    if newest:
        return _newest(release, at, major, model)
    if fa3 and major == 9:
        names, start = fa3_architectures(release)
        if model.architecture in names:
            why = f"{at}: fa3 on Hopper for {model.architecture} (utils.py, list of {start})"
            return "FLASH_ATTN_FA3", 1, why
    return "FLASHINFER", 1, f"{at}: flashinfer"


def _newest(release: str, at: str, major: int, model: ModelSpec) -> tuple[str, int, str]:
    """The 0.5.3rc2 on rules for an MHA model (server_args.py, as the module docstring lists)."""
    gpt_oss = model.architecture.startswith("GptOss")
    if major == 9:
        if _from(release, HOPPER_FA3_ALL_FROM):
            return "FLASH_ATTN_FA3", 1, f"{at}: Hopper -> fa3 (FlashInfer regression, #17411)"
        names, start = fa3_architectures(release)
        if gpt_oss or model.architecture in names:
            why = f"{at}: fa3 on Hopper for {model.architecture} (utils.py, list of {start})"
            return "FLASH_ATTN_FA3", 1, why
        why = f"{at}: {model.architecture} not in utils.py's fa3 list -> flashinfer"
        return "FLASHINFER", 1, why
    first, past = QWEN3_NEXT_TRITON
    qwen3_next = model.architecture == "Qwen3NextForCausalLM" and major == 10
    if qwen3_next and _from(release, first) and not _from(release, past):
        return "TRITON_ATTN", 1, f"{at}: Qwen3-Next on SM100 -> triton (server_args.py)"
    llama4 = "Llama4" in model.architecture  # its own branch: trtllm_mha on SM100
    if major == 10 and (gpt_oss or llama4 or _from(release, BLACKWELL_TRTLLM_FROM)):
        return "TRTLLM", 64, f"{at}: Blackwell (SM100) -> trtllm_mha (page 64)"
    sm120 = major == 12 and not gpt_oss
    if sm120 and _from(release, BLACKWELL_TRTLLM_FROM) and not _from(release, SM100_TRTLLM_FROM):
        return "TRTLLM", 64, f"{at}: is_blackwell() (SM120) -> trtllm_mha (page 64)"
    if gpt_oss:
        return "TRITON_ATTN", 1, f"{at}: attention sinks -> triton"
    return "FLASHINFER", 1, f"{at}: flashinfer"


# server_args.py _handle_attention_backend_compatibility: with the aiter backend and a context
# above 8192 tokens, mem_fraction_static *= 0.9 (0.5.4.post1), 0.85 from 0.5.4.post2 (read in
# the 0.5.4.post1, 0.5.4.post2, 0.5.6, 0.5.10, 0.5.14, 0.5.17 wheels; 0.5.19-0.5.23:
# srt/arg_groups/attention_hook.py, the same 0.85).
AITER_FRACTION = (("0.5.4.post1", 0.9), ("0.5.4.post2", 0.85))


def aiter_fraction(release: str, hw: Hardware, model: ModelSpec, context: int):
    """(factor, rule) SGLang scales mem_fraction_static by on the aiter backend, or None."""
    backend, _, why = attention_backend(release, hw, model)
    if "aiter" not in why or backend != "FLASHINFER" or context <= 8192:
        return None
    factor = next((f for start, f in reversed(AITER_FRACTION) if _from(release, start)), None)
    if factor is None:
        return None
    rule = f"sglang {release}: x {factor} on aiter for a context above 8192 (server_args.py)"
    return factor, rule
