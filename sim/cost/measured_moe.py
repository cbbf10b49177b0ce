"""MoE expert shapes a kernel table timed, priced at those timings.

The MoE surface (sim/calibrate/fitting.py) is one smooth function of every model's expert
shapes: 10-18% off a table's rows at the median (calibration/fit-report.md) and 15-35% over at
a few tokens on gpt-oss-120b's TP4 and TP8 slices of the H100's and H200's vLLM 0.24 tables,
which is most of a small decode step. A served model's experts are usually a shape some table
timed at every batch from one token to thousands, under the routing the cost model prices
(sim/cost/routing.py). Such a shape is priced at its table's time: interpolated in log tokens
and log time between the token counts measured, beyond them the surface's price scaled to meet
the nearest measurement, and never under the roofline. A shape no table timed keeps the surface.

Which kernel the tables stand for, where a release's own collection is missing (issue 43): vLLM
0.12.0 (read in its wheel) picks DeepGEMM for a block-FP8 MoE on Hopper below TP8 when DeepGEMM
is installed (quantization/fp8.py get_fp8_moe_backend; VLLM_USE_DEEP_GEMM and
VLLM_MOE_USE_DEEP_GEMM default to 1 in envs.py), yet fused_experts hands DeepGEMM only batches of
at least 128 tokens whose per-GPU expert slice is over 512 wide (fused_moe/deep_gemm_moe.py
_valid_deep_gemm): every decode step, and Qwen3-235B-A22B-FP8's TP4 prefill (384 wide), runs the
Triton fused_moe kernel with the tuned H200 configs E=128,N=768 (TP2) and N=384 (TP4)
(fused_moe/configs, byte-identical in 0.14.0), whose blocks past the batch's padded token count
return before loading an expert (fused_moe_kernel): only the experts a batch routes to are read.
AIConfigurator's H200 vLLM 0.14 collection (kernel_source vllm_fused_moe) times that kernel; its
0.19 and 0.24 collections (vllm_fp8moe_triton_tritonexperts) agree within 8% at every token count
(tests/test_measured_moe.py), so vLLM 0.12 is priced at the 0.14 table.

The curves travel in each family of the GPU's profile (`moe_measured`: the family's token grid
and, per shape `dtype|hidden|inter|topk|experts` with `inter` one GPU's slice, float32 seconds
at each grid point, NaN where not timed, base64), written by `python -m sim.calibrate`
(sim/calibrate/gpu.py). A pricer reads its own family's first, then its lookup order's others
(sim/cost/profiles.py), as for the surfaces.
"""

from __future__ import annotations

import base64

import numpy as np


def shape_key(dtype, hidden, inter, topk, experts) -> str:
    return f"{dtype}|{float(hidden):.6g}|{float(inter):.6g}|{float(topk):.6g}|{float(experts):.6g}"


class MeasuredExperts:
    """The curves of one pricer's families, the first family's where two timed a shape."""

    def __init__(self, tables: list[dict]):
        self._encoded: dict[str, tuple[np.ndarray, str]] = {}
        for table in tables:
            grid = np.log2(np.asarray(table.get("tokens", []), dtype=np.float64))
            for key, blob in table.get("curves", {}).items():
                self._encoded.setdefault(key, (grid, blob))
        self._curves: dict[str, tuple[np.ndarray, np.ndarray] | None] = {}

    def __bool__(self) -> bool:
        return bool(self._encoded)

    def curve(self, key: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(log2 tokens, log seconds) of a measured shape, or None."""
        if key not in self._curves:
            found = self._encoded.get(key)
            if found is None:
                self._curves[key] = None
            else:
                grid, blob = found
                values = np.frombuffer(base64.b64decode(blob), dtype="<f4").astype(np.float64)
                ok = np.isfinite(values) & (values > 0)
                self._curves[key] = (grid[ok], np.log(values[ok]))
        return self._curves[key]

    def apply(self, priced, roof, tokens, shape: tuple, dtype: str, surface_at) -> tuple:
        """`priced` (the surface's seconds of routed experts at `tokens`, with `shape` =
        (hidden, inter, topk, experts), scalars or arrays alike) with the timed shapes' rows at
        their table's time (module docstring); `surface_at(tokens, *one_shape)` prices one
        shape by the surface (for the edges). Returns (seconds, whether any row was timed)."""
        arrays = (np.asarray(v, dtype=np.float64) for v in (tokens, *shape, priced, roof))
        tokens, *shape, priced, roof = np.broadcast_arrays(*arrays)
        out = priced.copy()
        flat = np.stack([c.ravel() for c in shape], 1)
        hit = False
        for one in np.unique(flat, axis=0):
            at = np.all(flat == one, axis=1).reshape(tokens.shape)
            found = self.curve(shape_key(dtype, *one))
            if found is None:
                continue
            hit = True
            out[at] = self._timed(found, tokens[at], priced[at], roof[at], one, surface_at)
        return out, hit

    @staticmethod
    def _timed(found, tokens, priced, roof, one, surface_at) -> np.ndarray:
        x, y = found
        t = np.log2(np.maximum(tokens, 1e-9))
        timed = np.exp(np.interp(t, x, y))
        for edge, beyond in ((0, t < x[0]), (-1, t > x[-1])):
            if beyond.any():
                at_edge = float(np.asarray(surface_at(np.array([2.0 ** x[edge]]), *one)).ravel()[0])
                timed = np.where(beyond, priced * np.exp(y[edge]) / at_edge, timed)
        return np.maximum(timed, roof)
