"""Speed and memory benchmarks of the simulator: `python benchmarks/run.py [--only NAME]
[--json PATH]`.

Each workload runs in a fresh process (so its peak RSS is its own) and reports wall time, peak
RSS, simulated steps, µs of wall time per simulated step and simulated seconds per wall second:

  yardstick  the work Vidur was timed on: the 19,366 requests of the Azure 2023 conversation
             trace (prompt + output clipped to 4,096 tokens as Vidur clips them), Poisson 6 req/s,
             no prefix caching (Vidur models none),
             Llama-2-7B on one H100, max_num_batched_tokens=512, max_num_seqs=128 (vLLM V1)
  saturated  100,000 chat requests (the default lognormal mix) at 25 req/s, above what one H100
             serves for Llama-3.1-8B with max_num_seqs=256, so ~256 run at once
  saturated_step  the saturated replica's steps alone: copied mid-run (~250 running, a long
             queue) and stepped 300 times through vLLM V1's lane (the running set as arrays)
             and 300 times through the Request objects, alternately, four rounds
  long       one 1,048,576-token prompt on Llama-3.1-8B (context extended) on 8 x H200, TP8,
             with 200 chat requests arriving while it is served
  sweep      64 configurations (max_num_batched_tokens x max_num_seqs x rate) of the yardstick's
             first 2,000 requests through Hydra's multirun with the joblib launcher (every core)
  long_context  `python -m sim scenario=long_context` as shipped: the 1M-token request alone and
             among chat traffic for four budget settings (9 engine runs, every core), the
             11-model architecture table and the remedies, outputs and plots included
  chunked_prefill  `python -m sim -m scenario=chunked_prefill` as shipped: its 64-point sweep
             (8 budgets x 2 caps x 4 rates) on 2,000 requests each, joblib launcher, every
             core, with the sweep table, report and plots
  chunked_prefill_ray  the same sweep, unchanged but for hydra/launcher=ray, on a local Ray
             cluster this benchmark starts (ray start --head) and stops
  main_job   `python -m sim` as the README's first command runs it (1,000 chat requests on
             Llama-3.1-8B, one H100), every output written (parquet, summary, report and
             plots), timed end to end in a subprocess: start-up and imports included
  million    `python -m sim workload.num_requests=1000000` (the default chat mix at 16 req/s,
             about 17 simulated hours), every output written (steps streamed to parquet, report
             and plots); its resident memory sampled every second, to show it stays flat

yardstick and sweep read the Azure trace from ../shared/data (they say so and are skipped when
it is absent); the others need nothing outside the repository.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sim.paths import MODEL_CATALOG_DIR, SHARED_DATA_DIR  # noqa: E402

AZURE_CONV = SHARED_DATA_DIR / "vidur" / "processed_traces" / "splitwise_conv.csv"
MAX_TOKENS = 4096  # Vidur's clip of prompt + output
NAMES = (
    "yardstick",
    "saturated",
    "saturated_step",
    "long",
    "sweep",
    "long_context",
    "chunked_prefill",
    "chunked_prefill_ray",
    "main_job",
    "million",
)
MILLION = 1_000_000
SWEEP = {
    "engine_args.max_num_batched_tokens": "256,512,1024,2048",
    "engine_args.max_num_seqs": "32,64,128,256",
    "workload.rate": "4,6,8,10",
}


def azure_lengths(work: Path, num: int | None = None) -> Path:
    """The conversation trace's lengths, prompt + output clipped to MAX_TOKENS by taking the
    excess from both in proportion (as Vidur's trace length generator does)."""
    if not AZURE_CONV.is_file():
        raise FileNotFoundError(f"needs {AZURE_CONV} (the shared data folder)")
    df = pd.read_csv(AZURE_CONV)
    prompt = df["num_prefill_tokens"].to_numpy(dtype=np.int64)
    output = df["num_decode_tokens"].to_numpy(dtype=np.int64)
    total = prompt + output
    excess = np.clip(total - MAX_TOKENS, 0, None)
    prompt = prompt - np.ceil(excess * prompt / total).astype(np.int64)
    output = output - np.ceil(excess * output / total).astype(np.int64)
    out = pd.DataFrame({"num_prefill_tokens": prompt, "num_decode_tokens": output})
    path = work / "azure_conv_lengths.csv"
    out.iloc[:num].to_csv(path, index=False)
    return path


def yardstick_config(work: Path, num: int | None = None) -> dict:
    lengths = azure_lengths(work, num)
    return {
        "model": "llama-2-7b-hf",
        "hardware": "h100-sxm",
        "engine": "vllm",
        # Vidur models no prefix cache, and the trace shares no content: caching off
        "engine_args": {
            "max_num_batched_tokens": 512,
            "max_num_seqs": 128,
            "enable_prefix_caching": False,
        },
        "workload": {
            "kind": "poisson",
            "rate": 6.0,
            "num_requests": num or len(pd.read_csv(lengths)),
            "lengths": str(lengths),
        },
    }


def saturated_config(work: Path) -> dict:
    return {
        "model": "llama-3.1-8b",
        "hardware": "h100-sxm",
        "engine": "vllm",
        "engine_args": {"max_num_seqs": 256},
        "workload": {"kind": "poisson", "rate": 25.0, "num_requests": 100_000},
    }


def run_saturated_step(work: Path, rounds: int = 4, steps: int = 300) -> dict:
    """The saturated replica's single steps, through the lane and through objects: the replica
    is copied (deep copy of its scheduler, KV cache and requests) at the first step after the
    4,000th with at least 246 running and 300 waiting, of a 6,000-request run; each round
    steps a fresh copy `steps` times each way (no arrivals: the queue is long enough)."""
    import copy

    from sim.config import SimConfig
    from sim.run.engine import Engine
    from sim.run.metrics import StepLog
    from sim.run.simulate import simulate
    from sim.schedulers import vllm_v1

    data = saturated_config(work)
    data["workload"]["num_requests"] = 6000
    data["output"] = {"report": False, "progress": False}
    taken = {}
    step = Engine.step

    def copying(engine, now):
        s = engine.scheduler
        busy = len(s.running) >= 246 and len(s.waiting) > 300
        if not taken and busy and len(engine.steps) >= 4000:
            taken["at"] = (engine, copy.deepcopy(s), now)
        return step(engine, now)

    Engine.step = copying
    try:
        simulate(SimConfig.from_mapping(data))
    finally:
        Engine.step = step
    if "at" not in taken:
        raise RuntimeError("the run never reached 246 running with 300 waiting")
    engine, sched, start = taken["at"]

    def stepped(lane_min: int) -> tuple[float, float, int]:
        vllm_v1.LANE_MIN = lane_min
        e = copy.copy(engine)
        e.scheduler = copy.deepcopy(sched)
        e.kv = e.scheduler.kv
        e.steps = StepLog()
        now = start
        t = time.perf_counter()
        for _ in range(steps):
            now += e.step(now)[0]
        return time.perf_counter() - t, now - start, len(sched.running)

    lane_min = vllm_v1.LANE_MIN
    times = {"lane": [], "objects": []}
    try:
        for _ in range(rounds):
            lane = stepped(lane_min)
            times["lane"].append(lane)
            times["objects"].append(stepped(10**9))
    finally:
        vllm_v1.LANE_MIN = lane_min
    wall = sum(t[0] for t in times["lane"])
    sim_s = sum(t[1] for t in times["lane"])
    return _figures(wall, rounds * steps, sim_s) | {
        "running": lane[2],
        "us_per_step_lane": [round(t[0] / steps * 1e6, 1) for t in times["lane"]],
        "us_per_step_objects": [round(t[0] / steps * 1e6, 1) for t in times["objects"]],
    }


def long_config(work: Path) -> dict:
    """One 1M-token prompt at t=0 and 200 chat requests (lognormal, Poisson 2 req/s)."""
    cfg = json.loads((MODEL_CATALOG_DIR / "llama-3.1-8b.json").read_text())
    cfg["max_position_embeddings"] = 1_048_576 + 4096  # context extended, as with hf-overrides
    model = work / "llama-3.1-8b-1m.json"
    model.write_text(json.dumps(cfg))
    rng = np.random.default_rng(0)
    n = 200
    arrival = np.concatenate(([0.0], 0.5 + np.cumsum(rng.exponential(0.5, n))))
    prompt = np.concatenate(([1_048_576], np.clip(rng.lognormal(6.6, 0.99, n), 1, 16000)))
    output = np.concatenate(([256], np.clip(rng.lognormal(5.0, 0.86, n), 1, 3000)))
    trace = work / "long_trace.csv"
    pd.DataFrame(
        {
            "arrived_at": arrival,
            "num_prefill_tokens": prompt.astype(np.int64),
            "num_decode_tokens": output.astype(np.int64),
        }
    ).to_csv(trace, index=False)
    return {
        "model": str(model),
        "hardware": "h200",
        "engine": "vllm",
        "parallel": {"tp": 8},
        "engine_args": {"max_model_len": 1_048_576 + 4096},
        "workload": {"kind": "trace", "path": str(trace)},
    }


CONFIGS = {"yardstick": yardstick_config, "saturated": saturated_config, "long": long_config}


def peak_rss_mb() -> float:
    """Peak resident memory of this process and of its finished children (Linux: KiB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, kids) / 1024


def run_one(name: str, work: Path, split: bool = False) -> dict:
    """Simulate one workload in this process, outputs off (the simulation alone is timed).
    With `split`, also time the steps simulated one at a time and the fast-forwarded runs."""
    from sim.config import SimConfig
    from sim.run.simulate import simulate

    data = CONFIGS[name](work) | {"output": {"report": False, "progress": False}}
    cfg = SimConfig.from_mapping(data)
    timers = _split_timers() if split else None
    audit_s = _audit_timer()
    started = time.perf_counter()
    result = simulate(cfg)
    wall = time.perf_counter() - started
    sim = result.summary["sim"]
    out = _figures(wall, sim["steps"], sim["sim_time_s"]) | {
        "requests": sim["requests"],
        "finished": sim["finished"],
        "fast_forwarded_steps": sim["fast_forwarded_steps"],
        "sim_time_s": round(sim["sim_time_s"], 3),
        # the physics audit's share of the wall time (sim/run/audit.py: after the run)
        "audit_s": round(audit_s[0], 4),
        "audit_pct": round(100 * audit_s[0] / wall, 2),
        "audit_violations": result.summary["audit"]["violations"],
    }
    if timers is not None:
        single, runs = timers["step"], timers["run"]
        run_s = runs["s"] - timers["step_in_run"]["s"]  # a run's call ends with one step
        out["split"] = {
            "single_steps": single["n"],
            "us_per_single_step": round(single["s"] / max(single["n"], 1) * 1e6, 1),
            "fast_forwarded_runs": runs["n"],
            "us_per_run": round(run_s / max(runs["n"], 1) * 1e6, 1),
            "rest_s": round(wall - single["s"] - run_s, 2),
        }
    return out


def _audit_timer() -> list[float]:
    """Seconds spent in the physics audit (its step and price checks), summed as they run."""
    from sim.run.audit import PhysicsAudit

    spent = [0.0]
    for method in ("check_steps", "finish"):
        real = getattr(PhysicsAudit, method)

        def timed(self, *args, _real=real):
            t = time.perf_counter()
            _real(self, *args)
            spent[0] += time.perf_counter() - t

        setattr(PhysicsAudit, method, timed)
    return spent


def _split_timers() -> dict:
    """Wrap Engine.step and fast_forward with timers (for --split)."""
    import sim.run.engine as engine_module

    timers = {k: {"n": 0, "s": 0.0} for k in ("step", "run", "step_in_run")}
    step, forward = engine_module.Engine.step, engine_module.fast_forward
    inside = [False]

    def timed_step(self, now):
        t = time.perf_counter()
        out = step(self, now)
        dt = time.perf_counter() - t
        timers["step"]["n"] += 1
        timers["step"]["s"] += dt
        if inside[0]:
            timers["step_in_run"]["s"] += dt
        return out

    def timed_forward(engine, now, horizon, *feed):
        t = time.perf_counter()
        inside[0] = True
        out = forward(engine, now, horizon, *feed)
        inside[0] = False
        if out is not None:
            timers["run"]["n"] += 1
            timers["run"]["s"] += time.perf_counter() - t
        return out

    engine_module.Engine.step = timed_step
    engine_module.fast_forward = timed_forward
    return timers


def run_sweep(work: Path) -> dict:
    """64 runs through `python -m sim -m` with the joblib launcher; steps summed over runs."""
    cfg = yardstick_config(work, 2000)
    sweep_dir = work / "sweep"
    cmd = [
        sys.executable,
        "-m",
        "sim",
        "-m",
        "hydra/launcher=joblib",
        f"hydra.launcher.n_jobs={os.cpu_count()}",
        f"hydra.sweep.dir={sweep_dir}",
        f"model={cfg['model']}",
        f"hardware={cfg['hardware']}",
        f"workload.lengths={cfg['workload']['lengths']}",
        "engine_args.enable_prefix_caching=false",
        "workload.num_requests=2000",
        "output.report=false",
        "output.progress=false",
        *(f"{key}={values}" for key, values in SWEEP.items()),
    ]
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    summaries = [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/summary.json"))]
    if len(summaries) != 64:
        raise RuntimeError(f"sweep wrote {len(summaries)} summaries, expected 64")
    steps = sum(s["sim"]["steps"] for s in summaries)
    sim_s = sum(s["sim"]["sim_time_s"] for s in summaries)
    busy = sum(s["sim"]["wall_time_s"] for s in summaries)  # each run's own simulation time
    return _figures(wall, steps, sim_s) | {
        "runs": len(summaries),
        "jobs": os.cpu_count(),
        "simulation_s_per_wall_s": round(busy / wall, 2),  # > 1: runs overlapped on cores
        "cpu_s_per_wall_s": round(cpu / wall, 2),  # CPU seconds (all processes) per second
    }


def run_long_context(work: Path) -> dict:
    """The whole scenario through `python -m sim`, as a user runs it."""
    out = work / "long_context"
    cmd = [sys.executable, "-m", "sim", "scenario=long_context", f"hydra.run.dir={out}"]
    started = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    s = json.loads((out / "summary.json").read_text())
    runs = s["engine_runs"]
    return _figures(wall, runs["steps"], runs["simulated_s"]) | {
        "simulations": runs["simulations"],
        "architectures": len(s["architectures"]),
        "scenario_wall_s": round(s["wall_time_s"], 2),  # without start-up and imports
    }


def run_chunked_prefill(work: Path, ray: bool = False) -> dict:
    """The scenario's own 64-point sweep through `python -m sim -m`, as a user runs it."""
    sweep_dir = work / "chunked_prefill"
    launcher = ["hydra/launcher=joblib"]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    if ray:
        import shutil

        exe = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
        if exe is None:
            raise FileNotFoundError("needs Ray (pip install -e '.[ray]')")
        cpus = f"--num-cpus={os.cpu_count()}"
        start = [exe, "start", "--head", cpus, "--include-dashboard=false"]
        subprocess.run(start, check=True, env=env, capture_output=True)
        launcher = [
            "hydra/launcher=ray",
            "hydra.launcher.ray.init.address=auto",
            "+hydra.launcher.ray.init.object_store_memory=null",
        ]
    cmd = [sys.executable, "-m", "sim", "-m", "scenario=chunked_prefill", *launcher,
           f"hydra.sweep.dir={sweep_dir}", "output.progress=false"]  # fmt: skip
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL, env=env)
    finally:
        if ray:
            subprocess.run([exe, "stop", "--force"], env=env, capture_output=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    summaries = [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/summary.json"))]
    if len(summaries) != 64:
        raise RuntimeError(f"sweep wrote {len(summaries)} summaries, expected 64")
    table = pd.read_csv(sweep_dir / "sweep.csv")
    rec = json.loads((sweep_dir / "sweep_summary.json").read_text())["recommendation"]
    steps = sum(s["sim"]["steps"] for s in summaries)
    sim_s = sum(s["sim"]["sim_time_s"] for s in summaries)
    busy = sum(s["sim"]["wall_time_s"] for s in summaries)  # each run's own simulation time
    out = _figures(wall, steps, sim_s) | {
        "runs": len(table),
        "requests_per_run": int(table["completed"].max()),
        "recommendation": rec["setting"],
        "simulation_s": round(busy, 2),
    }
    if not ray:  # Ray's worker processes are not this benchmark's children: no CPU figure
        # everything but the runs' own simulations (start-up, checking the 64 configs, Hydra
        # composing each, outputs, the sweep's report), CPU seconds per point: less the runs'
        # wall time (as first defined: low where processes wait for a core, the waits count
        # as simulation), and less the runs' own CPU time (`sim.cpu_time_s`, where recorded)
        out["overhead_cpu_s_per_point"] = round((cpu - busy) / len(summaries), 3)
        if all("cpu_time_s" in s["sim"] for s in summaries):
            own = sum(s["sim"]["cpu_time_s"] for s in summaries)
            out["simulation_cpu_s"] = round(own, 2)
            out["overhead_beyond_simulation_cpu_s_per_point"] = round(
                (cpu - own) / len(summaries), 3
            )
    return out


def run_main_job(work: Path) -> dict:
    """`python -m sim` as a new user first runs it, every output, timed end to end."""
    run_dir = work / "run"
    cmd = [sys.executable, "-m", "sim", f"hydra.run.dir={run_dir}"]
    started = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    s = json.loads((run_dir / "summary.json").read_text())["sim"]
    return _figures(wall, s["steps"], s["sim_time_s"]) | {
        "requests": s["requests"],
        "simulation_s": round(s["wall_time_s"], 3),  # the run alone, inside the process
        "outputs": sorted(p.name for p in run_dir.iterdir() if p.is_file()),
    }


def run_million(work: Path, num_requests: int = MILLION) -> dict:
    """The CLI on a million requests, its RSS read from /proc every second while it runs."""
    run_dir = work / "run"
    cmd = [
        sys.executable, "-m", "sim", f"hydra.run.dir={run_dir}",
        f"workload.num_requests={num_requests}", "output.progress=false",
    ]  # fmt: skip
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    samples = []  # (wall s, RSS MB)
    while proc.poll() is None:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
            kb = next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmRSS"))
            samples.append((time.perf_counter() - started, kb / 1024))
        except (FileNotFoundError, StopIteration, ProcessLookupError):
            pass
        time.sleep(1.0)
    _, err = proc.communicate()
    wall = time.perf_counter() - started
    if proc.returncode:
        raise RuntimeError(f"python -m sim failed: {err.decode()[-2000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    sim = summary["sim"]
    rss = np.array([r for _, r in samples])
    at = {f"rss_mb_at_{q}pct": round(float(rss[int(len(rss) * q / 100)]), 1) for q in (10, 50, 90)}
    return (
        _figures(wall, sim["steps"], sim["sim_time_s"])
        | at
        | {
            "requests": sim["requests"],
            "finished": sim["finished"],
            "steps_streamed": sim["steps_streamed"],
            "simulation_wall_s": round(sim["wall_time_s"], 1),
            "steps_parquet_mb": round((run_dir / "steps.parquet").stat().st_size / 2**20, 1),
            "requests_parquet_mb": round((run_dir / "requests.parquet").stat().st_size / 2**20, 1),
            "rss_samples": [
                [round(t, 1), round(r, 1)] for t, r in samples[:: max(1, len(samples) // 60)]
            ],
        }
    )


def _figures(wall: float, steps: int, sim_s: float) -> dict:
    return {
        "wall_s": round(wall, 3),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "steps": int(steps),
        "us_per_step": round(wall / max(steps, 1) * 1e6, 2),
        "sim_s_per_wall_s": round(sim_s / wall, 1),
    }


def worker(name: str, split: bool) -> None:
    with tempfile.TemporaryDirectory(prefix=f"sim-bench-{name}-") as tmp:
        work = Path(tmp)
        try:
            special = {
                "sweep": run_sweep,
                "long_context": run_long_context,
                "chunked_prefill": run_chunked_prefill,
                "chunked_prefill_ray": lambda w: run_chunked_prefill(w, ray=True),
                "main_job": run_main_job,
                "saturated_step": run_saturated_step,
                "million": lambda w: run_million(
                    w, int(os.environ.get("SIM_BENCH_REQUESTS", MILLION))
                ),
            }
            out = special[name](work) if name in special else run_one(name, work, split)
        except FileNotFoundError as exc:
            out = {"skipped": str(exc)}
    print(json.dumps(out))


def compile_package() -> None:
    """The package's bytecode (sim/**/__pycache__), as a user's first run of `python -m sim`
    writes it for the next: where PYTHONDONTWRITEBYTECODE is set (this machine sets it), every
    process, each sweep worker's too, would otherwise compile its ~100 modules from source again,
    ~0.2 CPU s of its start-up (benchmarks/README.md, issue 24's seventh step)."""
    compileall.compile_dir(REPO / "sim", quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=NAMES, action="append", help="run just this one")
    parser.add_argument("--json", type=Path, help="write {name: figures} here")
    parser.add_argument(
        "--split",
        action="store_true",
        help="also time single steps and fast-forwarded runs apart (slightly slower)",
    )
    parser.add_argument("--worker", choices=NAMES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.split)
        return
    compile_package()
    results = {}
    print(
        f"{'benchmark':<10} {'wall s':>8} {'peak RSS MB':>12} {'steps':>10} "
        f"{'µs/step':>9} {'sim s/wall s':>13}"
    )
    for name in args.only or NAMES:
        extra = ["--split"] if args.split else []
        proc = subprocess.run(
            [sys.executable, __file__, "--worker", name, *extra], capture_output=True, text=True
        )
        if proc.returncode:
            sys.stderr.write(proc.stderr)
            raise SystemExit(f"benchmark {name} failed (exit {proc.returncode})")
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        results[name] = out
        if "skipped" in out:
            print(f"{name:<10} skipped: {out['skipped']}")
            continue
        print(
            f"{name:<10} {out['wall_s']:>8.2f} {out['peak_rss_mb']:>12.0f} {out['steps']:>10,d} "
            f"{out['us_per_step']:>9.1f} {out['sim_s_per_wall_s']:>13.1f}",
            flush=True,
        )
        if "audit_s" in out:
            print(
                f"{'':<10} physics audit {out['audit_s']} s ({out['audit_pct']}% of the wall "
                f"time), {out['audit_violations']} violations"
            )
        if "overhead_cpu_s_per_point" in out:
            print(
                f"{'':<10} {out['simulation_s']} s simulating (all runs); the rest, "
                f"{out['overhead_cpu_s_per_point']} CPU s per point"
            )
        if "overhead_beyond_simulation_cpu_s_per_point" in out:
            print(
                f"{'':<10} {out['simulation_cpu_s']} CPU s simulating; the rest, "
                f"{out['overhead_beyond_simulation_cpu_s_per_point']} CPU s per point"
            )
        if "us_per_step_lane" in out:
            print(
                f"{'':<10} {out['running']} running: µs a step through the lane "
                f"{out['us_per_step_lane']}, through objects {out['us_per_step_objects']}"
            )
        if "split" in out:
            sp = out["split"]
            print(
                f"{'':<10} {sp['single_steps']:,d} steps one at a time, "
                f"{sp['us_per_single_step']} µs each; {sp['fast_forwarded_runs']:,d} "
                f"fast-forwarded runs ({out['fast_forwarded_steps']:,d} steps), "
                f"{sp['us_per_run']} µs each; {sp['rest_s']} s in the rest"
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
