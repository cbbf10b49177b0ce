"""resolve() held to SGLang's changelog (sim/engines/changelogs/sglang.yaml, written by
`python -m tools.engine_changelog --engine sglang` from each release's own files).

Each sample names a change of one release and the GPU, model, TP and entry point where its branch
applies; the values are not written here but read from the changelog: `before` is the value the
release before it had (a change's `before`, or the value of the branch it replaced), `after` the
value the release itself has. The release before (the changelog's compared_with) must resolve to
`before` and the release to `after`. A value that is an expression of the engine's
(`(gpu_mem - 1024 * 13) / gpu_mem`) is evaluated with that GPU's memory in MiB and the names the
sample binds, so the test fails if the changelog or the rules drift.
"""

from __future__ import annotations

import ast
import operator
from functools import cache
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

from sim.engines.resolve import resolve
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model

CHANGELOG = Path(__file__).parents[1] / "sim" / "engines" / "changelogs" / "sglang.yaml"
ABSENT = "(absent)"
MIB = 2**20


class Ref(NamedTuple):
    """One value of the changelog: the change of `setting` in `release` whose condition (its
    `where`) ends with `where`, and which side of it (`before` or `after`)."""

    release: str
    setting: str
    where: str
    side: str


class Sample(NamedTuple):
    release: str
    knob: str  # what resolve() gives: an EngineSettings field, or "graph_max_bs"
    gpu: str
    model: str
    tp: int
    before: Ref
    after: Ref
    entry_point: str = "server"
    names: tuple = ()  # (name, Ref) pairs an expression's other names take
    via: Ref | None = None  # the change of `release` that makes the branch apply, when the
    # value itself was introduced earlier


def _ref(release, setting, where, side="after"):
    return Ref(release, setting, where, side)


TP8 = "not (self.tp_size >= 16) | self.tp_size >= 8"
TP4 = "not (self.tp_size >= 16) | not (self.tp_size >= 8) | self.tp_size >= 4"
TP1 = "not (self.tp_size >= 8) | not (self.tp_size >= 4) | not (self.tp_size >= 2)"
PP8 = "not (parallel_size >= 16) | parallel_size >= 8"
PP4 = "not (parallel_size >= 16) | not (parallel_size >= 8) | parallel_size >= 4"
PP1 = "not (parallel_size >= 8) | not (parallel_size >= 4) | not (parallel_size >= 2)"
MEM = "mem_fraction_static"
CHUNK = "chunked_prefill_size"
GRAPHS = "cuda_graph_max_bs"
ATTN = "attention_backend"
DEEPGEMM = "SGL_ENABLE_JIT_DEEPGEMM"
GPT_OSS = "model_arch in ['GptOssForCausalLM'] | self.attention_backend is None"
SMALL = "gpu_mem is not None and gpu_mem < 25000"
OVER_96 = "self.mem_fraction_static is None | gpu_mem > 96 * 1024"
NEW_TIERS = "_handle_gpu_memory_settings | gpu_mem is not None | not (gpu_mem < 20 * 1024)"
V3, LLAMA8, LLAMA70, OSS = "deepseek-v3", "llama-3.1-8b", "llama-3.1-70b", "gpt-oss-20b"
KIMI, QWEN3_NEXT = "kimi-linear-48b-a3b", "qwen3-next-80b-a3b"
HOPPER = "is_hopper_with_cuda_12_3() and is_no_spec_infer_or_topk_one(self)"
FA3_ARCH = "is_fa3_default_architecture(self.model_config.hf_config)"
FA3_LIST = f"not ({HOPPER} and {FA3_ARCH})"
BLACKWELL = "is_blackwell() and is_no_spec_infer_or_topk_one(self)"
SM100 = (
    "is_sm100_supported() and is_no_spec_infer_or_topk_one(self) and "
    "(self.speculative_algorithm is None or self.speculative_eagle_topk is not None)"
)

SAMPLES = (
    # 0.3.x: memory tiers (GPU memory), mem_fraction_static (TP), the overlap scheduler
    Sample("0.3.5.post2", "graph_max_bs", "rtx-4090", LLAMA8, 1,
           _ref("0.3.5", GRAPHS, "ServerArgs"), _ref("0.3.5.post2", GRAPHS, "gpu_mem < 25000")),
    Sample("0.3.6", "gpu_memory_utilization", "h100-sxm", LLAMA70, 8,
           _ref("0.3.6", MEM, TP8, "before"), _ref("0.3.6", MEM, TP8)),
    Sample("0.3.6", "gpu_memory_utilization", "h100-sxm", LLAMA70, 8,
           _ref("0.3.6", MEM, TP8, "before"), _ref("0.3.6", MEM, TP8), "offline"),
    Sample("0.3.6", "async_scheduling", "h100-sxm", LLAMA8, 1,
           _ref("0.3.6", "enable_overlap_schedule", "ServerArgs", "before"),
           _ref("0.3.6", "disable_overlap_schedule", "ServerArgs")),
    # the attention backend on ROCm (mi300x) and on NVIDIA GPUs
    Sample("0.3.1.post1", "attention_backend", "mi300x", LLAMA8, 1,
           _ref("0.3.1", ATTN, "self.attention_backend is None"),
           _ref("0.3.1.post1", ATTN, "is_hip()")),
    Sample("0.3.3", "attention_backend", "mi300x", LLAMA8, 1,
           _ref("0.3.3", ATTN, "is_hip()", "before"),
           _ref("0.3.3", ATTN, "not is_flashinfer_available()")),
    Sample("0.4.0", "attention_backend", "mi300x", LLAMA8, 1,
           _ref("0.4.0", ATTN, "not is_flashinfer_available()", "before"),
           _ref("0.4.0", ATTN, "self.attention_backend is None")),
    Sample("0.4.0", "attention_backend", "h100-sxm", LLAMA8, 1,
           _ref("0.4.0", ATTN, "self.attention_backend is None", "before"),
           _ref("0.4.0", ATTN, "self.attention_backend is None")),
    # 0.4.0, 0.4.0.post1: mem_fraction_static at TP 8, the graphs and chunk below 25,000 MiB
    Sample("0.4.0", "gpu_memory_utilization", "h100-sxm", LLAMA70, 8,
           _ref("0.4.0", MEM, TP8, "before"), _ref("0.4.0", MEM, TP8)),
    Sample("0.4.0", "gpu_memory_utilization", "h100-sxm", LLAMA70, 8,
           _ref("0.4.0", MEM, TP8, "before"), _ref("0.4.0", MEM, TP8), "offline"),
    Sample("0.4.0", "graph_max_bs", "l4", LLAMA8, 1,
           _ref("0.4.0", GRAPHS, "ServerArgs.__post_init__ | gpu_mem < 25000", "before"),
           _ref("0.4.0", GRAPHS, "self.cuda_graph_max_bs is None | gpu_mem < 25000")),
    Sample("0.4.0", "max_num_batched_tokens", "h100-sxm", LLAMA8, 1,
           _ref("0.4.0", CHUNK, "ServerArgs", "before"),
           _ref("0.4.0", CHUNK, "self.chunked_prefill_size is None | not (gpu_mem < 25000)")),
    Sample("0.4.0.post1", "graph_max_bs", "l4", LLAMA8, 4,
           _ref("0.4.0.post1", GRAPHS, "self.cuda_graph_max_bs is None | gpu_mem < 25000",
                "before"),
           _ref("0.4.0.post1", GRAPHS, f"{SMALL} | not (self.tp_size < 4)")),
    Sample("0.4.0.post1", "graph_max_bs", "a10g", LLAMA8, 1,
           _ref("0.4.0.post1", GRAPHS, "self.cuda_graph_max_bs is None | gpu_mem < 25000",
                "before"),
           _ref("0.4.0.post1", GRAPHS, f"{SMALL} | self.tp_size < 4")),
    Sample("0.4.0.post1", "max_num_batched_tokens", "a10g", LLAMA8, 1,
           _ref("0.4.0.post1", CHUNK, "self.chunked_prefill_size is None | gpu_mem < 25000",
                "before"),
           _ref("0.4.0.post1", CHUNK, f"self.chunked_prefill_size is None | {SMALL}")),
    # schedule_policy; the block-FP8 GEMM (DeepGEMM) of an FP8 MLA MoE model on Hopper
    Sample("0.4.3.post3", "policy", "h100-sxm", LLAMA8, 1,
           _ref("0.4.3.post3", "schedule_policy", "ServerArgs", "before"),
           _ref("0.4.3.post3", "schedule_policy", "ServerArgs")),
    Sample("0.4.4.post2", "fp8_gemm_backend", "h20", V3, 8,
           _ref("0.4.4.post2", DEEPGEMM, "environment", "before"),
           _ref("0.4.4.post2", DEEPGEMM, "environment")),
    Sample("0.4.5.post1", "fp8_gemm_backend", "h20", V3, 8,
           _ref("0.4.5.post1", DEEPGEMM, "environment", "before"),
           _ref("0.4.5.post1", DEEPGEMM, "environment")),
    Sample("0.4.6", "fp8_gemm_backend", "h200", V3, 8,
           _ref("0.4.6", DEEPGEMM, "environment", "before"),
           _ref("0.4.6", DEEPGEMM, "environment")),
    Sample("0.4.6", "fp8_gemm_backend", "h200", V3, 8,
           _ref("0.4.6", DEEPGEMM, "environment", "before"),
           _ref("0.4.6", DEEPGEMM, "environment"), "offline"),
    # 0.4.5.post3 .. 0.4.7: mem_fraction_static by GPU memory tier and TP
    Sample("0.4.5.post3", "gpu_memory_utilization", "h200", LLAMA8, 1,
           _ref("0.4.5.post3", MEM, f"is None | not (self.tp_size >= 16) | {TP1}", "before"),
           _ref("0.4.5.post3", MEM, "not (gpu_mem <= 81920)")),
    Sample("0.4.5.post3", "gpu_memory_utilization", "h200", LLAMA70, 8,
           _ref("0.4.5.post3", MEM, f"self.mem_fraction_static is None | {TP8}", "before"),
           _ref("0.4.5.post3", MEM, "not (gpu_mem <= 81920)")),
    Sample("0.4.5.post3", "gpu_memory_utilization", "h100-sxm", LLAMA70, 4,
           _ref("0.4.5.post3", MEM, f"self.mem_fraction_static is None | {TP4}", "before"),
           _ref("0.4.5.post3", MEM, f"gpu_mem <= 81920 | {TP4}")),
    Sample("0.4.6.post2", "gpu_memory_utilization", "h20", LLAMA8, 1,
           _ref("0.4.6.post2", MEM, "not (gpu_mem <= 81920)", "before"),
           _ref("0.4.6.post2", MEM, "not (gpu_mem <= 81920)")),
    Sample("0.4.6.post2", "gpu_memory_utilization", "h200", LLAMA8, 1,
           _ref("0.4.6.post2", MEM, "not (gpu_mem <= 81920)", "before"),
           _ref("0.4.6.post2", MEM, OVER_96),
           names=(("mem_fraction", _ref("0.4.6.post2", MEM, "not (gpu_mem <= 81920)")),)),
    Sample("0.4.6.post2", "gpu_memory_utilization", "h100-sxm", LLAMA70, 8,
           _ref("0.4.6.post2", MEM, f"gpu_mem <= 81920 | {TP8}", "before"),
           _ref("0.4.6.post2", MEM, f"gpu_mem <= 81920 | {PP8}")),
    Sample("0.4.6.post2", "gpu_memory_utilization", "h100-sxm", LLAMA70, 4,
           _ref("0.4.6.post2", MEM, f"gpu_mem <= 81920 | {TP4}", "before"),
           _ref("0.4.6.post2", MEM, f"gpu_mem <= 81920 | {PP4}")),
    Sample("0.4.6.post2", "gpu_memory_utilization", "h100-sxm", LLAMA8, 1,
           _ref("0.4.6.post2", MEM, f"gpu_mem <= 81920 | not (self.tp_size >= 16) | {TP1}",
                "before"),
           _ref("0.4.6.post2", MEM, f"gpu_mem <= 81920 | not (parallel_size >= 16) | {PP1}")),
    Sample("0.4.6.post5", "gpu_memory_utilization", "h20", LLAMA8, 1,
           _ref("0.4.6.post5", MEM, "self.mem_fraction_static is None | not (gpu_mem <= 81920)",
                "before"),
           _ref("0.4.6.post5", MEM, "not (gpu_mem is not None and gpu_mem <= 81920)")),
    Sample("0.4.7", "gpu_memory_utilization", "b200", LLAMA70, 8,
           _ref("0.4.7", MEM, "is None | gpu_mem is not None and gpu_mem > 96 * 1024", "before"),
           _ref("0.4.7", MEM, "gpu_mem > 180 * 1000 and is_cuda()"),
           names=(("mem_fraction", _ref("0.4.6.post5", MEM, "not (gpu_mem <= 81920)", "before")),)),
    Sample("0.4.7", "max_num_batched_tokens", "b200", LLAMA70, 8,
           _ref("0.4.7", CHUNK, f"size is None | not ({SMALL}) | "
                "not (self.disaggregation_mode != 'null')", "before"),
           _ref("0.4.7", CHUNK, "self.chunked_prefill_size is None | gpu_mem is not None and "
                "gpu_mem > 180000")),
    # gpt-oss (MoE, sliding windows, attention sinks): its backend by GPU from 0.5.0rc2
    Sample("0.5.0rc2", "attention_backend", "h100-sxm", OSS, 1,
           _ref("0.5.0rc2", ATTN, f"model_specific_adjustments | {GPT_OSS}", "before"),
           _ref("0.5.0rc2", ATTN, "not (is_sm100_supported()) | is_sm90_supported()")),
    Sample("0.5.0rc2", "attention_backend", "b200", OSS, 1,
           _ref("0.5.0rc2", ATTN, f"model_specific_adjustments | {GPT_OSS}", "before"),
           _ref("0.5.0rc2", ATTN, f"{GPT_OSS} | is_sm100_supported()")),
    Sample("0.5.0rc2", "attention_backend", "l40s", OSS, 1,
           _ref("0.5.0rc2", ATTN, f"model_specific_adjustments | {GPT_OSS}", "before"),
           _ref("0.5.0rc2", ATTN, "not (is_sm100_supported()) | not (is_sm90_supported())")),
    Sample("0.5.0rc2", "block_size", "b200", OSS, 1,
           _ref("0.4.9.post4", "page_size", "self.page_size is None"),
           _ref("0.5.0rc0", "page_size", "self.page_size not in [16, 32, 64]"),
           via=_ref("0.5.0rc2", ATTN, f"{GPT_OSS} | is_sm100_supported()")),
    # 0.5.3rc2 (0.5.3's package): chunk and graphs by GPU tier and TP
    Sample("0.5.3rc2", "max_num_batched_tokens", "l40s", LLAMA8, 1,
           _ref("0.5.3rc2", CHUNK, "not (gpu_mem < 35 * 1024) | gpu_mem < 160 * 1024", "before"),
           _ref("0.5.3rc2", CHUNK, "gpu_mem < 60 * 1024 | self.chunked_prefill_size is None")),
    Sample("0.5.3rc2", "max_num_batched_tokens", "a10g", LLAMA8, 1,
           _ref("0.5.3rc2", CHUNK, "is None | gpu_mem is not None | gpu_mem < 35 * 1024",
                "before"),
           _ref("0.5.3rc2", CHUNK, f"{NEW_TIERS} | gpu_mem < 35 * 1024 | "
                "self.chunked_prefill_size is None")),
    Sample("0.5.3rc2", "max_num_batched_tokens", "h100-sxm", LLAMA8, 1,
           _ref("0.5.3rc2", CHUNK, "not (gpu_mem < 35 * 1024) | gpu_mem < 160 * 1024", "before"),
           _ref("0.5.3rc2", CHUNK, "gpu_mem < 90 * 1024 | self.chunked_prefill_size is None")),
    Sample("0.5.3rc2", "max_num_batched_tokens", "b200", LLAMA70, 8,
           _ref("0.5.3rc2", CHUNK, "not (gpu_mem < 35 * 1024) | not (gpu_mem < 160 * 1024)",
                "before"),
           _ref("0.5.3rc2", CHUNK, "not (gpu_mem < 160 * 1024) | "
                "self.chunked_prefill_size is None")),
    Sample("0.5.3rc2", "graph_max_bs", "rtx-4090", LLAMA8, 1,
           _ref("0.5.3rc2", GRAPHS, "gpu_mem < 35 * 1024 | self.tp_size < 4", "before"),
           _ref("0.5.3rc2", GRAPHS, "gpu_mem < 35 * 1024 | self.cuda_graph_max_bs is None | "
                "self.tp_size < 4")),
    Sample("0.5.3rc2", "graph_max_bs", "rtx-4090", LLAMA8, 4,
           _ref("0.5.3rc2", GRAPHS, "gpu_mem < 35 * 1024 | not (self.tp_size < 4)", "before"),
           _ref("0.5.3rc2", GRAPHS, "gpu_mem < 35 * 1024 | self.cuda_graph_max_bs is None | "
                "not (self.tp_size < 4)")),
    Sample("0.5.4.post1", "graph_max_bs", "l4", LLAMA8, 1,
           _ref("0.5.4.post1", GRAPHS, "self.cuda_graph_max_bs is None | self.tp_size < 4",
                "before"),
           _ref("0.5.4.post1", GRAPHS, "self.cuda_graph_max_bs is None | self.tp_size < 4")),
    # models of linear-attention layers: Kimi-Linear's radix cache, Qwen3-Next's overlap
    Sample("0.5.4.post2", "enable_prefix_caching", "h200", KIMI, 4,
           _ref("0.5.20", "disable_radix_cache", "ServerArgs", "before"),
           _ref("0.5.4.post2", "disable_radix_cache", "model_arch in ['KimiLinearForCausalLM']")),
    Sample("0.5.5.post2", "async_scheduling", "h200", QWEN3_NEXT, 4,
           _ref("0.3.6", "disable_overlap_schedule", "ServerArgs"),
           _ref("0.5.5.post2", "disable_overlap_schedule",
                "model_arch in ['Qwen3NextForCausalLM'] | not self.disable_radix_cache")),
    # the default MHA backend (_handle_attention_backend_compatibility): 0.5.6.post1 trtllm_mha on
    # every Blackwell (SM100 and SM120), 0.5.7 on SM100 alone, 0.5.8 FA3 on Hopper for any model
    Sample("0.5.6.post1", ATTN, "rtx-pro-6000", LLAMA8, 1,
           _ref("0.5.6.post1", ATTN, f"{FA3_LIST} | not (is_hip()) | not (is_npu())", "before"),
           _ref("0.5.6.post1", ATTN, f"{FA3_LIST} | {BLACKWELL}")),
    Sample("0.5.6.post1", ATTN, "b200", LLAMA8, 1,
           _ref("0.5.6.post1", ATTN, f"{FA3_LIST} | not (is_hip()) | not (is_npu())", "before"),
           _ref("0.5.6.post1", ATTN, f"{FA3_LIST} | {BLACKWELL}")),
    Sample("0.5.7", ATTN, "rtx-pro-6000", LLAMA8, 1,
           _ref("0.5.7", ATTN, f"{FA3_LIST} | {BLACKWELL}", "before"),
           _ref("0.5.7", ATTN, f"{FA3_LIST} | not ({SM100}) | not (is_hip())")),
    Sample("0.5.7", ATTN, "b200", LLAMA8, 1,
           _ref("0.5.7", ATTN, f"{FA3_LIST} | {BLACKWELL}", "before"),
           _ref("0.5.7", ATTN, f"{FA3_LIST} | {SM100}")),
    Sample("0.5.8", ATTN, "h100-sxm", "mistral-7b-v0.1", 1,
           _ref("0.5.8", ATTN, f"{FA3_LIST} | not ({SM100}) | not (is_hip())", "before"),
           _ref("0.5.8", ATTN, f"not use_mla_backend | {HOPPER}")),
    Sample("0.5.8", ATTN, "h200", "mixtral-8x7b-v0.1", 2,
           _ref("0.5.8", ATTN, f"{FA3_LIST} | not ({SM100}) | not (is_hip())", "before"),
           _ref("0.5.8", ATTN, f"not use_mla_backend | {HOPPER}")),
    Sample("0.5.8", ATTN, "h200", QWEN3_NEXT, 2,
           _ref("0.5.8", ATTN, f"{FA3_LIST} | not ({SM100}) | not (is_hip())", "before"),
           _ref("0.5.8", ATTN, f"not use_mla_backend | {HOPPER}")),
    Sample("0.5.8", ATTN, "h100-sxm", LLAMA8, 1,
           _ref("0.5.8", ATTN, f"{HOPPER} and {FA3_ARCH}", "before"),
           _ref("0.5.8", ATTN, f"not use_mla_backend | {HOPPER}")),
    Sample("0.5.8", ATTN, "b200", LLAMA8, 1,
           _ref("0.5.8", ATTN, f"{FA3_LIST} | {SM100}", "before"),
           _ref("0.5.8", ATTN, f"not ({HOPPER}) | {SM100}")),
    # 0.5.14: mamba_radix_cache_strategy 'auto': Qwen3-Next takes extra_buffer (overlap kept),
    # Kimi-Linear keeps its radix cache under no_buffer (overlap off)
    Sample("0.5.14", "async_scheduling", "h200", QWEN3_NEXT, 4,
           _ref("0.5.14", "disable_overlap_schedule",
                "not self.disable_radix_cache | self.speculative_algorithm is None", "before"),
           _ref("0.3.6", "disable_overlap_schedule", "ServerArgs")),
    Sample("0.5.14", "async_scheduling", "h200", KIMI, 4,
           _ref("0.3.6", "disable_overlap_schedule", "ServerArgs"),
           _ref("0.5.14", "disable_overlap_schedule",
                "self._support_mamba_cache_extra_buffer(model_arch))")),
    Sample("0.5.14", "enable_prefix_caching", "h200", KIMI, 4,
           _ref("0.5.14", "disable_radix_cache", "| not support_mamba_cache", "before"),
           _ref("0.5.20", "disable_radix_cache", "ServerArgs", "before")),
    # Qwen3-Next's own branch on SM100: triton from 0.5.6 (0.5.6.post1: unless one was chosen)
    Sample("0.5.6.post1", ATTN, "b200", QWEN3_NEXT, 2,
           _ref("0.5.6.post1", ATTN, "['Qwen3NextForCausalLM'] | is_sm100_supported()", "before"),
           _ref("0.5.6.post1", ATTN, "['Qwen3NextForCausalLM'] | is_sm100_supported() | "
                "self.attention_backend is None")),
)  # fmt: skip

# The changelog's values as the simulator names them.
BACKENDS = {  # (SGLang's backend, MLA model) -> resolve()'s attention_backend
    ("flashinfer", False): "FLASHINFER",
    ("triton", False): "TRITON_ATTN",
    ("fa3", False): "FLASH_ATTN_FA3",
    ("trtllm_mha", False): "TRTLLM",
    ("fa3", True): "FLASH_ATTN_MLA",
    ("triton", True): "TRITON_MLA",
}
ENV_TRUE = ("1", "true")
SWITCHES = ("enable_overlap_schedule", "disable_overlap_schedule", "disable_radix_cache")
_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
}


@cache
def changelog() -> dict:
    return yaml.safe_load(CHANGELOG.read_text())["releases"]


def change(ref: Ref) -> dict:
    """The one change `ref` names: its `where` ends with ref.where (the test fails when there
    are none or several)."""
    found = [
        c
        for c in changelog()[ref.release]["changes"]
        if c["setting"] == ref.setting and c["where"].endswith(ref.where)
    ]
    assert len(found) == 1, f"{ref}: {len(found)} changes match in the changelog"
    assert found[0]["file"].startswith("sglang/"), found[0]
    return found[0]


def value(ref: Ref):
    raw = change(ref)[ref.side]
    assert raw not in (ABSENT, None), f"{ref}: no value on that side ({raw!r})"
    return raw


def evaluate(text: str, names: dict):
    """An expression of the engine's (arithmetic, min, round, a conditional, calls of the
    names given), evaluated without executing anything else."""

    def ev(node):
        match node:
            case ast.Constant(value=v):
                return v
            case ast.Name(id=name):
                return names[name]
            case ast.BinOp(left=a, op=op, right=b):
                return _OPS[type(op)](ev(a), ev(b))
            case ast.IfExp(test=t, body=a, orelse=b):
                return ev(a) if ev(t) else ev(b)
            case ast.Call(func=ast.Name(id=f), args=args):
                return names[f](*map(ev, args))
        raise AssertionError(f"{text!r}: {ast.dump(node)} is not evaluated here")

    return ev(ast.parse(text, mode="eval").body)


def expected(sample: Sample, ref: Ref, hw, model):
    """What resolve() must give for the changelog's value at `ref`."""
    raw = value(ref)
    if ref.setting in SWITCHES:  # disable_*: the knob is its negation
        return raw if ref.setting.startswith("enable") else not raw
    if ref.setting == DEEPGEMM:  # on by default -> DeepGEMM on Hopper; off -> Triton there
        return "deepgemm" if str(raw).lower() in ENV_TRUE else "triton"
    if isinstance(raw, str) and sample.knob != "policy":
        names = {"gpu_mem": hw.hbm_bytes / MIB, "min": min, "round": round}
        names["is_flashinfer_available"] = lambda: hw.vendor == "nvidia"
        names |= {name: value(r) for name, r in sample.names}
        raw = evaluate(raw, names) if "(" in raw or " " in raw else raw
    if sample.knob == "attention_backend":
        return BACKENDS[(raw, model.mla is not None)]
    return raw


def resolved(sample: Sample, release: str, hw, model):
    s = resolve(f"sglang@{release}", hw, model, sample.tp, sample.entry_point, {})
    if sample.knob == "graph_max_bs":
        return max(s.cudagraph_capture_sizes)
    return getattr(s, sample.knob)


def test_at_least_35_changes_are_sampled_from_the_changelog():
    assert len(set(SAMPLES)) == len(SAMPLES) >= 35
    # each sample is a change of its own release: its `after`, `before` or `via` is read there
    for s in SAMPLES:
        assert s.release in (s.after.release, s.before.release, s.via and s.via.release), s
        assert s.via is None or value(s.via)
        assert changelog()[s.release]["modelled_change"], s.release
    # GPU-, model- and entry-point-dependent rules among them
    assert {s.gpu for s in SAMPLES} >= {"h100-sxm", "h200", "h20", "b200", "l4", "mi300x"}
    assert {s.model for s in SAMPLES} >= {V3, OSS, LLAMA8, LLAMA70}
    assert {s.entry_point for s in SAMPLES} == {"server", "offline"}


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: f"{s.release}-{s.knob}-{s.gpu}-{s.tp}")
def test_resolve_follows_the_changelog(sample: Sample):
    hw, model = load_hardware(sample.gpu), load_model(sample.model)
    previous = changelog()[sample.release]["compared_with"]
    before = expected(sample, sample.before, hw, model)
    after = expected(sample, sample.after, hw, model)
    got_before = resolved(sample, previous, hw, model)
    got_after = resolved(sample, sample.release, hw, model)
    if isinstance(after, float):
        assert got_before == pytest.approx(before, abs=5e-4)
        assert got_after == pytest.approx(after, abs=5e-4)
    else:
        assert (got_before, got_after) == (before, after)


def test_0_4_7_fraction_above_180000_mib_is_for_cuda_gpus_only():
    """0.4.7's `gpu_mem > 180 * 1000 and is_cuda()` branch: B200 takes it, MI300X (192 GiB, ROCm)
    keeps the 96 GiB formula of the branch after it."""
    ref = _ref("0.4.7", MEM, "gpu_mem > 180 * 1000 and is_cuda()")
    b200, mi300x = (resolve("sglang@0.4.7", load_hardware(g), load_model(LLAMA70), 8) for g in
                    ("b200", "mi300x"))  # fmt: skip
    assert b200.gpu_memory_utilization == value(ref)
    mib = load_hardware("mi300x").hbm_bytes / MIB
    assert mi300x.gpu_memory_utilization == pytest.approx(min(0.88 + 48 * 1024 * 0.12 / mib,
                                                              (mib - 18 * 1024) / mib))  # fmt: skip


def test_reviewed_releases_cover_every_modelled_change_and_have_no_rule_set():
    """sim/engines/changelogs/reviewed_sglang.yaml: each release listed changed something
    modelled (the changelog says so), has no rule set of its own, and gives a reason for every
    modelled setting its changelog entry names."""
    from sim.engines import sglang

    reviewed = yaml.safe_load((CHANGELOG.parent / "reviewed_sglang.yaml").read_text())
    assert len(reviewed) >= 20
    for release, items in reviewed.items():
        entry = changelog()[release]
        assert entry["modelled_change"] and release not in sglang.RELEASES, release
        modelled = {c["setting"] for c in entry["changes"] if c["modelled"]}
        assert all(set(item) == {"setting", "why"} and item["why"] for item in items), release
        assert {item["setting"] for item in items} == modelled, release


AITER = "attention_backend == 'aiter' | model_config.context_len > 8192"


@pytest.mark.parametrize(
    ("release", "where", "side"),
    [
        (
            "0.5.4.post1",
            "self.attention_backend == 'aiter' | model_config.context_len > 8192",
            "after",
        ),
        (
            "0.5.4.post2",
            "self.attention_backend == 'aiter' | model_config.context_len > 8192",
            "after",
        ),
        ("0.5.19", "attention_backend == 'aiter' | model_config.context_len > 8192", "before"),
    ],
)
def test_aiter_scales_the_memory_fraction_above_an_8192_context(release, where, side):
    """server_args.py: on ROCm's aiter backend, `self.mem_fraction_static *= <factor>` when the
    context exceeds 8192 tokens; not on CUDA, not at 8192, not in the release before 0.5.4.post1."""
    factor = float(value(_ref(release, MEM, where, side)).split("*=")[1])
    model = load_model(LLAMA8)  # 131,072-token context

    def fraction(gpu, rel, context=None):
        overrides = {"max_model_len": context} if context else {}
        return resolve(f"sglang@{rel}", load_hardware(gpu), model, 1, "server", overrides)

    long, short = fraction("mi300x", release), fraction("mi300x", release, 8192)
    assert long.gpu_memory_utilization == pytest.approx(
        short.gpu_memory_utilization * factor, abs=1e-3
    )
    assert "aiter" in long.rules["gpu_memory_utilization"]
    cuda = fraction("h100-sxm", release), fraction("h100-sxm", release, 8192)
    assert cuda[0].gpu_memory_utilization == cuda[1].gpu_memory_utilization
    before = changelog()["0.5.4.post1"]["compared_with"]
    assert fraction("mi300x", before).gpu_memory_utilization == pytest.approx(
        fraction("mi300x", before, 8192).gpu_memory_utilization
    )
