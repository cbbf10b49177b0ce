"""trtllm-bench throughput as it runs (the PyTorch backend, TensorRT-LLM 1.x): the settings it
derives from the dataset and the GPU before it starts the LLM API.

Read from NVIDIA/TensorRT-LLM (the 1.0-era sources; no release tag is stored, the commits are
named): tensorrt_llm/bench/benchmark/throughput.py (commit 000a01de), bench/benchmark/utils/
general.py get_settings (0171265e), bench/build/build.py get_benchmark_engine_settings
(000a01de), bench/build/tuning.py calc_engine_setting and finetune_setting (04cba882),
bench/build/utils.py get_device_memory (7ed07f06), llmapi/llm_args.py CudaGraphConfig.

* `--kv_cache_free_gpu_mem_fraction` 0.90 (throughput.py): the KV pool's share of the memory
  free after start-up, and the share the heuristic below assumes.
* `--max_batch_size` / `--max_num_tokens`, when not given: calc_engine_setting. The KV bytes
  per token (2 x attention layers x max(TP, KV heads) x head size x bytes per KV element, 1 for
  an FP8 KV cache, else 2), the weights (the checkpoint's parameters x 1 byte for FP8 / FP8
  block, 0.5 for NVFP4, else 2) out of the GPUs' total memory (NVML, GiB), and the dataset's
  average ISL + OSL give the requests the cache holds: max_requests = 0.90 x (memory - weights)
  / (bytes per token x (ISL + OSL)). finetune_setting: raw batch = min(max_requests, 4096) /
  PP, rounded up to 32s (at least 64) below 256, to 128s below 1024, to 256s above; raw tokens
  = min(raw batch x (1 + ISL / OSL), 32768), rounded up to 256s (at least 2048) below 4096,
  512s below 8192, 1024s above. Other quantisations (MXFP4) take BuildConfig's 2048 / 8192.
  Fewer than one request refused (RuntimeError "The amount of KV cache memory is
  insufficient").
* Chunked prefill off (`--enable_chunked_context` not given): max_num_tokens = max(that, the
  dataset's largest ISL + max_batch_size), so every prompt fits one step.
* `max_seq_len` = the dataset's largest ISL + OSL; the capacity scheduler GUARANTEED_NO_EVICT;
  CUDA graphs with padding up to max_batch_size (CudaGraphConfig: 1, 2, 4, 8..128 step 8,
  powers of two from 256 below the batch, and the batch itself).
* KV cache dtype "auto": the checkpoint's kv_cache_quant_algo. NVIDIA's ModelOpt FP8
  checkpoints carry kv_cache_quant_algo FP8 (ModelOpt's export format, NVIDIA/
  TensorRT-Model-Optimizer modelopt/torch/export/convert_hf_config.py, commit 4c611e47), so an
  FP8 run's KV cache is FP8; block-FP8 checkpoints (DeepSeek's) carry none.
* The overlap scheduler stays on (disable_overlap_scheduler False), as for trtllm-serve.
"""

from __future__ import annotations

import math

from sim.errors import UserError
from sim.specs.hardware import Hardware
from sim.specs.model import Attention, ModelSpec

GIB = 2**30
KV_FRACTION = 0.90  # throughput.py --kv_cache_free_gpu_mem_fraction
BYTES_PER_WEIGHT = {"fp8": 1.0, "fp8_block": 1.0}  # tuning.py BYTES_PER_ELEM; NVFP4 0.5
TUNED = ("bf16", "fp16", "fp8", "fp8_block")  # build.py TUNED_QUANTS (NO_QUANT, FP8, block)
BUILD_DEFAULTS = (2048, 8192)  # BuildConfig max_batch_size, max_num_tokens
MAX_REQUESTS = 4096  # finetune_setting: decoder buffers
MAX_TOKENS = 32768  # ... activation buffers
SRC = "trtllm-bench (bench/build/tuning.py)"


def kv_dtype(weight_dtype: str) -> tuple[str, str]:
    """(the KV cache dtype trtllm-bench runs with, its rule) for the checkpoint's weights."""
    if weight_dtype == "fp8":
        return "fp8", "kv_cache_dtype auto -> FP8: ModelOpt FP8 checkpoints set kv_cache_quant_algo"
    return "auto", "kv_cache_dtype auto: the checkpoint sets no KV quantisation"


def limits(
    hw: Hardware,
    model: ModelSpec,
    tp: int,
    pp: int,
    weight_dtype: str,
    kv: str,
    isl: float,
    osl: float,
    fraction: float = KV_FRACTION,
) -> tuple[int, int, str]:
    """(max_batch_size, max_num_tokens, rule) as calc_engine_setting and finetune_setting
    derive them from the average ISL and OSL (before the chunking bump)."""
    if weight_dtype not in TUNED:
        bs, tokens = BUILD_DEFAULTS
        return bs, tokens, f"{SRC}: {weight_dtype} is not a tuned quantisation: BuildConfig's"
    if isl <= 0 or osl <= 0:
        raise UserError(f"trtllm-bench: ISL {isl:g} and OSL {osl:g} must be > 0")
    layers = sum(1 for layer in model.layers if layer.attention is not Attention.LINEAR)
    kv_bytes = 1.0 if kv == "fp8" else 2.0
    gib_per_token = 2 * layers * max(tp, model.num_kv_heads) * model.head_dim * kv_bytes / GIB
    weights_gib = model.params.total * BYTES_PER_WEIGHT.get(weight_dtype, 2.0) / GIB
    total_gib = hw.hbm_bytes / GIB * tp * pp
    cache_gib = (total_gib - weights_gib) * fraction
    requests = cache_gib / (gib_per_token * (isl + osl))
    if requests < 1:
        raise UserError(
            f"trtllm-bench: the KV cache memory ({cache_gib:.1f} GiB of {total_gib:.0f}) holds "
            f"{requests:.2f} requests of {isl + osl:g} tokens: insufficient to run this model "
            "(bench/build/tuning.py); use more GPUs"
        )
    raw_bs = min(requests, MAX_REQUESTS) / pp
    raw_tokens = min(raw_bs * (1 + isl / osl), MAX_TOKENS)
    bs = _rounded_up(raw_bs, 64, ((256, 32), (1024, 128), (math.inf, 256)))
    tokens = _rounded_up(raw_tokens, 2048, ((4096, 256), (8192, 512), (math.inf, 1024)))
    rule = (
        f"{SRC}: {KV_FRACTION:g} x ({total_gib:.0f} - {weights_gib:.1f} GiB of weights) holds "
        f"{requests:.0f} requests of ISL {isl:g} + OSL {osl:g}: batch {bs}, tokens {tokens}"
    )
    return bs, tokens, rule


def capture_sizes(max_bs: int) -> tuple[int, ...]:
    """CudaGraphConfig's sizes with padding up to `max_bs` (llm_args.py)."""
    sizes = [1, 2, 4, *range(8, 129, 8)]
    sizes += [2**i for i in range(8, math.ceil(math.log2(max_bs)))] if max_bs > 1 else []
    sizes = sorted(s for s in set(sizes) if s <= max_bs)
    return tuple(sizes if sizes and sizes[-1] == max_bs else [*sizes, max_bs])


def _rounded_up(x: float, least: int, tiers: tuple[tuple[float, int], ...]) -> int:
    """`x` rounded up to the step of the first tier whose bound it is below, at least `least`
    (trtllm-bench's finetune_setting rounds its batch size and token budget so)."""
    step = next(step for bound, step in tiers if x < bound)
    return max(least, step * math.ceil(x / step))
