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
- 0.5.3rc2 on (its package differs from 0.5.3's only in version.py): FA3 on every Hopper model,
  TRT-LLM MHA (page 64) on Blackwell, FlashInfer MLA for MLA on Blackwell, Triton for attention
  sinks elsewhere (the rule sets 0.5.3 on, as sim/engines/sglang.py lists where they were read).
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
    major = int(hw.compute_capability.split(".")[0]) if hw.vendor == "nvidia" else 0
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
        if major == 9:
            return "FLASH_ATTN_FA3", 1, f"{at}: Hopper -> fa3 (FlashInfer regression, #17411)"
        if major == 10:
            return "TRTLLM", 64, f"{at}: Blackwell -> trtllm_mha (page 64)"
        if model.architecture.startswith("GptOss"):
            return "TRITON_ATTN", 1, f"{at}: attention sinks -> triton"
    elif fa3 and major == 9:
        names, start = fa3_architectures(release)
        if model.architecture in names:
            why = f"{at}: fa3 on Hopper for {model.architecture} (utils.py, list of {start})"
            return "FLASH_ATTN_FA3", 1, why
    return "FLASHINFER", 1, f"{at}: flashinfer"
