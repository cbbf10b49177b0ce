"""FP8 linear layers: which measured kernel a release's FP8 GEMM is priced from, by weight format
and GPU (issue 43, item 1).

Three kernels run an FP8 checkpoint's dense linear layers in vLLM, read from the releases' own
sources (`pip download vllm==X --no-deps`):

- **Per-tensor FP8 (W8A8) on FP8 tensor cores** (Ada, Hopper, Blackwell): CUTLASS `scaled_mm`
  (0.7.3: `apply_fp8_linear` -> `ops.cutlass_scaled_mm`; 0.11.0, 0.12.0 and 0.14.0:
  `Fp8LinearOp.apply` -> `dispatch_w8a8_scaled_mm("cutlass", ...)`, both in
  quantization/utils/w8a8_utils.py; 0.19.0:
  `CutlassFP8ScaledMMLinearKernel`, kernels/linear/scaled_mm/cutlass.py; AIConfigurator's 0.24
  table names the same class in its kernel_source column). The profiles price it from the
  measured per-tensor table of the nearest release whose collection timed that kernel
  (sim/calibrate/gpu.py SUPERSEDED: vLLM 0.14's collection runs it at the BF16 rate even at
  m = 8,192, 880 TF/s on the H200 against 1,458 in the 0.19 collection). A W8A8 GEMM is priced
  at most as the same shape in BF16 (`w8a8_ceiling`).
- **Block FP8 (W8A8, 128 x 128 weight blocks, 1 x 128 activation groups) on Hopper**: DeepGEMM's
  `fp8_gemm_nt` where DeepGEMM is installed (0.11.0-0.19.0: `should_use_deepgemm_for_fp8_linear`
  in utils/deep_gemm.py, VLLM_USE_DEEP_GEMM on by default in envs.py), else CUTLASS's blockwise
  sm90 kernel; FlashInfer below m = 32 and DeepGEMM above in 0.24 (AIConfigurator's
  kernel_source). Each runs after a per-token-group quantisation kernel of its own (the CUDA
  op, which vLLM 0.12+ turns on for blocked weights, `+quant_fp8` in config/vllm.py). The
  collections' block tables at decode shapes (m <= 256, n k >= 4M) time something else: a
  median 3.5-4.7x the 0.19 per-tensor table in 0.18, 0.22 and 0.24 on the H100 and H200, every
  shape 52-68 us or more at its tenth percentile (host launch gaps of eager timing;
  AIConfigurator's newer collector refuses eager block-FP8 rows for that reason,
  ai-dynamo/aisimulate python/aisimulate/collector/vllm/collect_gemm.py), 2.5-2.8x in 0.14 and
  1.6-1.8x in 0.19. The kernel's own time is public: BLIS's DeepGEMM table on the
  H100 (inference-sim/inference-sim@9da997863bc8818aa80372aa9e03961187a0e677
  bench_data/gemm/h100/data.csv, DeepGEMM's FP8 GEMM timed alone by InferSim's
  kernel_benchmark/deepgemm_gemm.py). That kernel plus a per-token quantisation (vLLM 0.24's
  dynamic per-token FP8 quant, AIConfigurator's H100 quantize tables: 2.6-4.0 us for
  m <= 256) takes 1.15-1.40x the 0.19 per-tensor FP8 op of the same shape for m <= 256 (1.00-1.18x
  for m = 512-4,096; 36 shapes, k 2,048-8,192, n 6,144). A block-FP8 GEMM is priced at most as
  BLOCK_OVER_TENSOR times the per-tensor one (`block_ceiling`): the measured block tables
  stand where they are faster.
- **Weight-only FP8 (W8A16) without FP8 tensor cores** (Ampere: `use_marlin` when the GPU's
  capability is under 8.9 in fp8.py of 0.7.3-0.19.0, block FP8 too in 0.11.0; 0.7.3 runs
  block FP8 through its Triton kernel there): Marlin,
  which reads 8-bit weights and computes in 16-bit. No public Marlin FP8 timing exists for the
  calibrated GPUs (AIConfigurator measures vLLM's A100 GEMMs in BF16 alone), so a W8A16 GEMM is
  priced at its own roofline (1-byte weights, 16-bit activations, the BF16 rate) with the
  efficiency the GPU's measured BF16 GEMM reaches at the same shape (KernelPricer.gemm_s):
  Marlin's paper reports near-ideal speedups over FP16 up to batches of 16-32 tokens for 4-bit
  weights (Frantar et al., arXiv 2408.11743), i.e. the 16-bit kernel's bandwidth on fewer
  bytes. Marlin's MoE (routed experts in FP8 on such GPUs) is priced the same way from the
  measured BF16 expert kernel. TensorRT-LLM 1.0's A100 int8 weight-only GEMMs (AIConfigurator) take 0.63-0.73x the
  BF16 time at m <= 64 and n k >= 16M, slower than this; its plugin's fixed cost at small
  shapes (1.8x BF16) says it is not Marlin.
"""

from __future__ import annotations

import numpy as np

# The most a block-FP8 GEMM measured over the per-tensor FP8 op of the same shape at decode
# shapes: BLIS's DeepGEMM latency_us plus AIConfigurator's H100 vLLM 0.24 quantize tables
# (scale_matrix_perf + computescale_perf: a dynamic per-token quant) at the same (m, k), over
# the 0.19 H100 gemm_perf fp8 row at (m, n, k); 24 shapes with m <= 256: median 1.27,
# largest 1.40 (m = 128, k = 8,192: 33.0 + 4.0 us against 26.4 us).
BLOCK_OVER_TENSOR = 1.40


def w8a8_ceiling(seconds, bf16) -> np.ndarray:
    """A per-tensor FP8 GEMM on FP8 tensor cores (half the weight bytes at twice the rate) at
    most as the same shape in BF16 (`bf16`: a callable giving those seconds). Measured FP8
    linear ops slower than that carry their activations' quantisation as a kernel of its own
    (a fixed ~6 us at decode shapes: 13.7 against 7.4 us in BF16 at n=8192, k=1024 in
    TensorRT-LLM 1.3's H200 table), which the engines fuse into the norm or activation before
    the GEMM; real FP8 decodes run faster than such tables predict."""
    return np.minimum(seconds, bf16())


def block_ceiling(seconds, per_tensor) -> np.ndarray:
    """A block-FP8 GEMM on FP8 tensor cores at most BLOCK_OVER_TENSOR times the per-tensor FP8
    GEMM of the same shape (`per_tensor`: a callable giving those seconds)."""
    return np.minimum(seconds, BLOCK_OVER_TENSOR * per_tensor())
