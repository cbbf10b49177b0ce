"""First-use costs: the host time a step spends compiling a GPU kernel the first time it needs it
(issue 44, item 3). A replica's tally of what it has compiled, charged to the step that first
runs a new kernel configuration.

Modelled where a release compiles inside serving (`jit_first_use`, sim/engines/sglang_fp8.py):
SGLang 0.4.4.post2 .. 0.4.5 run a block-FP8 checkpoint's dense linear layers on Hopper with
DeepGEMM, which JIT-compiles one kernel per configuration (`jit_tuner.compile_and_tune`, keyed by
N, K, BLOCK_M, BLOCK_N, the pipeline stages and the TMA multicast) the first time a GEMM needs it.
The configuration follows from (M, N, K) and the GPU's SM count by DeepGEMM's `get_best_configs`
(deepseek-ai/DeepGEMM@25db8de, 2025-03-25, deep_gemm/jit_kernels/gemm.py; the DeepGEMM that
sgl-kernel 0.0.5.post3 .. 0.0.8 shipped in March-April 2025, submodule commit not read):
BLOCK_M 64 up to M = 64, else 128; BLOCK_N of 16..128 step 8, 144, 160, the fewest waves of
tiles over the SMs, then the fullest last wave, then the smaller BLOCK_N; the most stages of
8..4 whose shared memory fits 232,448 bytes (4 when BLOCK_N does not divide 128 and
128 / gcd(128, BLOCK_N) <= 4); a 2-way TMA multicast from M = 512 where the tiles divide.
Each compile takes COMPILE_S: DeepGEMM's NVCC compile before its JIT refactor, 5.95-6.43 s per
kernel over the 13 shapes deepseek-ai/DeepGEMM#94 timed (median 6.06 s, Xeon 8480C + H100;
the refactor cut it ~60%). Every TP rank compiles the same kernels at the same time
(sgl-project/sglang#5031's log: all eight ranks print "DeepGEMM JIT code generation" in the same
second), so a replica loses one compile's time per configuration, not tp of them.

Start-up compiles what it runs (so no benchmark pays for it): the CUDA-graph capture of every
decode batch size and the server's warm-up request (http_server.py `_wait_and_warmup`: "The
capital city of France is", 8 new tokens). A step inside the captured graphs therefore never
compiles; a prefill or mixed step runs eagerly at M = its tokens and pays for each configuration
no earlier step of the replica compiled. The benchmark's own warm-up requests
(`workload.warmup_requests`) run through the same replica first, so what they compile is not
paid again in the measured window. The compile is host time on the step's critical path: it
lengthens the step (its CPU time) and adds no GPU time, so the physics audit's roofline checks
(GPU time per step) see the same kernels as without it.

Not modelled, for want of evidence that a benchmark pays them in its window: Triton's compile of
the fused-MoE and w8a8 block kernels (their configurations come from a table by M, or one
default, and the start-up's graph capture and warm-up request compile them), FlashInfer's
autotune and torch.compile (off by default in these releases).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sim.engines.settings import EngineSettings
from sim.specs.hardware import Hardware

COMPILE_S = 6.06  # seconds per DeepGEMM kernel compile (deepseek-ai/DeepGEMM#94, baseline)
SOURCE = "deepseek-ai/DeepGEMM#94: NVCC 5.95-6.43 s per kernel before the JIT refactor"
WARMUP_PROMPT_TOKENS = 7  # the server's warm-up prompt (well inside BLOCK_M 64's range)
SMEM_BYTES = 232448  # an SM90 block's shared memory (DeepGEMM's sm90_capacity)
BLOCK_NS = (*range(16, 129, 8), 144, 160)
STAGES = (8, 7, 6, 5, 4)
MULTICAST_FROM_M = 512


def deepgemm_kernel(m: int, n: int, k: int, num_sms: int) -> tuple[int, ...]:
    """The kernel DeepGEMM's JIT compiles for an (m, n, k) GEMM on `num_sms` SMs: its cache key
    (N, K, BLOCK_M, BLOCK_N, stages, multicast, multicast on A)."""
    block_m = 64 if m <= 64 else 128

    def tiles(bn: int) -> int:
        return math.ceil(m / block_m) * math.ceil(n / bn)

    def rank(bn: int):  # fewer waves, then a fuller last wave, then the smaller block
        waves = math.ceil(tiles(bn) / num_sms)
        last = tiles(bn) % num_sms or num_sms
        return (waves, -last, bn)

    block_n = min(BLOCK_NS, key=rank)
    candidates = STAGES
    if 128 % block_n and 128 // math.gcd(128, block_n) <= 4:
        candidates = (4,)
    stages = next(s for s in candidates if _smem(s, k, block_m, block_n) <= SMEM_BYTES)
    multicast, on_a = 1, True
    if m >= MULTICAST_FROM_M:
        legal = {
            "A": n % (block_n * 2) == 0 and num_sms % 2 == 0,
            "B": m % (block_m * 2) == 0 and num_sms % 2 == 0,
        }
        for side in ("A", "B") if block_m > block_n else ("B", "A"):
            if legal[side]:
                multicast, on_a = 2, side == "A"
                break
    return (n, k, block_m, block_n, stages, multicast, on_a)


def _smem(stages: int, k: int, block_m: int, block_n: int, block_k: int = 128) -> int:
    """Shared memory of a DeepGEMM kernel: output tile, per-stage A, B and A's scales, B's
    scales for the whole K, barriers."""
    scales_b = math.ceil(k / block_k) * 4 * (1 if block_k % block_n == 0 else 2)
    return (
        block_m * block_n * 2
        + stages * (block_m * block_k + block_m * 4 + block_n * block_k)
        + math.ceil(scales_b / 8) * 8
        + stages * 16
    )


@dataclass(slots=True)
class FirstUse:
    """One replica's compiled kernels and what compiling the new ones cost, step by step."""

    shapes: tuple[tuple[int, int], ...]  # (N, K) of each block-FP8 GEMM the model runs
    num_sms: int
    graph_max: int  # the largest decode batch captured as a CUDA graph (0: none)
    compile_s: float = COMPILE_S
    compiled: set = field(default_factory=set)
    seen_m: set = field(default_factory=set)  # token counts whose kernels are all compiled
    events: list = field(default_factory=list)  # (step start, kernels compiled, seconds)

    @classmethod
    def of(cls, settings: EngineSettings, hw: Hardware, terms, dense_dtype: str):
        """The tally of a replica, or None where its release compiles nothing while serving:
        `terms`, the cost model's layer terms (sim/cost/step.py _LayerTerms)."""
        if not settings.jit_first_use or dense_dtype != "fp8_block":
            return None
        shapes = tuple(sorted(set(block_fp8_gemms(terms))))
        sizes = settings.cudagraph_capture_sizes if settings.cudagraph_mode != "NONE" else ()
        tally = cls(shapes, hw.sm_count, max(sizes, default=0))
        for m in (*sizes, WARMUP_PROMPT_TOKENS, 1):  # start-up: graph capture, warm-up request
            tally._new(m)
        return tally

    def _new(self, m: int) -> int:
        """Mark the kernels a GEMM pass of m tokens runs as compiled; how many were new."""
        before = len(self.compiled)
        self.seen_m.add(m)
        self.compiled.update(deepgemm_kernel(m, n, k, self.num_sms) for n, k in self.shapes)
        return len(self.compiled) - before

    def charge(self, tokens: int, decode_only: bool, start_s: float) -> float:
        """Seconds of compiling a step of `tokens` tokens adds (0 inside the captured graphs)."""
        if tokens < 1 or tokens in self.seen_m or (decode_only and tokens <= self.graph_max):
            return 0.0  # (a token count run before needs no kernel it did not compile then)
        new = self._new(tokens)
        if not new:
            return 0.0
        seconds = new * self.compile_s
        self.events.append((start_s, new, seconds))
        return seconds


def block_fp8_gemms(terms) -> list[tuple[int, int]]:
    """(N, K) of the block-FP8 linear layers of each layer term: every dense GEMM but an MoE
    layer's router, which CostModel._terms lists last and SGLang runs in BF16 (MoEGate)."""
    out = []
    for term in terms:
        pairs = list(zip(term.gemm_n.tolist(), term.gemm_k.tolist(), strict=True))
        out += [(int(n), int(k)) for n, k in (pairs[:-1] if term.layer.moe else pairs)]
    return out


def first_use_record(tallies: list[FirstUse | None], window_start_s: float) -> dict | None:
    """summary.json sim.first_use: kernels compiled while serving and their seconds, over the
    replicas, and how many of those seconds fall in the measured window (steps starting at or
    after its first request's arrival). None where nothing compiles while serving."""
    live = [t for t in tallies if t is not None]
    if not live:
        return None
    events = [e for t in live for e in t.events]
    return {
        "kernel": "DeepGEMM gemm_fp8_fp8_bf16_nt (JIT, first use of each configuration)",
        "compiles": sum(e[1] for e in events),
        "seconds": round(sum(e[2] for e in events), 6),
        "paid_in_window": round(sum(e[2] for e in events if e[0] >= window_start_s), 6),
        "compiles_in_window": sum(e[1] for e in events if e[0] >= window_start_s),
        "compile_s": live[0].compile_s,
        "source": SOURCE,
    }
