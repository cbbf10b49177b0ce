"""Measure kernel tables on this machine's GPU, in the format `python -m sim.calibrate` reads.

    python calibration/profile_gpu.py --gpu h200 --out measured/      # a few minutes
    python -m sim.calibrate --tables measured/h200 --gpu h200         # fit calibration/profiles

Measures, with PyTorch on the current CUDA device: GEMMs over m, n, k in bf16 (and fp8 where
the GPU has FP8 tensor cores, via torch._scaled_mm); causal prefill attention over batch,
length, heads and head size, and single-token decode attention over batch and KV length
(flash-attn's kernels when the package is installed, else PyTorch SDPA); NCCL all-reduce over
message sizes when several GPUs are visible. Each kernel is timed as CUDA-graph replays, like
the tables in ../shared/data, and written as parquet (ms per call) under
OUT/<gpu>/<table>/torch/<torch version>/. Needs a GPU; `--plan` prints the grid without one.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import pandas as pd

GEMM_M = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
GEMM_NK = (256, 512, 1024, 2048, 3072, 4096, 5120, 6144, 8192, 12288, 14336, 16384, 28672)
PREFILL = dict(
    batch=(1, 2, 4, 8, 16),
    isl=(128, 512, 1024, 2048, 4096, 8192),
    heads=((32, 8), (64, 8), (32, 32), (16, 2)),
    head_dim=(64, 128, 256),
)
DECODE = dict(
    batch=(1, 4, 16, 64, 256),
    step=(128, 1024, 4096, 16384, 65536),
    heads=((32, 8), (64, 8), (32, 32), (16, 2)),
    head_dim=(64, 128, 256),
)
ALLREDUCE_BYTES = tuple(2**p for p in range(10, 30, 2))


def plan(quick: bool) -> dict:
    """The grid this run measures (every other point of each axis with --quick)."""
    take = (lambda xs: xs[::2]) if quick else (lambda xs: xs)
    gemm = list(itertools.product(take(GEMM_M), take(GEMM_NK), take(GEMM_NK)))
    prefill = list(itertools.product(*(take(v) for v in PREFILL.values())))
    decode = list(itertools.product(*(take(v) for v in DECODE.values())))
    return {"gemm": gemm, "prefill": prefill, "decode": decode}


def write_table(rows: list[dict], out: Path, gpu: str, table: str, version: str) -> Path:
    """One parquet table in the per-kernel format the fitter reads."""
    path = out / gpu / table.split("_")[0] / "torch" / version / f"{table}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)
    return path


def _timer(torch):
    def time_ms(fn, replays: int = 20) -> float:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                fn()  # warm up (and let libraries pick their kernels) outside the graph
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(replays):
                fn()
        graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / replays

    return time_ms


def measure(gpu: str, out: Path, quick: bool) -> list[Path]:
    import torch  # only here: the rest of the project never needs it

    if not torch.cuda.is_available():
        sys.exit("profile_gpu: no CUDA device visible; run it on the GPU to calibrate")
    device = torch.cuda.get_device_name()
    cc = torch.cuda.get_device_capability()
    version = torch.__version__.split("+")[0]
    base = {"framework": "torch", "version": version, "device": device}
    time_ms = _timer(torch)
    grid = plan(quick)
    written = []

    gemm = []
    dtypes = ["bfloat16"] + (["fp8"] if cc >= (8, 9) and hasattr(torch, "_scaled_mm") else [])
    for m, n, k in grid["gemm"]:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        for dtype in dtypes:
            if dtype == "bfloat16":
                fn = lambda a=a, w=w: torch.nn.functional.linear(a, w)  # noqa: E731
                source = "torch.nn.functional.linear"
            else:
                a8, w8 = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn).t()
                one = torch.ones((), device="cuda")
                fn = lambda a8=a8, w8=w8, one=one: torch._scaled_mm(  # noqa: E731
                    a8, w8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16
                )
                source = "torch._scaled_mm"
            gemm.append(
                {
                    **base,
                    "op_name": "gemm",
                    "kernel_source": source,
                    "gemm_dtype": dtype,
                    "m": m,
                    "n": n,
                    "k": k,
                    "latency": time_ms(fn),
                }
            )
    written.append(write_table(gemm, out, gpu, "gemm_perf", version))

    attn, source = _attention_fn(torch)
    for phase, table in (
        ("prefill", "context_attention_perf"),
        ("decode", "generation_attention_perf"),
    ):
        rows = []
        for batch, length, (heads, kv_heads), head_dim in grid[phase]:
            q_len = length if phase == "prefill" else 1
            q = torch.randn(batch, q_len, heads, head_dim, device="cuda", dtype=torch.bfloat16)
            kv = torch.randn(batch, length, kv_heads, head_dim, device="cuda", dtype=torch.bfloat16)
            fn = lambda q=q, kv=kv, causal=phase == "prefill": attn(q, kv, kv, causal)  # noqa: E731
            rows.append(
                {
                    **base,
                    "op_name": f"{'context' if phase == 'prefill' else 'generation'}_attention",
                    "kernel_source": source,
                    "batch_size": batch,
                    "isl": q_len,
                    "num_heads": heads,
                    "num_key_value_heads": kv_heads,
                    "head_dim": head_dim,
                    "beam_width": 1,
                    "attn_dtype": "bfloat16",
                    "kv_cache_dtype": "bfloat16",
                    "step": 0 if phase == "prefill" else length,
                    "window_size": 0,
                    "latency": time_ms(fn),
                }
            )
            del q, kv
        written.append(write_table(rows, out, gpu, table, version))
    gpus = torch.cuda.device_count()
    if gpus > 1:
        rows = _allreduce(torch, base, gpus)
        written.append(write_table(rows, out, gpu, "custom_allreduce_perf", version))
    return written


def _allreduce(torch, base: dict, gpus: int) -> list[dict]:
    """NCCL all-reduce over message sizes, for 2, 4, ... up to all visible GPUs."""
    import torch.multiprocessing as mp

    rows = []
    for world in (g for g in (2, 4, 8, 16) if g <= gpus):
        queue = mp.get_context("spawn").SimpleQueue()
        mp.spawn(_allreduce_worker, args=(world, queue), nprocs=world)
        for nbytes, ms in queue.get():
            rows.append(
                {
                    **base,
                    "op_name": "all_reduce",
                    "kernel_source": "torch_nccl",
                    "allreduce_dtype": "bfloat16",
                    "num_gpus": world,
                    # AIConfigurator's schema counts elements of the row's dtype (its
                    # collector/network/collect_all_reduce.py; sim/calibrate/kernel_tables.py)
                    "message_size": nbytes // 2,
                    "latency": ms,
                    "backend": "nccl",
                }
            )
    return rows


def _allreduce_worker(rank: int, world: int, queue) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl", init_method="tcp://127.0.0.1:29517", rank=rank, world_size=world
    )
    out = []
    for nbytes in ALLREDUCE_BYTES:
        x = torch.ones(nbytes // 2, device="cuda", dtype=torch.bfloat16)
        for _ in range(5):
            dist.all_reduce(x)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(20):
            dist.all_reduce(x)
        end.record()
        torch.cuda.synchronize()
        out.append((nbytes, start.elapsed_time(end) / 20))
    if rank == 0:
        queue.put(out)
    dist.destroy_process_group()


def _attention_fn(torch):
    """(attention(q, k, v, causal) on [batch, seq, heads, dim] tensors, kernel name)."""
    try:
        from flash_attn import flash_attn_func  # FlashAttention 2, GQA-aware

        return (lambda q, k, v, causal: flash_attn_func(q, k, v, causal=causal)), "flash_attn"
    except ImportError:
        sdpa = torch.nn.functional.scaled_dot_product_attention

        def run(q, k, v, causal):
            q, k, v = (x.transpose(1, 2) for x in (q, k, v))
            return sdpa(q, k, v, is_causal=causal, enable_gqa=True)

        return run, "torch_sdpa"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpu", required=True, help="the hardware catalogue name, e.g. h200")
    parser.add_argument("--out", type=Path, default=Path("measured"))
    parser.add_argument("--quick", action="store_true", help="every other grid point")
    parser.add_argument("--plan", action="store_true", help="print the grid; measure nothing")
    args = parser.parse_args(argv)
    if args.plan:
        for name, points in plan(args.quick).items():
            print(f"{name}: {len(points)} shapes")
        return
    for path in measure(args.gpu, args.out, args.quick):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
