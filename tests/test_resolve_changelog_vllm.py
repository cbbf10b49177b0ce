"""resolve() held to vLLM's changelog (issue 44): each sampled change of
sim/engines/changelogs/vllm.yaml (written by python -m tools.engine_changelog from the published
wheels) must show in what the simulator resolves, on a GPU, model, TP and entry point where the
change's branch applies: the release before (the changelog's compared_with) resolves to the
change's `before` and the release itself to its `after`.

A sample names the change (release, setting, a unique piece of its condition) and the values it
expects the changelog to hold; the test finds the change, checks those values and file, and
takes before/after from the changelog itself, so a drift of either the changelog or the rules
fails. "(absent)" on one side means that branch did not exist there: on that side the release
must resolve to something else (or refuse the model, when the branch arrived with it).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from sim.engines.resolve import resolve
from sim.errors import UserError
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model

CHANGELOG = Path(__file__).resolve().parents[1] / "sim/engines/changelogs/vllm.yaml"
RELEASES = yaml.safe_load(CHANGELOG.read_text())["releases"]
ABSENT = "(absent)"

BIG = (  # the batch defaults of a large GPU, then of the others (engine/arg_utils.py)
    "default_max_num_batched_tokens = {UsageContext.LLM_CLASS: 16384, "
    "UsageContext.OPENAI_API_SERVER: 8192}"
)
SMALL = (
    "default_max_num_batched_tokens = {UsageContext.LLM_CLASS: 8192, "
    "UsageContext.OPENAI_API_SERVER: 2048}"
)
HUGE = (
    "default_max_num_batched_tokens = {UsageContext.LLM_CLASS: 16384, "
    "UsageContext.OPENAI_API_SERVER: 16384}"
)
V1_SINKS = "has_sink and (not cls.is_device_capability(90))"
MLA_V1 = "not (not is_flashmla_supported()[0]) | not (block_size != 64) | use_v1"
FA3_OR_TRITON = "| (has_sink or use_fp8_kv_cache) and (not cls.is_device_capability(90))"
ASYNC_AUTO = "disable_padded_drafter_batch) | not (not executor_supports_async_sched)"
PIECEWISE_V1 = (
    "support_static_graph_mode() | self.compilation_config.cudagraph_mode is None | "
    "envs.VLLM_USE_V1 and self.compilation_config.level == CompilationLevel.PIECEWISE"
)
FULL_70 = "not (device_memory >= 70 * GiB_bytes and 'a100' not in device_name)"
FLASHMLA = "vllm.v1.attention.backends.mla.flashmla.FlashMLABackend"
L8, L2, DS, OSS = "llama-3.1-8b", "llama-2-7b-hf", "deepseek-v3", "gpt-oss-20b"

# (release, setting, piece of the condition, before, after, file, (gpu, model, tp, entry, args))
SAMPLES = [
    # V0's chunked-prefill token budget; the budget follows the user's flag
    ("0.4.1", "max_num_batched_tokens", "| enable_chunked_prefill", ABSENT, 768, "config.py",
     ("a100-80gb", L2, 1, "server", {"enable_chunked_prefill": True})),
    ("0.4.2", "max_num_batched_tokens", "| enable_chunked_prefill", 768, 512, "config.py",
     ("a100-80gb", L2, 1, "server", {"enable_chunked_prefill": True})),
    # the model's length: > 32K turns chunked prefill on
    ("0.5.3", "enable_chunked_prefill", "| use_long_context |", ABSENT, True, "arg_utils.py",
     ("h100-sxm", L8, 1, "server", {})),
    ("0.6.0", "disable_async_output_proc", "EngineArgs", ABSENT, False, "arg_utils.py",
     ("a100-80gb", L8, 1, "server", {})),
    # multi-step scheduling with chunked prefill
    ("0.6.3", "max_num_batched_tokens", "enable_chunked_prefill | num_scheduler_steps > 1",
     ABSENT, "max(max_model_len, 2048)", "config.py",
     ("a100-80gb", L8, 1, "server", {"num_scheduler_steps": 8})),
    ("0.6.5", "max_num_batched_tokens",
     "self.enable_chunked_prefill | not (self.num_scheduler_steps > 1)", ABSENT, 2048,
     "config.py", ("a100-80gb", L8, 1, "server", {})),
    ("0.6.5", "max_num_batched_tokens",
     "__init__ | max_num_batched_tokens is None | enable_chunked_prefill | not (", 512, ABSENT,
     "config.py", ("l40s", L8, 1, "server", {})),
    # DeepSeek-V3 (MLA): eager in 0.6.6 only; V0 turns chunked prefill off for MLA from 0.7.1
    ("0.6.6", "enforce_eager", "model_type == 'deepseek_v3'", ABSENT, True, "config.py",
     ("h200", DS, 8, "server", {})),
    ("0.7.0", "enforce_eager", "model_type == 'deepseek_v3'", True, ABSENT, "config.py",
     ("h200", DS, 8, "server", {})),
    ("0.7.1", "enable_chunked_prefill", "self.model_config and self.model_config.use_mla",
     ABSENT, False, "config.py", ("h200", DS, 8, "server", {})),
    # V1 by default (0.8.0): its defaults, keyed on the device name and the entry point
    ("0.8.0", "VLLM_USE_V1", "environment", "0", "1", "envs.py",
     ("h100-sxm", L8, 1, "server", {})),
    ("0.8.0", "max_num_seqs", "EngineArgs._set_default_args_v1", ABSENT,
     "default_max_num_seqs = 1024", "arg_utils.py", ("a100-80gb", L8, 1, "server", {})),
    ("0.8.0", "enable_prefix_caching", "_set_default_args_v1 | self.enable_prefix_caching",
     ABSENT, True, "arg_utils.py", ("a100-80gb", L8, 1, "server", {})),
    ("0.8.0", "enable_chunked_prefill", "EngineArgs._set_default_args_v1", ABSENT, True,
     "arg_utils.py", ("a100-80gb", L2, 1, "server", {})),
    ("0.8.0", "max_num_batched_tokens", "_set_default_args_v1 | 'h100' in device_name", ABSENT,
     BIG, "arg_utils.py", ("h100-sxm", L8, 1, "server", {})),
    ("0.8.0", "max_num_batched_tokens", "_set_default_args_v1 | 'h100' in device_name", ABSENT,
     BIG, "arg_utils.py", ("h200", L8, 1, "offline", {})),
    ("0.8.0", "max_num_batched_tokens", "_set_default_args_v1 | not ('h100' in", ABSENT, SMALL,
     "arg_utils.py", ("a100-80gb", L8, 1, "offline", {})),
    ("0.8.0", "attention_backend", MLA_V1, ABSENT, FLASHMLA, "cuda.py",
     ("h200", DS, 8, "server", {})),
    ("0.8.0", "block_size", "use_flashmla and is_flashmla_supported()[0]", ABSENT, 64, "cuda.py",
     ("h200", DS, 8, "server", {})),
    # the GPU's name (0.8.4), then its memory (0.8.5), then both (0.9.0)
    ("0.8.4", "max_num_seqs", "_set_default_args_v1 | not ('h100' in", ABSENT,
     "default_max_num_seqs = 256", "arg_utils.py", ("a100-80gb", L8, 1, "server", {})),
    ("0.8.5", "max_num_seqs", "_set_default_args_v1 | device_memory >= 70", ABSENT,
     "default_max_num_seqs = 1024", "arg_utils.py", ("a100-80gb", L8, 1, "server", {})),
    ("0.8.5", "max_num_seqs", "_set_default_args_v1 | device_memory >= 70", ABSENT,
     "default_max_num_seqs = 1024", "arg_utils.py", ("h20", L8, 1, "server", {})),
    ("0.8.5", "max_num_batched_tokens", "_set_default_args_v1 | device_memory >= 70", ABSENT,
     BIG, "arg_utils.py", ("a100-80gb", L8, 1, "server", {})),
    ("0.9.0", "max_num_seqs", FULL_70, ABSENT, "default_max_num_seqs = 256", "arg_utils.py",
     ("a100-80gb", L8, 1, "server", {})),
    ("0.9.0", "max_num_batched_tokens", FULL_70, ABSENT, SMALL, "arg_utils.py",
     ("a100-80gb", L8, 1, "offline", {})),
    # compute capability: Blackwell prefers FlashInfer (0.9.1), CUTLASS MLA (0.10.1), then
    # FlashInfer MLA (0.15.0, block 32 from 0.18.0); attention sinks off Hopper take Triton (0.10.1)
    ("0.9.1", "attention_backend", "use_v1 | cls.is_device_capability(100)", ABSENT,
     "vllm.v1.attention.backends.flashinfer.FlashInferBackend", "cuda.py",
     ("b200", L8, 1, "server", {})),
    ("0.10.1", "attention_backend", V1_SINKS, ABSENT, "TRITON_ATTN_VLLM_V1", "cuda.py",
     ("a100-80gb", OSS, 1, "server", {})),
    ("0.10.1", "attention_backend", V1_SINKS, ABSENT, "TRITON_ATTN_VLLM_V1", "cuda.py",
     ("rtx-pro-6000", OSS, 1, "server", {})),
    ("0.10.1", "VLLM_ATTENTION_BACKEND", "cls.is_device_capability(100)", ABSENT, "CUTLASS_MLA",
     "cuda.py", ("b200", DS, 8, "server", {})),
    ("0.15.0", "attention_backend", "use_mla | device_capability.major == 10",
     "[AttentionBackendEnum.CUTLASS_MLA, AttentionBackendEnum.FLASHINFER_MLA, AttentionBacken"
     "dEnum.FLASH_ATTN_MLA, AttentionBackendEnum.FLASHMLA, AttentionBackendE...",
     "[AttentionBackendEnum.FLASHINFER_MLA, AttentionBackendEnum.CUTLASS_MLA, AttentionBacken"
     "dEnum.FLASH_ATTN_MLA, AttentionBackendEnum.FLASHMLA, AttentionBackendE...", "cuda.py",
     ("b200", DS, 8, "server", {})),
    ("0.18.0", "block_size", "use_flashinfer_mla and cache_config.block_size != 32", 64, ABSENT,
     "cuda.py", ("b200", DS, 8, "server", {})),
    # the KV cache's dtype: FP8 KV off Hopper takes Triton (0.11.0)
    ("0.11.0", "attention_backend", FA3_OR_TRITON, ABSENT, "TRITON_ATTN", "cuda.py",
     ("a100-80gb", L8, 1, "server", {"kv_cache_dtype": "fp8"})),
    ("0.11.0", "cudagraph_mode", PIECEWISE_V1, ABSENT, "CUDAGraphMode.FULL_AND_PIECEWISE",
     "__init__.py", ("h100-sxm", L8, 1, "server", {})),
    ("0.14.0", "async_scheduling", ASYNC_AUTO, ABSENT, True, "vllm.py",
     ("h100-sxm", L8, 1, "server", {})),
    ("0.19.0", "scheduler_reserve_full_isl", "EngineArgs", ABSENT, True, "arg_utils.py",
     ("h100-sxm", L8, 1, "server", {})),
    ("0.19.0", "scheduler_reserve_full_isl", "SchedulerConfig", ABSENT, True, "scheduler.py",
     ("h100-sxm", L8, 1, "server", {})),
    ("0.20.0", "gpu_memory_utilization", "EngineArgs", 0.9, 0.92, "arg_utils.py",
     ("h100-sxm", L8, 1, "server", {})),
    ("0.20.0", "gpu_memory_utilization", "CacheConfig", 0.9, 0.92, "cache.py",
     ("l4", L8, 1, "server", {})),
    ("0.20.0", "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "environment", "0", "1", "envs.py",
     ("h100-sxm", L8, 1, "server", {})),
    ("0.20.0", "attention_backend", "not (use_mla) | not (device_capability.major == 10)",
     "[AttentionBackendEnum.FLASH_ATTN, AttentionBackendEnum.FLASHINFER, AttentionBackendEnum"
     ".TRITON_ATTN, AttentionBackendEnum.FLEX_ATTENTION]",
     "[AttentionBackendEnum.FLASH_ATTN, AttentionBackendEnum.FLASHINFER, AttentionBackendEnum"
     ".TRITON_ATTN, AttentionBackendEnum.FLEX_ATTENTION, AttentionBackendEnu...", "cuda.py",
     ("h100-sxm", L8, 1, "server", {})),
    # the memory tier of 160 GiB and more (0.28.0)
    ("0.28.0", "max_num_batched_tokens", "get_batch_defaults | device_memory >= 160", ABSENT,
     HUGE, "arg_utils.py", ("b200", L8, 1, "server", {})),
]  # fmt: skip

BACKENDS = (  # a name in the engine's source -> the simulator's name, first match wins
    (("CutlassMLA", "CUTLASS_MLA"), "CUTLASS_MLA"),
    (("FlashInferMLA", "FLASHINFER_MLA"), "FLASHINFER_MLA"),
    (("FlashAttnMLA", "FLASH_ATTN_MLA"), "FLASH_ATTN_MLA"),
    (("FlashMLABackend", "FLASHMLA"), "FLASHMLA"),
    (("TritonMLA", "TRITON_MLA"), "TRITON_MLA"),
    (("TRITON_ATTN", "TritonAttention"), "TRITON_ATTN"),
    (("FlashInfer", "FLASHINFER"), "FLASHINFER"),
    (("XFormers", "XFORMERS"), "XFORMERS"),
    (("FlashAttention", "FLASH_ATTN"), "FLASH_ATTN"),
)
BUDGET = re.compile(r"LLM_CLASS: (\d+), UsageContext\.OPENAI_API_SERVER: (\d+)")


def _change(release: str, setting: str, piece: str) -> dict:
    found = [
        c
        for c in RELEASES[release]["changes"]
        if c["setting"] == setting and (piece in c["where"] or piece == c["where"])
    ]
    if len(found) > 1:
        found = [c for c in found if c["where"].endswith(piece) or c["where"] == piece]
    assert len(found) == 1, f"{release} {setting} [{piece}]: {len(found)} changes match"
    return found[0]


def _backend(text: str) -> str:
    first = text.strip("[").split(",")[0].split(".")[-1]  # a priority list: its first entry
    for names, ours in BACKENDS:
        if any(name in first or name in text.split(",")[0] for name in names):
            return ours
    raise AssertionError(f"no simulator backend for {text!r}")


def _expected(setting: str, value, entry: str, s):
    """The changelog's value in the simulator's terms, on the settings `s` resolved."""
    if not isinstance(value, str):
        return value
    if setting in ("attention_backend", "VLLM_ATTENTION_BACKEND"):
        return _backend(value)
    if value.startswith("CUDAGraphMode."):
        return value.removeprefix("CUDAGraphMode.")
    if m := BUDGET.search(value):
        return int(m.group(1) if entry == "offline" else m.group(2))
    if m := re.fullmatch(r"default_max_num_seqs = (\d+)", value):
        return int(m.group(1))
    if re.fullmatch(r"max\((self\.)?max_model_len, 2048\)", value):
        return max(s.max_model_len, 2048)
    return value


def _observed(setting: str, s):
    """The simulator's value for the engine's setting `setting`."""
    match setting:
        case "attention_backend" | "VLLM_ATTENTION_BACKEND":
            name = str(s.attention_backend)
            return "FLASH_ATTN" if name.startswith("FLASH_ATTN_FA") else name
        case "enforce_eager":
            return s.cudagraph_mode == "NONE"
        case "disable_async_output_proc":
            return not s.async_output_proc
        case "VLLM_USE_V1":
            return "1" if s.scheduler == "vllm_v1" else "0"
        case "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS":
            return "1" if s.cudagraph_memory_bytes > 0 else "0"
    return getattr(s, setting)


def _resolve(release: str, ctx):
    gpu, model, tp, entry, args = ctx
    return resolve(f"vllm@{release}", load_hardware(gpu), load_model(model), tp, entry, args)


def test_the_sample_spans_at_least_35_changes_and_every_kind_of_condition():
    changes = {(r, s, p) for r, s, p, *_ in SAMPLES}
    assert len(changes) >= 35
    gpus = {ctx[0] for *_, ctx in SAMPLES}
    models = {ctx[1] for *_, ctx in SAMPLES}
    assert {"a100-80gb", "h100-sxm", "h20", "b200", "rtx-pro-6000"} <= gpus  # tier, name, cc
    assert {DS, OSS, L2, L8} <= models  # MLA, sliding window with sinks, short, long
    assert {ctx[3] for *_, ctx in SAMPLES} == {"server", "offline"}


@pytest.mark.parametrize(
    ("release", "setting", "piece", "before", "after", "file", "ctx"),
    SAMPLES,
    ids=[f"{s[0]}-{s[1]}-{s[6][0]}-{s[6][1]}-{s[6][3]}" for s in SAMPLES],
)
def test_resolve_follows_the_changelog(release, setting, piece, before, after, file, ctx):
    change = _change(release, setting, piece)
    assert (change["before"], change["after"]) == (before, after)
    assert change["file"].endswith("/" + file) and change["modelled"] is True
    previous = RELEASES[release]["compared_with"]
    entry = ctx[3]
    now = _resolve(release, ctx)
    if change["after"] == ABSENT:
        assert _observed(setting, now) != _expected(setting, change["before"], entry, now)
    else:
        assert _observed(setting, now) == _expected(setting, change["after"], entry, now)
    try:
        then = _resolve(previous, ctx)
    except UserError as err:  # the branch arrived with the model: the release before refuses it
        assert change["before"] == ABSENT and "cannot serve" in str(err)
        return
    if change["before"] == ABSENT:
        assert _observed(setting, then) != _expected(setting, change["after"], entry, then)
    else:
        assert _observed(setting, then) == _expected(setting, change["before"], entry, then)


@pytest.mark.parametrize(
    ("release", "gpu", "backend"),
    [
        ("0.12.0", "h100-sxm", "FLASH_ATTN_FA3"),  # before PrefixLM attention
        ("0.13.0", "h100-sxm", "TRITON_ATTN"),  # FlashAttention 3 refuses it
        ("0.13.0", "a100-80gb", "TRITON_ATTN"),
        ("0.18.0", "b200", "TRITON_ATTN"),  # FlashInfer refuses it too
        ("0.24.0", "h100-sxm", "TRITON_ATTN"),
        ("0.24.0", "b200", "FLASH_ATTN_FA4"),  # FlashAttention 4 takes it
        ("0.24.0", "rtx-pro-6000", "TRITON_ATTN"),  # FlashAttention 2 there
    ],
)
def test_gemma3_attends_over_images_with_a_backend_that_takes_prefix_lm(release, gpu, backend):
    """Not in the changelog (the backends' supports_mm_prefix is a method, not a setting):
    read in the 0.13.0-0.29.0 wheels (v1/attention/backends/*.py, fa_utils.py)."""
    s = _resolve(release, (gpu, "gemma-3-27b-it", 1, "server", {}))
    assert s.attention_backend == backend
    llama = _resolve(release, (gpu, L8, 1, "server", {}))
    assert llama.attention_backend != "TRITON_ATTN"  # the rule is Gemma 3's alone
