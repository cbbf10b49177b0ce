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
  at most as the same shape in BF16 (KernelPricer.gemm_s): measured FP8 linear ops slower than
  that carry their activations' quantisation as a kernel of its own (a fixed ~6 us at decode
  shapes: 13.7 against 7.4 us in BF16 at n=8192, k=1024 in TensorRT-LLM 1.3's H200 table),
  which the engines fuse into the norm or activation before the GEMM.
- **Block FP8 (W8A8, 128 x 128 weight blocks, 1 x 128 activation groups) on Hopper**: DeepGEMM's
  `fp8_gemm_nt` where DeepGEMM is installed (0.11.0-0.19.0: `should_use_deepgemm_for_fp8_linear`
  in utils/deep_gemm.py, VLLM_USE_DEEP_GEMM on by default in envs.py), else CUTLASS's blockwise
  sm90 kernel; FlashInfer below m = 32 and DeepGEMM above in 0.24 (AIConfigurator's
  kernel_source). Each runs after a per-token-group quantisation kernel of its own (the CUDA
  op, which vLLM 0.12+ turns on for blocked weights, `+quant_fp8` in config/vllm.py). Of
  AIConfigurator's vLLM collections only 0.19's times that op as GPU time at decode shapes
  (m <= 256, n k >= 4M: 1.6-1.8x its per-tensor table, DeepGEMM forced by its collector's
  VLLM_USE_DEEP_GEMM=1): 0.18, 0.22 and 0.24 put nine such shapes in ten at 52 us or more (host
  launch gaps of eager timing, a median 3.5-4.7x the 0.19 per-tensor table; AIConfigurator's
  vLLM 0.25 collection excludes "old FP8-block GEMM donors measured eagerly with host launch
  gaps" and its collector refuses eager block-FP8 rows, ai-dynamo/aisimulate@1f29ee4
  python/aisimulate/src/aiconfigurator_core/systems/data/h100_sxm/vllm-0.25.0-collection.md and
  @02c310b python/aisimulate/collector/vllm/collect_gemm.py), 0.14 2.5-2.8x. The kernel's own
  time is public and sits under the 0.19 op: BLIS's DeepGEMM table on the H100
  (inference-sim/inference-sim@9da997863bc8818aa80372aa9e03961187a0e677
  bench_data/gemm/h100/data.csv, DeepGEMM's FP8 GEMM timed alone by InferSim's
  kernel_benchmark/deepgemm_gemm.py) plus vLLM's measured dynamic per-token quant
  (AIConfigurator's H100 quantize tables, 2.6-4.0 us for m <= 256) takes 1.15-1.40x the 0.19
  per-tensor op for m <= 256 (24 shapes, k 2,048-8,192, n 6,144), the 0.19 block op -0.9 to
  5.0 us more, median 3.6 (what else the op launches). So a vLLM release's block-FP8 GEMM is
  priced as the faster of its own collection's and the 0.19 collection's (BLOCK_REFERENCE,
  KernelPricer.gemm_s): each is an upper bound on the same kernel class, host gaps and unfused
  quantisation only adding time; the later collections stand at large m (DeepGEMM at 1,196
  TF/s in 0.24 on the H200, 944 in 0.19). On the visible rows (vLLM block FP8 on Hopper, TPOT
  median |error|): Qwen3-235B-A22B-FP8 on the H200 under 0.12 (38 silicon rows) 9.8% -> 10.6%,
  on the H100 under 0.11 (GPUStack, 3) 36.1% -> 15.3%, DeepSeek-R1 on the H200 under 0.11 (4)
  33.4% -> 2.9%, DeepSeek-V3.2 under 0.13 (4) 28.8% -> 18.8%; a ceiling at BLIS's
  kernel-plus-quant relation (1.40x per-tensor) gave 17.4%, 10.9%, 4.4% and 12.5%:
  under-predicted on the 38 rows.
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
  measured BF16 expert kernel. TensorRT-LLM 1.0's A100 int8 weight-only GEMMs
  (AIConfigurator) take 0.63-0.73x the BF16 time at m <= 64 and n k >= 16M, slower than this;
  its plugin's fixed cost at small shapes (1.8x BF16) says it is not Marlin.
"""

from __future__ import annotations

# The collection whose block-FP8 GEMMs at decode shapes are GPU time (see above), by engine,
# and the prefix of the key its surface takes in another family's pricer.
BLOCK_REFERENCE = {"vllm": "vllm@0.19.0"}
REFERENCE = "reference"
