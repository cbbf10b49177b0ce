"""Which kernel vLLM runs MXFP4 experts with on a GPU, by release, and how it pads their
weights for it: an engine fact that the cost model (sim/cost/mxfp4.py, Marlin's rate) and the
memory plan (sim/kv/memory.py, the loaded weight bytes) both follow.

**The kernel.** `get_mxfp4_backend` (model_executor/layers/quantization/mxfp4.py, read in the
0.11.0, 0.12.0, 0.14.0 and 0.18.0 wheels, `pip download vllm==X --no-deps`): below SM100,
FlashInfer's MXFP4 MoE runs only when asked for (VLLM_USE_FLASHINFER_MOE_MXFP4_BF16, off by
default); otherwise the OpenAI Triton kernels (`matmul_ogs`) where the `triton_kernels` package
imports, else Marlin. The 0.10-0.11 wheels do not carry that package and `pip install vllm`
does not install it, so Marlin runs on SM80-SM90 (vLLM 0.10.1 on an H100 logged Marlin's FP4
warning and its padded weights: vllm-project/vllm#23278); from 0.12.0 the wheel vendors it
(vllm/third_party/triton_kernels) and takes it on SM90-SM100 only, so Hopper runs Triton and
Ampere / Ada keep Marlin.

**The padding.** `Mxfp4MoEMethod.create_weights` (0.11.0, 0.18.0) pads each expert's
intermediate size (per TP rank) and the hidden size to the kernel's tiles: Marlin to multiples
of 128 and 256 (its n % 256 and k % 128), the Triton path the intermediate size alone to a
multiple of 64; SM100's FlashInfer paths (256 / 256) are not modelled.
"""

from __future__ import annotations

from sim.engines.versions import version_tuple
from sim.specs.hardware import Hardware

VENDORED_FROM = (0, 12, 0)  # the wheel carries triton_kernels (vllm/third_party/)
PADDING = {"marlin": (128, 256), "triton": (64, 1)}  # kernel -> (intermediate, hidden) multiples


def mxfp4_moe_kernel(engine: str, release: str, hardware: Hardware) -> tuple[str, str]:
    """(kernel, rule) of vLLM's MXFP4 experts on `hardware`: "marlin", "triton" (OpenAI's
    triton_kernels) or "other" (FlashInfer on SM100, other vendors, other engines)."""
    if engine != "vllm" or hardware.vendor != "nvidia":
        return "other", f"{engine} on {hardware.name}: not vLLM's CUDA MXFP4 selection"
    major, minor = (int(x) for x in hardware.compute_capability.split(".")[:2])
    at = f"vllm {release}, compute capability {hardware.compute_capability}"
    if major == 10:
        return "other", f"{at}: FlashInfer's MXFP4 MoE (SM100)"
    if version_tuple(release) >= VENDORED_FROM:
        if (9, 0) <= (major, minor) < (11, 0):
            return "triton", f"{at}: triton_kernels vendored in the wheel (0.12.0 on), SM90"
        return "marlin", f"{at}: triton_kernels taken on SM90-SM100 only -> Marlin"
    return "marlin", f"{at}: triton_kernels not installed with the 0.10-0.11 wheels -> Marlin"
