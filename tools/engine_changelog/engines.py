"""What the changelog reads in each engine's package, and which names the simulator models.

Files are glob patterns inside the package (`*` crosses folders). Every file read gives its
environment-variable flags; `classes` give field defaults (dataclass / pydantic fields,
`__init__` keyword defaults and `self.x = constant` in `__init__`); `rules` files give the
conditions under which a watched setting is assigned (derived settings), and `returns` the
conditions under which a selector function returns a kernel (attention backend).

Which files: vLLM's engine/arg_utils.py (EngineArgs), config.py or config/*.py (SchedulerConfig,
CacheConfig, ParallelConfig, CompilationConfig, ModelConfig, VllmConfig), envs.py, the attention
selector (attention/selector.py, from 0.18 v1/attention/selector.py, platforms/cuda.py);
SGLang's srt/server_args.py (0.5.23: srt/arg_groups/), global_config.py, srt/environ.py and
srt/layers/quantization/ (DeepGEMM switches); TensorRT-LLM's llmapi/llm_args.py. Read from the
wheels on PyPI (https://pypi.org/project/vllm/, /sglang/, /tensorrt-llm/).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class EngineSpec:
    engine: str  # the simulator's name: vllm | sglang | trtllm
    package: str  # the PyPI name
    first: str  # the first release the changelog covers
    files: tuple[str, ...]  # glob patterns inside the package
    classes: frozenset[str]  # classes whose field defaults are read
    rules: tuple[str, ...]  # glob patterns of the files whose assignments are read
    returns: tuple[tuple[str, str], ...] = ()  # (function-name regex, setting) selectors
    extra_watch: tuple[str, ...] = ()  # derived names watched beside the modelled ones
    unread_why: str = ""  # why no release could be read here, if none can


SPECS = {
    "vllm": EngineSpec(
        engine="vllm",
        package="vllm",
        first="0.4.0",
        files=(
            "vllm/engine/arg_utils.py",
            "vllm/config.py",
            "vllm/config/*.py",
            "vllm/envs.py",
            "vllm/attention/selector.py",
            "vllm/v1/attention/selector.py",
            "vllm/platforms/cuda.py",
        ),
        classes=frozenset(
            {
                "EngineArgs",
                "AsyncEngineArgs",
                "SchedulerConfig",
                "CacheConfig",
                "ParallelConfig",
                "CompilationConfig",
                "ModelConfig",
                "VllmConfig",
            }
        ),
        rules=(
            "vllm/engine/arg_utils.py",
            "vllm/config.py",
            "vllm/config/*.py",
            "vllm/attention/selector.py",
            "vllm/v1/attention/selector.py",
            "vllm/platforms/cuda.py",
        ),
        returns=(
            (
                r"(which_attn_to_use|get_attn_backend|_cached_get_attn_backend|"
                r"get_attn_backend_cls|get_valid_backends|_get_backend_priorities)$",
                "attention_backend",
            ),
        ),
        extra_watch=("cuda_graph_sizes", "max_seq_len_to_capture", "use_v2_block_manager"),
    ),
    "sglang": EngineSpec(
        engine="sglang",
        package="sglang",
        first="0.3.0",
        files=(
            "sglang/srt/server_args.py",
            "sglang/srt/arg_groups/*.py",
            "sglang/global_config.py",
            "sglang/srt/environ.py",
            "sglang/srt/layers/quantization/*.py",
        ),
        classes=frozenset({"ServerArgs", "GlobalConfig", "Envs"}),
        rules=("sglang/srt/server_args.py", "sglang/srt/arg_groups/*.py"),
        returns=(),
        extra_watch=("attention_backend", "enable_overlap_schedule", "sampling_backend"),
    ),
    "trtllm": EngineSpec(
        engine="trtllm",
        package="tensorrt-llm",
        first="1.0.0",
        files=("tensorrt_llm/llmapi/llm_args.py",),
        classes=frozenset(
            {
                "BaseLlmArgs",
                "TorchLlmArgs",
                "KvCacheConfig",
                "SchedulerConfig",
                "CudaGraphConfig",
                "TorchCompileConfig",
            }
        ),
        rules=("tensorrt_llm/llmapi/llm_args.py",),
        unread_why=(
            "PyPI holds only a stub sdist that fetches the wheel from pypi.nvidia.com at install "
            "time (not reachable from the machine that wrote this changelog), and the "
            "NVIDIA/TensorRT-LLM repository (2.5 GB) was too large to mirror: rerun "
            "`python -m tools.engine_changelog --engine trtllm --wheels DIR` with the wheels "
            "downloaded into DIR"
        ),
    ),
}

ENV_RE = re.compile(r"^(VLLM|SGL|SGLANG|TRTLLM|TLLM)_[A-Z0-9_]+$")


def modelled_names(engine: str) -> frozenset[str]:
    """The names whose change the simulator can see: EngineSettings' fields, the engine's own
    argument names for them (each rule module's NAMES), the engine_args resolve() accepts, and
    every engine environment variable the simulator's code names (sim/**/*.py)."""
    from sim.engines import resolve, settings  # here: `--help` needs no simulator import

    module = resolve.ENGINES[engine]
    names = set(settings.SETTING_NAMES) | set(resolve.ENGINE_ARGS) | set(resolve.SPECIAL)
    names |= set(getattr(module, "NAMES", {}).values())
    flag = re.compile(r"\b(?:VLLM|SGL|SGLANG|TRTLLM|TLLM)_[A-Z0-9_]+\b")
    for path in (ROOT / "sim").rglob("*.py"):
        names |= set(flag.findall(path.read_text()))
    return frozenset(names)


def watched_names(spec: EngineSpec) -> frozenset[str]:
    """The setting names whose assignments are read as derivation rules."""
    return modelled_names(spec.engine) | set(spec.extra_watch)
