"""SGLang's torch.compile, release by release from 0.3.0: its arguments and the batch sizes it
compiles.

Read from the wheels (`pip download sglang==0.3.N --no-deps`, N = 0..6),
srt/server_args.py and srt/model_executor/cuda_graph_runner.py:

* `enable_torch_compile` (default False) in every release. The model is compiled (inductor,
  mode max-autotune-no-cudagraphs, coordinate-descent tuning) only inside the CUDA-graph runner:
  the compiled forward is what the decode graphs of the compiled batch sizes capture. Prefill,
  and every batch when CUDA graphs are off, runs the eager model.
* The compiled batch sizes: 0.3.0-0.3.1 a fixed list, 1, 2, 4, 8, 16, 24, 32
  (`compile_bs` in cuda_graph_runner.py); 0.3.2-0.3.4 the capture sizes up to
  `max_torch_compile_bs` (default 32); 0.3.5 on the same, the argument renamed
  `torch_compile_max_bs` (default 32).

What compiling does to a decode step, measured (sgl-project/sglang#1008, "Torch.compile
Performance Tracking", 2024-08-09, `python3 -m sglang.bench_latency --model
meta-llama/Meta-Llama-3-8B --input 128 --output 8`, TP 1, CUDA graphs on in both runs):
batch 1, median decode 7.37 ms -> 6.42 ms with --enable-torch-compile (0.87x); batch 128,
11.84 ms -> 12.31 ms (1.04x, slower: the reason the later releases compile only up to 32).
`compiled_decode_ratio` is what the cost of a captured decode step at a compiled batch size is
to be multiplied by: the two measured ratios, interpolated in log2 of the batch (0.871 at 1,
0.99 at 32, the default limit); 1 at sizes not compiled. `decode_ratios` gives the cost model
the factor of each compiled size of a resolved run, to be applied to the GPU time of a step
known to be decode-only (every component alike, so that a fast-forwarded run of decode-only
steps, which adds the attention to the rest of the step apart, keeps the same bits); and
`compiles_eager_steps` says that SGLang's prefill and mixed steps launch the eager model's
kernels whatever `compile` says (vLLM's compile covers every step). The limit is the default
one: `torch_compile_max_bs` / `max_torch_compile_bs` are not yet settings.
"""

from __future__ import annotations

import math

from sim.engines.settings import EngineSettings
from sim.engines.versions import version_tuple

COMPILE_MAX_BS = 32  # the default limit, 0.3.0 .. 0.3.6 (a fixed list before 0.3.2)
FIXED_COMPILE_BS = (1, 2, 4, 8, 16, 24, 32)  # 0.3.0-0.3.1: cuda_graph_runner.py compile_bs
MEASURED_BS1_MS = (7.37, 6.42)  # sgl-project/sglang#1008: Llama-3-8B, TP 1, batch 1
MEASURED_BS128_MS = (11.84, 12.31)  # ... batch 128
COMPILED_DECODE_RATIO = round(MEASURED_BS1_MS[1] / MEASURED_BS1_MS[0], 3)  # 0.871
LARGE_BATCH_RATIO = round(MEASURED_BS128_MS[1] / MEASURED_BS128_MS[0], 3)  # 1.040
ISSUE = "sgl-project/sglang#1008"


def limit_name(release: str) -> str | None:
    """The argument that bounds the compiled batch sizes, by release (None: a fixed list)."""
    v = version_tuple(release)
    if v < (0, 3, 2):
        return None
    return "max_torch_compile_bs" if v < (0, 3, 5) else "torch_compile_max_bs"


def compiled_sizes(
    release: str, capture_sizes: tuple[int, ...], limit: int | None = None
) -> tuple[int, ...]:
    """The decode batch sizes whose captured graphs run the compiled model: 0.3.0-0.3.1 the
    fixed list (those of it that are captured), later the capture sizes up to `limit`."""
    if limit_name(release) is None:
        return tuple(s for s in FIXED_COMPILE_BS if s in capture_sizes)
    top = COMPILE_MAX_BS if limit is None else limit
    return tuple(s for s in capture_sizes if s <= top)


def compile_rule(release: str, enabled: bool, user: bool = False) -> str:
    """The rule of the `compile` setting, with its batch limit and the measurement behind it."""
    at = f"sglang {release}"
    if not enabled:
        return f"{at}: enable_torch_compile False (server_args.py)"
    name = limit_name(release)
    limit = (
        f"the fixed sizes {', '.join(map(str, FIXED_COMPILE_BS))} (cuda_graph_runner.py)"
        if name is None
        else f"capture sizes up to {name} (default {COMPILE_MAX_BS})"
    )
    how = "user override (engine_args.enable_torch_compile)" if user else f"{at}: enabled"
    return (
        f"{how}: decode graphs of {limit} run the compiled model; {ISSUE} measured "
        f"{MEASURED_BS1_MS[0]} -> {MEASURED_BS1_MS[1]} ms per decode step at batch 1 "
        f"(x{COMPILED_DECODE_RATIO}), {MEASURED_BS128_MS[0]} -> {MEASURED_BS128_MS[1]} ms at 128"
    )


def compiled_decode_ratio(batch: int, compiled: tuple[int, ...]) -> float:
    """The factor on a captured decode step of `batch` sequences (`batch` a capture size): at
    a compiled size, the measured ratios at 1 and 128 interpolated in log2(batch); 1 at sizes
    not compiled (and for prefill and eager steps, which run the eager model)."""
    if batch < 1 or batch not in compiled:
        return 1.0
    share = min(math.log2(batch) / math.log2(128), 1.0)
    return COMPILED_DECODE_RATIO + (LARGE_BATCH_RATIO - COMPILED_DECODE_RATIO) * share


def decode_ratios(settings: EngineSettings) -> dict[int, float]:
    """{padded decode batch: factor on its step's GPU time} of a resolved run: SGLang with
    enable_torch_compile and decode graphs, each compiled capture size with its
    `compiled_decode_ratio`; empty otherwise (compile off, CUDA graphs off, another family).
    A decode-only step runs the captured graph of the smallest capture size that holds its
    batch, so the cost model looks the factor up by that padded size; prefill and mixed steps
    run the eager model and take none."""
    if settings.engine != "sglang" or not settings.compile:
        return {}
    if settings.cudagraph_mode == "NONE" or not settings.cudagraph_capture_sizes:
        return {}
    sizes = compiled_sizes(settings.rule_set, tuple(settings.cudagraph_capture_sizes))
    return {b: compiled_decode_ratio(b, sizes) for b in sizes}


def compiles_eager_steps(settings: EngineSettings) -> bool:
    """Whether the steps that run outside CUDA graphs run a compiled model (fewer kernels to
    launch): vLLM's torch.compile compiles the model for every step; SGLang's
    enable_torch_compile only inside the CUDA-graph runner (cuda_graph_runner.py patch_model:
    the compiled forward is what the decode graphs capture), so its prefill, mixed and eager
    steps launch the eager model's kernels."""
    return settings.compile and settings.engine != "sglang"
