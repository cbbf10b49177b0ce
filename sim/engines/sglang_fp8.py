"""SGLang's block-FP8 linear layers, release by release: which kernel runs them on the GPU and
whether its kernels compile while serving (the `fp8_gemm_backend` and `jit_first_use` settings).

Read from the wheels (`pip download sglang==X --no-deps`), srt/layers/quantization/fp8_utils.py
(`apply_w8a8_block_fp8_linear`, `cutlass_block_fp8_supported`), fp8_kernel.py
(`w8a8_block_fp8_matmul`), deep_gemm.py (0.4.5.post3 on) and model_executor/model_runner.py;
DeepGEMM itself ships inside sgl-kernel (fp8_kernel.py: `import deep_gemm  # pip install
"sgl-kernel>=0.0.4.post3"`; no DeepGEMM among the wheels' Requires-Dist, sgl-kernel is):

- 0.4.1 .. 0.4.2.post4: Triton's `w8a8_block_fp8_matmul` (0.4.0 has no block FP8).
- 0.4.3 .. 0.4.3.post2: sgl-kernel's CUTLASS `fp8_blockwise_scaled_mm` when the GPU is SM90 or
  later and torch's CUDA is 12.0 or later (`cutlass_block_fp8_supported`), else Triton.
- 0.4.3.post3 .. 0.4.4.post1: Triton; CUTLASS only with SUPPORT_CUTLASS_BLOCK_FP8 set, DeepGEMM
  (0.4.4, 0.4.4.post1) only with SGL_ENABLE_JIT_DEEPGEMM=1 (its default "0"). The same release
  turns schedule_policy's default from lpm to fcfs (server_args.py).
- 0.4.4.post2 .. 0.4.5 (sgl-kernel 0.0.5.post3 .. 0.0.8): DeepGEMM's
  `gemm_fp8_fp8_bf16_nt` by default on SM90 and later (SGL_ENABLE_JIT_DEEPGEMM default "1",
  then "true"; sgl-project/sglang#4613 turned it on): DeepGEMM compiles each kernel
  configuration with NVCC the first time a GEMM needs it, and nothing compiles them ahead:
  the CUDA-graph capture and the server's warm-up request at start-up compile the
  configurations of their own token counts, a benchmark's longer prefills the rest, inside
  its measured window (sgl-project/sglang#5396: 8 x H20 141 GB, DeepSeek-V3-0324, 0.4.3 -> 0.4.5,
  16 prompts, input throughput 652 -> 198 tok/s; #4773: "how slow the DeepGEMM JIT compilation
  was").
- 0.4.5.post1 .. 0.4.5.post3: DeepGEMM off by default again (SGL_ENABLE_JIT_DEEPGEMM default
  "false", SM90 only; sgl-project/sglang#5263 "Turn off DeepGEMM by default", 2025-04-11,
  after #5223's regression report; the issue also names #5310, not found in the search
  corpus), so Triton. 0.4.5.post3 adds deep_gemm.py's pre-compilation (sgl-project/sglang#5580),
  used only when DeepGEMM is turned on.
- 0.4.6 .. 0.4.7: DeepGEMM on by default on SM90 (deep_gemm.py `sm_version == 90`, default
  "true"; sgl-project/sglang#5628, after #5580) with the pre-compilation: the first use of a
  GEMM's (N, K) compiles every configuration of M = 1 .. max(16384, 2 x chunked_prefill_size)
  (`_maybe_compile_deep_gemm_one_type_all`, SGL_JIT_DEEPGEMM_PRECOMPILE default true), and
  that first use is the CUDA-graph capture at start-up: nothing compiles inside a benchmark.
- 0.4.7.post1 on (deep_gemm_wrapper/configurer.py `sm_version < 90` -> off, read in 0.4.7.post1,
  0.4.8, 0.4.9, 0.4.10, 0.5.0rc0, 0.5.0rc2, 0.5.1.post1, 0.5.2, 0.5.3rc2, 0.5.9; 0.5.3
  srt/environ.py SGLANG_ENABLE_JIT_DEEPGEMM EnvBool(True)): on SM90 and later, pre-compiled at
  start-up as above; but 0.5.1 alone turns it off on every GPU but SM90 (`sm_version != 90`).
The MoE experts run Triton's fused_moe in every one of these releases unless expert
parallelism (DeepEP) is on; only the dense linear layers take this path.
"""

from __future__ import annotations

from sim.engines.versions import release_key
from sim.specs.hardware import Hardware

CUTLASS_FROM = "0.4.3"
TRITON_AGAIN_FROM = "0.4.3.post3"
DEEPGEMM_JIT_FROM = "0.4.4.post2"
DEEPGEMM_OFF_FROM = "0.4.5.post1"
PRECOMPILED_FROM = "0.4.6"
ANY_HOPPER_OR_LATER_FROM = "0.4.7.post1"  # deep_gemm_wrapper/configurer.py: sm_version < 90 off
HOPPER_ONLY_AGAIN = ("0.5.1",)  # 0.5.1's configurer.py: sm_version != 90 off; 0.5.1.post1 < 90
FCFS_FROM = TRITON_AGAIN_FROM  # schedule_policy's default turns from lpm to fcfs


def fp8_gemm(release: str, hw: Hardware) -> tuple[str, bool, str, str]:
    """(fp8_gemm_backend, jit_first_use, the rule of each) of SGLang `release` on `hw`."""
    at = f"sglang {release}"
    key = release_key(release)
    major = hw.sm_major
    gpu = f"{hw.name} (SM{hw.compute_capability.replace('.', '')})"
    aot = f"{at}: no JIT kernels in the block-FP8 GEMM path"

    def before(release_from: str) -> bool:
        return key < release_key(release_from)

    if before(CUTLASS_FROM):
        return "triton", False, f"{at}: Triton w8a8_block_fp8_matmul (fp8_utils.py)", aot
    if before(TRITON_AGAIN_FROM):
        if major >= 9:
            why = f"{at}: sgl-kernel CUTLASS fp8_blockwise_scaled_mm on {gpu}, CUDA >= 12.0"
            return "cutlass", False, why + " (fp8_utils.py cutlass_block_fp8_supported)", aot
        return "triton", False, f"{at}: Triton w8a8_block_fp8_matmul below SM90", aot
    if before(DEEPGEMM_JIT_FROM):
        why = f"{at}: Triton w8a8_block_fp8_matmul (CUTLASS and DeepGEMM opt-in by env var)"
        return "triton", False, why, aot
    if before(DEEPGEMM_OFF_FROM):
        if major >= 9:
            why = f"{at}: DeepGEMM on {gpu} (SGL_ENABLE_JIT_DEEPGEMM default on, fp8_kernel.py)"
            jit = (
                f"{at}: DeepGEMM compiles each kernel configuration at its first use while "
                "serving; nothing pre-compiles them (sglang#4773, #5396)"
            )
            return "deepgemm", True, why, jit
        return "triton", False, f"{at}: Triton w8a8_block_fp8_matmul below SM90", aot
    if before(PRECOMPILED_FROM):
        why = f"{at}: Triton (SGL_ENABLE_JIT_DEEPGEMM default off, sglang#5263)"
        return "triton", False, why, aot
    any_sm90_on = not before(ANY_HOPPER_OR_LATER_FROM) and release not in HOPPER_ONLY_AGAIN
    on = major == 9 or (major >= 9 and any_sm90_on)
    if on:
        why = f"{at}: DeepGEMM on {gpu} (SGL_ENABLE_JIT_DEEPGEMM default on, sglang#5628)"
        pre = (
            f"{at}: DeepGEMM pre-compiles every M of each GEMM shape at start-up "
            "(deep_gemm.py, SGL_JIT_DEEPGEMM_PRECOMPILE on)"
        )
        return "deepgemm", False, why, pre
    return "triton", False, f"{at}: Triton w8a8_block_fp8_matmul on {gpu}", aot


def policy(release: str) -> tuple[str, str]:
    """schedule_policy's default: lpm until 0.4.3.post2, fcfs from 0.4.3.post3."""
    if release_key(release) < release_key(FCFS_FROM):
        return "lpm", f"sglang {release}: schedule_policy lpm"
    return "fcfs", f"sglang {release}: schedule_policy fcfs (from {FCFS_FROM}, server_args.py)"
