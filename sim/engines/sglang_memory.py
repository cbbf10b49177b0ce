"""SGLang's GPU-memory defaults by release: chunked_prefill_size, the largest CUDA-graph batch and
mem_fraction_static, as ServerArgs derives them from the GPU's memory (the MiB nvidia-smi
reports: H100-SXM 81559, H200 143771), the TP size and the two others.

Read from each release's srt/server_args.py and model_executor/cuda_graph_runner.py
(`pip download sglang==X --no-deps`):
- 0.3.0-0.3.5.post1: chunk 8192 and graphs up to 160 on every GPU; mem_fraction_static by TP.
- 0.3.5.post2 (wheel, server_args.py): below 25,000 MiB chunk // 4 = 2048 and graphs to 4.
- 0.3.6, 0.4.0 .. 0.4.6: below 25,000 MiB chunk 2048 and small graphs (4; 8 from 0.4.0; 80 at
  TP >= 4 from 0.4.0.post1: the 0.4.0 and 0.4.0.post1 wheels' server_args.py); mem_fraction_static
  by TP (0.82 at TP 8 in 0.3.6, 0.81 from 0.4.0); from 0.4.5.post3 (wheel: server_args.py,
  cuda_graph_runner.py) up to 81,920 MiB, (memory - 13 GiB) / memory and graphs to 256 above.
- 0.4.6.post2 .. 0.4.6.post5 (0.4.6.post2 and post5 wheels): the table by TP x PP up to 81,920
  MiB; above it 0.88, and above 96 GiB min(0.88 + 48 GiB x 0.12 / memory, (memory - 18 GiB) /
  memory); graphs to 256 above 96 GiB only (cuda_graph_runner.py).
- 0.4.7 (wheel): the same, and 0.79 above 180,000 MiB; chunk 16384 above 180,000 MiB; graphs to
  512 above 180,000 MiB.
- 0.4.7.post1 .. 0.5.2 (read in 0.4.7.post1, 0.4.8, 0.5.1.post1 and 0.5.2):
  mem_fraction_static = (memory - reserve) / memory, the reserve fixed by GPU size: (2.8 + TP x
  PP / 10) GiB below 35 GiB, (9.5 + TP x PP / 2) GiB below 90 GiB, (12 + TP x PP / 2) GiB below
  160 GiB, 32 GiB above;
  chunk 2048 below 35 GiB, 8192 below 160 GiB, 16384 above; cuda_graph_max_bs unset (8 or 80
  below 35 GiB), so cuda_graph_runner.py's sizes: 1, 2, 4, 8, 16..160 step 8, then 168..256
  above 90 GiB and 272..512 step 16 above 160,000 MiB.
- 0.5.3 on (read in 0.5.3, 0.5.6, 0.5.6.post2, 0.5.8.post1, 0.5.9: _handle_gpu_memory_settings):
  chunk and cuda_graph_max_bs by GPU tier, then reserve = 512 MiB + 1.5 x max(chunk, 2048) MiB
  + 2 x cuda_graph_max_bs MiB + TP x PP / 8 GiB, at least 10 GiB above 60 GiB; the capture
  sizes are 1, 2, 4, 8, 12, 16..256 step 8, 272..496 step 16, 512.. step 32. Below 35 GiB at
  TP < 4 the graphs stop at 16 (0.5.3), 24 (0.5.4.post1-0.5.10.post1, read in the 0.5.4.post1
  wheel; 80 at TP >= 4), 48 (from 0.5.20,
  160 at TP >= 4, chunk 4096; srt/arg_groups/memory_hook.py, read in the 0.5.19-0.5.23 wheels:
  0.5.19 keeps 2048 / 24 / 80). Piecewise CUDA graphs are off by
  default through 0.5.9 (enable_piecewise_cuda_graph False) and on from 0.5.10
  (disable_piecewise_cuda_graph False): 8 MiB more per captured token count, 1.5 GiB for an MLA
  backend (read in 0.5.10 and 0.5.10.post1; 0.5.23's memory_hook.py reserves the same).
The family interface passes the TP size alone: PP is taken as 1.
"""

from __future__ import annotations

from sim.engines.versions import release_key, version_tuple

CAPTURE_MAX = 160
GIB = 1024  # MiB
TIERS_FROM = "0.3.5.post2"  # below 25,000 MiB: chunk // 4, graphs to 4
BIG_GPU_FROM = "0.4.5.post3"  # above 81,920 MiB: (memory - 13 GiB) / memory, graphs to 256
OVER_96_FROM = "0.4.6.post2"  # 0.88 above 81,920 MiB, the 96 GiB tier of fraction and graphs
RESERVE_FROM = "0.4.7.post1"  # (memory - reserve) / memory, chunk by 35 / 160 GiB
GRAPHS_24_FROM = "0.5.4.post1"  # 20-35 GiB at TP < 4: graphs to 24, not 16 (server_args.py)
MEM_FRACTION_BY_TP = {  # 0.3.0-0.3.5, 0.3.6, and 0.4.0 on on GPUs of 80 GiB or less
    "0.3.0": ((16, 0.79), (8, 0.83), (4, 0.85), (2, 0.87), (1, 0.88)),
    "0.3.6": ((16, 0.79), (8, 0.82), (4, 0.85), (2, 0.87), (1, 0.88)),
    "0.4.6": ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88)),  # from 0.4.0
}
FIXED_RESERVE = (  # 0.4.7.post1-0.5.2: (below GiB, reserve GiB at parallel size 0, GiB per GPU)
    (35, 2.8, 0.1),
    (90, 9.5, 0.5),
    (160, 12.0, 0.5),
)
BIG_GPU_RESERVE_GIB = 32  # 0.4.7.post1-0.5.2, 160 GiB and above
MIN_RESERVE_MIB = 10 * GIB  # 0.5.3 on, GPUs above 60 GiB


def _before(release: str, start: str) -> bool:
    return release_key(release) < release_key(start)


def chunk_and_graph_bs(release: str, mem_mib: float, tp: int) -> tuple[int, int, str]:
    """(chunked_prefill_size, cuda_graph_max_bs, rule) of SGLang `release`."""
    v = version_tuple(release)
    gib = mem_mib / GIB
    if _before(release, TIERS_FROM):  # server_args.py: 8192 and cuda_graph_runner.py's 1..160
        return 8192, CAPTURE_MAX, f"the same on every GPU (memory tiers arrive in {TIERS_FROM})"
    if _before(release, RESERVE_FROM):
        if mem_mib < 25000:
            if _before(release, "0.4.0"):
                return 2048, 4, f"GPU memory {mem_mib:.0f} MiB < 25000: chunk // 4, graphs to 4"
            bs = 8 if tp < 4 or _before(release, "0.4.0.post1") else 80
            return 2048, bs, f"GPU memory {mem_mib:.0f} MiB < 25000 (server_args.py)"
        if not _before(release, "0.4.7"):  # graphs 168..256 above 96 GiB, 272..512 above 180,000
            chunk = 16384 if mem_mib > 180000 else 8192
            bs = 512 if mem_mib > 180000 else 256 if mem_mib > 96 * GIB else CAPTURE_MAX
            return chunk, bs, f"GPU memory {mem_mib:.0f} MiB (tiers at 96 GiB and 180,000 MiB)"
        if not _before(release, OVER_96_FROM):  # cuda_graph_runner.py: 168..256 above 96 GiB
            bs = 256 if mem_mib > 96 * GIB else CAPTURE_MAX
            return 8192, bs, f"GPU memory {mem_mib:.0f} MiB >= 25000 (graphs to 256 above 96 GiB)"
        bs = 256 if not _before(release, BIG_GPU_FROM) and mem_mib > 81920 else CAPTURE_MAX
        return 8192, bs, f"GPU memory {mem_mib:.0f} MiB >= 25000"
    if v < (0, 5, 3):
        if gib < 35:
            return 2048, 8 if tp < 4 else 80, f"GPU memory {gib:.0f} GiB < 35"
        chunk = 8192 if gib < 160 else 16384
        bs = 512 if mem_mib > 160000 else 256 if gib > 90 else CAPTURE_MAX
        rule = (
            f"GPU memory {gib:.0f} GiB: chunk {chunk}; cuda_graph_runner.py's default sizes "
            f"up to {bs} (160; 256 above 90 GiB; 512 above 160,000 MiB)"
        )
        return chunk, bs, rule
    newest = v >= (0, 5, 20)  # srt/arg_groups/memory_hook.py: chunk 4096, graphs 48 / 160
    small_bs = 16 if _before(release, GRAPHS_24_FROM) else 48 if newest else 24
    tiers = (  # (below GiB, chunk, graph bs at tp < 4, at tp >= 4)
        (20, 2048, 8, 8),
        (35, 4096 if newest else 2048, small_bs, 160 if newest else 80),
        (60, 4096, 32, 160),
        (160, 8192, 256, 512),
    )
    for below, chunk, bs_small, bs_big in tiers:
        if gib < below:
            return chunk, bs_small if tp < 4 else bs_big, f"GPU memory {gib:.0f} GiB < {below}"
    return 16384, 512, f"GPU memory {gib:.0f} GiB >= 160"


def mem_fraction(
    release: str,
    mem_mib: float,
    tp: int,
    chunk: int,
    graph_bs: int,
    mla: bool = False,
    cuda: bool = True,
) -> tuple[float, str]:
    """(mem_fraction_static, why) of SGLang `release`, by GPU memory, TP, the two derived sizes and
    whether the model runs an MLA attention backend."""
    v = version_tuple(release)
    if not _before(release, OVER_96_FROM) and _before(release, RESERVE_FROM) and mem_mib > 81920:
        over_180k = cuda and not _before(release, "0.4.7")  # `gpu_mem > 180 * 1000 and is_cuda()`
        return _mem_fraction_047(mem_mib, tp, over_180k)
    if _before(release, RESERVE_FROM):
        if not _before(release, BIG_GPU_FROM) and mem_mib > 81920:
            return round((mem_mib - 13 * GIB) / mem_mib, 3), "(GPU memory - 13 GiB) / GPU memory"
        line = "0.3.0" if v < (0, 3, 6) else "0.3.6" if v < (0, 4, 0) else "0.4.6"
        table = MEM_FRACTION_BY_TP[line]
        frac = next(f for t, f in table if tp >= t)
        return frac, f"by TP {tp}"
    if v < (0, 5, 3):
        gib = mem_mib / GIB
        tier = next((t for t in FIXED_RESERVE if gib < t[0]), None)
        if tier is None:
            reserve_gib, how = BIG_GPU_RESERVE_GIB, f"{BIG_GPU_RESERVE_GIB} GiB (160 GiB and up)"
        else:
            below, base, per_gpu = tier
            reserve_gib = base + tp * per_gpu
            how = f"({base} + TP x {per_gpu}) GiB = {reserve_gib:g} GiB (GPU below {below} GiB)"
        frac = round((mem_mib - reserve_gib * GIB) / mem_mib, 3)
        return frac, f"(GPU memory - reserve) / GPU memory, reserve {how}"
    reserved = 512 + 1.5 * max(chunk, 2048) + 2 * graph_bs + tp / 8 * GIB
    parts = "512 MiB + 1.5 x chunk + 2 x cuda_graph_max_bs + TP / 8 GiB"
    if v >= (0, 5, 10):  # piecewise prefill graphs, on by default from 0.5.10
        if mla:
            reserved += 1.5 * GIB
            parts += " + 1.5 GiB for the MLA backend's prefill graphs"
        else:
            reserved += 8 * len(prefill_graph_tokens(chunk))
            parts += " + 8 MiB per prefill graph"
    if mem_mib > 60 * GIB:
        reserved = max(reserved, MIN_RESERVE_MIB)
        parts += ", at least 10 GiB"
    frac = round((mem_mib - reserved) / mem_mib, 3)
    return frac, f"(GPU memory - {reserved:.0f} MiB reserved: {parts}) / GPU memory"


def _mem_fraction_047(mem_mib: float, tp: int, over_180k: bool) -> tuple[float, str]:
    """0.4.6.post2 .. 0.4.7 above 81,920 MiB: 0.88, or above 96 GiB the smaller of 0.88 + 48 GiB x
    0.12 / memory and (memory - 18 GiB) / memory (not rounded); 0.4.7: 0.79 above 180,000 MiB on
    a CUDA GPU (an AMD one keeps the formula)."""
    if over_180k and mem_mib > 180000:
        return 0.79, "0.79 (GPU memory above 180,000 MiB)"
    if mem_mib > 96 * GIB:
        frac = min(0.88 + 48 * GIB * 0.12 / mem_mib, (mem_mib - 18 * GIB) / mem_mib)
        return frac, "min(0.88 + 48 GiB x 0.12 / GPU memory, (GPU memory - 18 GiB) / GPU memory)"
    return 0.88, f"0.88 at TP {tp} (GPU memory 80-96 GiB)"


def capture_sizes(v, max_bs: int) -> tuple[tuple[int, ...], str]:
    """The decode batch sizes captured as CUDA graphs, up to `max_bs`."""
    if v < (0, 5, 3):
        sizes = [1, 2, 4, 8, *range(16, 257, 8), *range(272, 513, 16)]
        why = f"1, 2, 4, 8, 16..256 step 8, 272..512 step 16, to {max_bs}"
    else:
        sizes = [
            1,
            2,
            4,
            8,
            12,
            *range(16, 257, 8),
            *range(272, 497, 16),
            *range(512, max_bs + 1, 32),
        ]
        why = f"1, 2, 4, 8, 12, 16..256 step 8, 272..496 step 16, 512.. step 32, to {max_bs}"
    return tuple(s for s in sizes if s <= max_bs), why


def prefill_graph_tokens(max_tokens: int) -> tuple[int, ...]:
    """The token counts 0.5.10's piecewise CUDA graphs capture, up to `max_tokens` (the chunk
    for a non-MLA model; server_args.py _generate_piecewise_cuda_graph_tokens)."""
    sizes = (
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, max_tokens + 1, 512),
    )
    return tuple(s for s in sizes if s <= max_tokens)
