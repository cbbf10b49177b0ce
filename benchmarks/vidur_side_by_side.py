"""Vidur and sim side by side on the yardstick: `python benchmarks/vidur_side_by_side.py
[--json PATH]`.

Runs Vidur's simulator (github.com/microsoft/vidur, run from a checkout of it) on the same work as
`benchmarks/run.py`'s yardstick, then sim's yardstick, and prints both wall times, both iteration
counts and the ratio, all from this one run:

  the 19,366 requests of the Azure 2023 conversation trace (`splitwise_conv.csv` from
  ../shared/data), prompt + output clipped to 4,096 tokens by Vidur's own trace length generator
  (`--length_generator_config_type trace`), Poisson arrivals at 6 req/s, Llama-2-7B on one H100
  (TP1, one replica), Vidur's `sarathi` scheduler (chunked prefill: a 512-token budget per
  iteration, decodes first, at most 128 requests per batch), sim's vLLM V1 scheduler with
  max_num_batched_tokens=512 and max_num_seqs=128, no prefix caching.

Set-up (Vidur's package has no `__init__.py`, so it is imported from its checkout, not installed):

  git clone https://github.com/microsoft/vidur /tmp/vidur
  python3 -m venv /tmp/vidur-venv
  /tmp/vidur-venv/bin/pip install numpy pandas scikit-learn wandb ddsketch plotly_express \\
      matplotlib seaborn fasteners kaleido
  VIDUR_DIR=/tmp/vidur VIDUR_PYTHON=/tmp/vidur-venv/bin/python \\
      python benchmarks/vidur_side_by_side.py

VIDUR_DIR (required) is the checkout: Vidur runs with it as working directory and on PYTHONPATH.
VIDUR_PYTHON is the interpreter of the venv holding Vidur's dependencies; it defaults to
$VIDUR_DIR/.venv/bin/python. Without either, or without ../shared/data, the script prints
`skipped: <reason>` with these steps and exits 0.

Inputs: Vidur's H100 Llama-2-7B `mlp.csv` from ../shared/data/vidur (Vidur's profiling tables,
copied there). Vidur's `attention.csv` files are kept in Git LFS upstream and are not in the
shared copy, so the script writes a stand-in table for Vidur (a roofline of H100: attention FLOPs
at 50% of 989 TFLOP/s for prefill, KV-cache bytes at 60% of 3.35 TB/s for decode, 5 µs per
kernel); it sets how long Vidur's iterations last in simulated time, not how fast Vidur runs.

What is timed (Vidur is driven by a small script of ours that calls its public classes, timing
each phase, in a subprocess of Vidur's interpreter): Vidur's predictor models are trained first in
a warm-up run of 64 requests (Vidur caches the trained models and their prediction tables), so
the timed run loads them from its cache, as any run after the first does. `vidur_s` is
`Simulator(config)` (the models from the cache, the requests generated) plus `Simulator.run()`;
`vidur_loop_s` is `run()` alone; `ratio` is vidur_s / sim_s and `ratio_loop` vidur_loop_s / sim_s
(sim_s is sim's whole yardstick: configuration resolved, workload generated, driven, summarised).
Vidur's optional outputs are off (Chrome trace, JSON event trace, plots, wandb); its request,
batch and utilisation metrics stay on, as sim's per-request records and step log do; its writing
of those metrics at exit is timed apart (`vidur_write_s`) and left out of the ratio, as sim's
yardstick writes no outputs. Vidur's outputs go to a temporary folder.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
VIDUR_MODEL = "meta-llama/Llama-2-7b-hf"
RATE = 6.0
CHUNK = 512  # sarathi chunk_size = sim's max_num_batched_tokens
BATCH_CAP = 128  # batch_size_cap = sim's max_num_seqs
WARMUP_REQUESTS = 64
SETUP = (
    "set-up: git clone https://github.com/microsoft/vidur /tmp/vidur && "
    "python3 -m venv /tmp/vidur-venv && /tmp/vidur-venv/bin/pip install numpy pandas "
    "scikit-learn wandb ddsketch plotly_express matplotlib seaborn fasteners kaleido; then "
    "VIDUR_DIR=/tmp/vidur VIDUR_PYTHON=/tmp/vidur-venv/bin/python "
    "python benchmarks/vidur_side_by_side.py"
)

# Run with Vidur's interpreter, argv = Vidur's own CLI flags; prints one JSON line of timings.
DRIVER = """\
import atexit, json, sys, time
t0 = time.perf_counter()
from vidur.config import SimulationConfig
from vidur.entities import Batch
from vidur.simulator import Simulator
from vidur.utils.random import set_seeds
t1 = time.perf_counter()
config = SimulationConfig.create_from_cli_args()
set_seeds(config.seed)
simulator = Simulator(config)
requests = len(simulator._event_queue)
t2 = time.perf_counter()
simulator.run()
t3 = time.perf_counter()
atexit.unregister(simulator._write_output)
simulator._write_output()
t4 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "setup_s": t2 - t1, "loop_s": t3 - t2,
                  "write_s": t4 - t3, "iterations": Batch._id + 1, "requests": requests,
                  "sim_time_s": simulator._time}))
"""


def load_run_module():
    """benchmarks/run.py as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("sim_benchmarks_run", HERE / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def find_vidur(env: dict) -> tuple[Path, Path] | str:
    """(python, checkout) of a usable Vidur, or the reason there is none."""
    if not env.get("VIDUR_DIR"):
        return "VIDUR_DIR is not set (the path of a checkout of github.com/microsoft/vidur)"
    vidur_dir = Path(env["VIDUR_DIR"]).expanduser()
    if not (vidur_dir / "vidur" / "main.py").is_file():
        return f"VIDUR_DIR={vidur_dir} has no vidur/main.py: not a checkout of microsoft/vidur"
    python = Path(env.get("VIDUR_PYTHON") or vidur_dir / ".venv" / "bin" / "python").expanduser()
    if not python.is_file():
        return f"VIDUR_PYTHON={python} does not exist (the python of Vidur's venv)"
    probe = subprocess.run(
        [str(python), "-c", "import vidur.main"],
        cwd=vidur_dir,
        env=vidur_env(env, vidur_dir),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if probe.returncode:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        return f"{python} cannot import vidur.main from {vidur_dir}: {last}"
    return python, vidur_dir


def vidur_env(env: dict, vidur_dir: Path) -> dict:
    path = os.pathsep.join(p for p in (str(vidur_dir), env.get("PYTHONPATH", "")) if p)
    return {**env, "PYTHONPATH": path, "WANDB_MODE": "disabled"}


def attention_standin(path: Path) -> Path:
    """A table in the layout of Vidur's attention.csv for Llama-2-7B on one H100 (TP1, block 16),
    from an H100 roofline: per layer, prefill attention FLOPs (QK^T and PV over the chunk's
    causal span) at 50% of 989 TFLOP/s, decode KV-cache reads at 60% of 3.35 TB/s, writing the
    new tokens' K and V at the same bandwidth, 5 µs per kernel. Times in ms, as Vidur's are."""
    embd, heads, flops, bw, launch = 4096, 32, 0.5 * 989e12, 0.6 * 3.35e12, 5e-6
    rows = []
    for chunk in [1, 2, 4, 8, *range(16, 4097, 16)]:
        for kv in range(0, 4097 - chunk, 128):
            span = kv + chunk / 2  # causal: each new token sees the prefix and half the chunk
            rows.append((1, chunk, kv, launch + 4 * embd * chunk * span / flops, 0.0, chunk))
    for batch in [1, 2, 4, *range(8, 129, 8)]:
        for kv in range(64, 4097, 64):
            read = batch * kv * 2 * embd * 2  # K and V, fp16
            rows.append((batch, 0, kv, 0.0, launch + read / bw, batch))
    df = pd.DataFrame(
        rows,
        columns=[
            "batch_size",
            "prefill_chunk_size",
            "kv_cache_size",
            "prefill_s",
            "decode_s",
            "tokens",
        ],
    )
    save_s = launch + df["tokens"] * 2 * embd * 2 / bw
    out = pd.DataFrame(
        {
            "n_embd": embd,
            "n_q_head": heads,
            "n_kv_head": heads,
            "block_size": 16,
            "num_tensor_parallel_workers": 1,
            "batch_size": df["batch_size"],
            "prefill_chunk_size": df["prefill_chunk_size"],
            "kv_cache_size": df["kv_cache_size"],
            "time_stats.attn_prefill.median": np.round(df["prefill_s"] * 1e3, 6),
            "time_stats.attn_decode.median": np.round(df["decode_s"] * 1e3, 6),
            "time_stats.attn_kv_cache_save.median": np.round(save_s * 1e3, 6),
        }
    )
    out.to_csv(path, index=False)
    return path


def vidur_args(trace: Path, mlp: Path, attention: Path, work: Path, num: int) -> list[str]:
    """Vidur's CLI flags (vidur/config/config.py at commit 7d47513) for the yardstick."""
    pred = "--linear_regression_execution_time_predictor_config_"
    return [
        "--replica_config_model_name", VIDUR_MODEL,
        "--replica_config_device", "h100",
        "--replica_config_network_device", "h100_pairwise_nvlink",
        "--replica_config_tensor_parallel_size", "1",
        "--replica_config_num_pipeline_stages", "1",
        "--cluster_config_num_replicas", "1",
        "--request_generator_config_type", "synthetic",
        "--synthetic_request_generator_config_num_requests", str(num),
        "--length_generator_config_type", "trace",
        "--trace_request_length_generator_config_trace_file", str(trace),
        "--trace_request_length_generator_config_max_tokens", "4096",
        "--interval_generator_config_type", "poisson",
        "--poisson_request_interval_generator_config_qps", str(RATE),
        "--replica_scheduler_config_type", "sarathi",
        "--sarathi_scheduler_config_chunk_size", str(CHUNK),
        "--sarathi_scheduler_config_batch_size_cap", str(BATCH_CAP),
        "--execution_time_predictor_config_type", "linear_regression",
        f"{pred}compute_input_file", str(mlp),
        f"{pred}attention_input_file", str(attention),
        f"{pred}prediction_max_prefill_chunk_size", str(CHUNK),
        f"{pred}prediction_max_batch_size", str(BATCH_CAP),
        f"{pred}prediction_max_tokens_per_request", "4096",
        "--no-metrics_config_enable_chrome_trace",
        "--no-metrics_config_write_json_trace",
        "--no-metrics_config_store_plots",
        "--metrics_config_output_dir", str(work / "vidur_output"),
        "--metrics_config_cache_dir", str(work / "vidur_cache"),
    ]  # fmt: skip


def run_vidur(python: Path, vidur_dir: Path, args: list[str], work: Path, env: dict) -> dict:
    driver = work / "vidur_driver.py"
    driver.write_text(DRIVER)
    (work / "vidur_output").mkdir(exist_ok=True)
    started = time.perf_counter()
    proc = subprocess.run(
        [str(python), str(driver), *args],
        cwd=vidur_dir,
        env=vidur_env(env, vidur_dir),
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    if proc.returncode:
        raise RuntimeError(f"Vidur failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out | {"process_s": wall}


def compare(env: dict) -> dict:
    """Both runs and their figures, or {"skipped": reason}."""
    run = load_run_module()
    mlp = run.SHARED_DATA_DIR / "vidur" / "profiling" / "compute" / "h100" / VIDUR_MODEL / "mlp.csv"
    for need in (run.AZURE_CONV, mlp):
        if not need.is_file():
            return {"skipped": f"needs {need} (the shared data folder)"}
    found = find_vidur(env)
    if isinstance(found, str):
        return {"skipped": found}
    python, vidur_dir = found
    num = len(pd.read_csv(run.AZURE_CONV))
    with tempfile.TemporaryDirectory(prefix="sim-vidur-") as tmp:
        work = Path(tmp)
        attention = attention_standin(work / "attention.csv")
        warm = run_vidur(
            python, vidur_dir, vidur_args(run.AZURE_CONV, mlp, attention, work, WARMUP_REQUESTS),
            work, env,
        )  # fmt: skip
        vidur = run_vidur(
            python, vidur_dir, vidur_args(run.AZURE_CONV, mlp, attention, work, num), work, env
        )
        sim = run.run_one("yardstick", work)
    vidur_s = vidur["setup_s"] + vidur["loop_s"]
    return {
        "requests": {"vidur": vidur["requests"], "sim": sim["requests"]},
        "vidur_s": round(vidur_s, 2),
        "vidur_loop_s": round(vidur["loop_s"], 2),
        "vidur_setup_s": round(vidur["setup_s"], 2),
        "vidur_import_s": round(vidur["import_s"], 2),
        "vidur_write_s": round(vidur["write_s"], 2),
        "vidur_process_s": round(vidur["process_s"], 2),
        "vidur_training_s": round(warm["setup_s"], 2),  # warm-up: models trained and cached
        "vidur_iterations": vidur["iterations"],
        "vidur_simulated_s": round(vidur["sim_time_s"], 1),
        "vidur_us_per_iteration": round(vidur["loop_s"] / max(vidur["iterations"], 1) * 1e6, 1),
        "sim_s": sim["wall_s"],
        "sim_steps": sim["steps"],
        "sim_simulated_s": round(sim["sim_time_s"], 1),
        "sim_us_per_step": sim["us_per_step"],
        "ratio": round(vidur_s / sim["wall_s"], 2),
        "ratio_loop": round(vidur["loop_s"] / sim["wall_s"], 2),
    }


def main(argv: list[str] | None = None, env: dict | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    out = compare(dict(os.environ) if env is None else env)
    if "skipped" in out:
        print(f"skipped: {out['skipped']}\n{SETUP}")
    else:
        print(f"{'':<8} {'wall s':>8} {'iterations':>11} {'µs/iteration':>13} {'simulated s':>12}")
        print(
            f"{'vidur':<8} {out['vidur_s']:>8.2f} {out['vidur_iterations']:>11,d} "
            f"{out['vidur_us_per_iteration']:>13.1f} {out['vidur_simulated_s']:>12.1f}"
        )
        print(
            f"{'sim':<8} {out['sim_s']:>8.2f} {out['sim_steps']:>11,d} "
            f"{out['sim_us_per_step']:>13.1f} {out['sim_simulated_s']:>12.1f}"
        )
        print(
            f"ratio (Vidur / sim): {out['ratio']:.2f} ({out['ratio_loop']:.2f} on Vidur's event "
            f"loop alone: {out['vidur_loop_s']:.2f} s); Vidur also spent "
            f"{out['vidur_import_s']:.2f} s importing, {out['vidur_write_s']:.2f} s writing its "
            f"metrics, {out['vidur_training_s']:.2f} s training its models (warm-up)"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
