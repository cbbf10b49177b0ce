"""Every numeric config key at extreme values, each on a tiny run: `python
benchmarks/extreme_config.py [--jobs N] [--only SUBSTR] [--values V,V] [--json PATH] [--lines]`.

For each numeric key of SimConfig (found from its dataclasses, so a new key is probed without a
change here) and each engine argument the simulator reads, it runs `python -m sim KEY=VALUE`
on a tiny run of the key's task (20 requests; the scenario's own searches cut to a probe or
two) with each of 0, -1, 1e-300, 1e308, inf, nan and 10**30, in a fresh process limited to 3 GB
of address space and 60 s. Each must end in one of two ways:

  refused   exit 2 and one line `sim: error: ...` (no traceback)
  ran       exit 0, and its results sane: no NaN or infinity in a summary.json outside the
            echoed config, no negative latency, and every finished request of every
            requests.parquet with a TTFT and E2E above zero (TPOT too when it made more than
            one token), all finite

Anything else is a failure: TRACEBACK, HANG (killed at 60 s), MEMORY (MemoryError, or killed),
INSANE (exit 0 with results that are not sane), FAILED (another exit status). A task's tiny
run is also run once as it is (the `(task as it is)` rows): what is insane there already is
said there, and not again for each value. Prints the table (key x value), each failure, and
with --lines each refusal's line; exits 1 if anything failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import typing
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sim.config import SimConfig  # noqa: E402

VALUES = ("0", "-1", "1e-300", "1e308", "inf", "nan", str(10**30))
MEMORY_BYTES = 3_000_000_000
TIMEOUT_S = 60
BAD = ("TRACEBACK", "HANG", "MEMORY", "INSANE", "FAILED")

TINY = ("workload.num_requests=20", "output.report=false")
# The tiny run of each task whose keys are probed (a probed key replaces the same key here).
TASKS = {
    "simulate": TINY,
    "validate": (*TINY, "scenario=validate", "validate.cases={cases}"),
    "upgrade": (
        *TINY,
        "scenario=upgrade_diff",
        "upgrade.seeds=1",
        "upgrade.loads=[]",
        "upgrade.budget=8",
    ),
    "capacity": (
        *TINY,
        "scenario=capacity",
        "capacity.max_probes=2",
        "capacity.seeds=2",
        "capacity.max_seeds=2",
    ),
    "long_context": (
        *TINY,
        "scenario=long_context",
        "long_context.architectures=[llama-3.1-8b]",
        "long_context.budgets=[2048]",
        "long_context.prompt_tokens=100000",
    ),
    "disagg": (
        *TINY,
        "scenario=disagg",
        "disagg.max_replicas=2",
        "disagg.seeds=1",
        "disagg.max_seeds=1",
        "disagg.colocated=false",
    ),
    "teach": (*TINY, "scenario=teach_chunked_prefill"),
}
SECTION_TASK = {"upgrade": "upgrade", "validate": "validate", "capacity": "capacity"}
SECTION_TASK |= {"long_context": "long_context", "disagg": "disagg", "teach": "teach"}
# What a key needs beside the tiny run to be read at all.
NEEDS = {
    "workload.burstiness": ("workload=gamma",),
    "workload.concurrency": ("workload=closed_loop",),
    "workload.range_ratio": ("workload.length_dist=uniform",),
    "workload.concurrent_sessions": ("workload.turns_per_session=2",),
    "parallel.link_bytes_per_s": ("parallel.tp=2",),
    "parallel.link_latency_s": ("parallel.tp=2",),
    "parallel.gpus_per_node": ("parallel.pp=2",),
}
ONE_RUN = ("disagg.enabled=true", "model=llama-3.1-8b")  # a disaggregated run, not a search
# Other runs a key is read in: every way a generated arrival time can grow among them.
VARIANTS = {
    "workload.rate": {
        "gamma 0.5": ("workload=gamma", "workload.burstiness=0.5"),
        "constant": ("workload=constant",),
        "trace": ("workload=trace", "workload.path={trace}"),
        "multi-turn": ("workload.turns_per_session=4",),
    },
    "workload.burstiness": {"bench_json": ("workload=bench_json", "workload.path={bench}")},
    "upgrade.auto_rate_fraction": {"rate=auto": ("workload.rate=auto",)},
    "disagg.link_bytes_per_s": {"one run": ONE_RUN},
    "disagg.link_latency_s": {"one run": ONE_RUN},
    "disagg.prefill.replicas": {"one run": ONE_RUN},
    "disagg.decode.replicas": {"one run": ONE_RUN},
}
SPEC = ("engine_args.speculative_method=ngram",)
OFFLOAD = ("engine_args.kv_offload_cpu_bytes=1e9",)
VLLM_ARGS = (
    *("max_num_seqs", "max_num_batched_tokens", "max_model_len", "long_prefill_token_threshold"),
    *("gpu_memory_utilization", "block_size", "max_cudagraph_capture_size"),
    *("num_gpu_blocks_override", "cpu_step_overhead_s", "cpu_per_seq_overhead_s"),
    *("cpu_output_per_seq_s", "cpu_exposed_s", "prefix_hash_s_per_token"),
    *("cudagraph_memory_bytes", "non_torch_memory_bytes", "kv_offload_cpu_bytes"),
)
SGLANG_ARGS = (
    *("chunked_prefill_size", "max_running_requests", "max_prefill_tokens"),
    *("mem_fraction_static", "page_size", "schedule_conservativeness", "cuda_graph_max_bs"),
)
TRTLLM_ARGS = ("max_batch_size", "max_num_tokens", "free_gpu_memory_fraction", "tokens_per_block")
# Engine arguments the simulator reads that take a number, with what each needs to be read.
ENGINE_ARGS = {
    **{name: () for name in VLLM_ARGS},
    "swap_space": ("engine=vllm@0.6.3", "engine_args.preemption_mode=swap"),
    "num_scheduler_steps": ("engine=vllm@0.6.3",),
    "num_speculative_tokens": SPEC,
    "spec_acceptance": SPEC,
    "kv_offload_disk_bytes": OFFLOAD,
    "kv_offload_disk_bytes_per_s": (*OFFLOAD, "engine_args.kv_offload_disk_bytes=1e10"),
    **{name: ("engine=sglang",) for name in SGLANG_ARGS},
    **{name: ("engine=trtllm",) for name in TRTLLM_ARGS},
}
ECHOED = {"config", "engine_settings", "memory_plan", "request_rate", "burstiness"}
CHANGES = ("change", "delta", "diff", "effect", "pct", "shapley", "error")  # signed by nature


@dataclass(frozen=True, slots=True)
class Probe:
    key: str  # the config key ("" for a task's run as it is)
    label: str  # the key, and the variant of the run when there is more than one
    overrides: tuple[str, ...]  # the run's other overrides
    is_list: bool  # a list-valued key: the value is given as [VALUE]
    task: str  # the TASKS entry the run starts from


@dataclass(frozen=True, slots=True)
class Outcome:
    probe: Probe
    value: str
    verdict: str  # refused, ran, or one of BAD
    detail: str  # the refusal's line, or what was wrong
    problems: tuple[str, ...]  # every insane finding of a run that finished, by where
    wall_s: float
    peak_rss_mb: float


def numeric_keys(cls=SimConfig, prefix: str = "") -> list[tuple[str, bool]]:
    """(key, is a list) of every int or float field of the config, nested sections too."""
    keys = []
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        hint = hints[f.name]
        if hasattr(hint, "__dataclass_fields__"):
            keys += numeric_keys(hint, f"{prefix}{f.name}.")
            continue
        kinds = set(typing.get_args(hint)) or {hint}
        if kinds & {int, float}:
            keys.append((prefix + f.name, False))
        elif any(
            typing.get_origin(k) is tuple and typing.get_args(k)[0] in (int, float) for k in kinds
        ):
            keys.append((prefix + f.name, True))
    return keys


def probes() -> list[Probe]:
    out = [Probe("", f"({task} as it is)", base, False, task) for task, base in TASKS.items()]
    for key, is_list in numeric_keys():
        task = SECTION_TASK.get(key.split(".")[0], "simulate")
        out.append(Probe(key, key, (*TASKS[task], *NEEDS.get(key, ())), is_list, task))
        for name, extra in VARIANTS.get(key, {}).items():
            task_of = "simulate" if extra == ONE_RUN else task
            runs = (*TASKS[task_of], *extra)
            out.append(Probe(key, f"{key} ({name})", runs, is_list, task_of))
    for name, extra in ENGINE_ARGS.items():
        key = f"engine_args.{name}"
        engine = next((e for e in extra if e.startswith("engine=")), "")
        label = f"{key} ({engine[7:]})" if engine else key
        out.append(Probe(key, label, (*TASKS["simulate"], *extra), False, "simulate"))
    return out


def composed_keys() -> set[str]:
    """Every key scenarios/config.yaml sets (others are given as ++KEY=VALUE)."""
    data = yaml.safe_load((REPO / "scenarios" / "config.yaml").read_text())

    def walk(node, prefix):
        for k, v in node.items():
            yield prefix + str(k)
            if isinstance(v, dict):
                yield from walk(v, f"{prefix}{k}.")

    return set(walk(data, ""))


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def run_one(probe: Probe, value: str, scratch: Path, files: dict, known: set) -> Outcome:
    try:
        return _run_one(probe, value, scratch, files, known)
    except Exception as exc:  # the probe's own failure: reported as one, never lost
        return Outcome(probe, value, "FAILED", f"probe: {exc!r}"[:300], (), 0.0, 0.0)


def _run_one(probe: Probe, value: str, scratch: Path, files: dict, known: set) -> Outcome:
    out_dir = Path(tempfile.mkdtemp(dir=scratch))
    others = [o.format(**files) for o in probe.overrides if o.split("=")[0] != probe.key]
    argv = [sys.executable, "-m", "sim", *others, f"hydra.run.dir={out_dir / 'run'}"]
    if probe.key:
        given = f"[{value}]" if probe.is_list else value
        plus = "" if probe.key in known or probe.key.startswith("engine_args.") else "++"
        argv.append(f"{plus}{probe.key}={given}")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("SIM_DEBUG", None)
    start = time.perf_counter()
    with (out_dir / "stdout").open("wb") as so, (out_dir / "stderr").open("wb") as se:
        proc = subprocess.Popen(
            argv, cwd=out_dir, stdout=so, stderr=se, env=env,
            preexec_fn=_limit_memory, start_new_session=True,
        )  # fmt: skip
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            _kill_group(proc.pid)

        timer = threading.Timer(TIMEOUT_S, kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
    _kill_group(proc.pid)  # the workers it left behind, if any
    wall = time.perf_counter() - start
    stdout = (out_dir / "stdout").read_text(errors="replace")
    stderr = (out_dir / "stderr").read_text(errors="replace")
    verdict, detail = judge(proc.returncode, killed.is_set(), stdout, stderr)
    problems = insane(out_dir / "run") if verdict == "ran" else ()
    return Outcome(probe, value, verdict, detail, problems, wall, usage.ru_maxrss / 1024)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def judge(rc: int, killed: bool, stdout: str, stderr: str) -> tuple[str, str]:
    both = stdout + stderr
    if killed:
        return "HANG", f"killed after {TIMEOUT_S} s"
    if "MemoryError" in both or rc in (-9, 137):
        return "MEMORY", _last(stderr) or f"exit {rc}"
    if "Traceback" in both:
        raised = [line for line in both.splitlines() if re.match(r"^[\w.]+(Error|Exception)", line)]
        return "TRACEBACK", (raised[-1] if raised else _last(both))[:300]
    if rc == 2:
        errors = [line for line in stderr.splitlines() if line.startswith("sim: error:")]
        if len(errors) == 1 and len(errors[0]) < 2000:
            return "refused", errors[0][len("sim: error: ") :]
        return "FAILED", f"exit 2 without one error line: {_last(stderr)}"
    if rc != 0:
        return "FAILED", f"exit {rc}: {_last(stderr)}"
    return "ran", ""


def _last(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def insane(run_dir: Path) -> tuple[str, ...]:
    """Every insane finding of a finished run, each as `where: what` (`where` without list
    indices, so that a task's own findings can be told from a value's)."""
    import pandas as pd  # only for the runs that finished

    found = []
    for path in sorted(run_dir.rglob("summary.json")):
        found += _insane_json(json.loads(path.read_text()), str(path.relative_to(run_dir)))
    for path in sorted(run_dir.rglob("requests.parquet")):
        df = pd.read_parquet(path)
        if not {"status", "ttft_s", "tpot_s", "output_tokens"} <= set(df.columns):
            continue  # not a run's requests (a scenario's own table)
        if "e2el_s" not in df.columns:  # long_context's table: its times instead
            df["e2el_s"] = df["finish_s"] - df["arrival_s"]
        done = df[df["status"] == "finished"]
        many = done["output_tokens"] > 1
        checks = {"TTFT": done["ttft_s"], "E2E": done["e2el_s"], "TPOT": done.loc[many, "tpot_s"]}
        for name, col in checks.items():
            bad = ~(col.astype(float).map(math.isfinite) & (col > 0))
            if bad.any():
                found.append(
                    f"{path.relative_to(run_dir)} {name}: {int(bad.sum())} of {len(done)} "
                    f"finished requests at {col[bad].iloc[0]!r}"
                )
    return tuple(found)


def _insane_json(node, where: str) -> list[str]:
    found = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ECHOED:
                continue
            here = f"{where}.{k}"
            found += _insane_json(v, here)
            signed = any(c in here.lower() for c in CHANGES)
            number = isinstance(v, (int, float)) and not isinstance(v, bool)
            if number and str(k).endswith("_ms") and v < 0 and not signed:
                found.append(f"{here}: negative ({v})")
    elif isinstance(node, list):
        for v in node:
            found += _insane_json(v, f"{where}[]")
    elif isinstance(node, float) and not math.isfinite(node):
        found.append(f"{where}: {node}")
    return found


def write_inputs(scratch: Path) -> dict:
    """The files the probes' runs read: a tiny validation case file, a trace and a bench JSON."""
    cases = scratch / "cases.yaml"
    tiny = {"closed_loop": {"concurrency": 4, "num_requests": 12, "input_len": 64, "output_len": 8}}
    case = {
        "engine": "vllm@0.10.2",
        "hardware": "h100-sxm",
        "model": "llama-3.1-8b",
        "cost_profile": "prior",
        "workload": tiny,
        "measured": {"mean_ttft_ms": 20.0, "mean_tpot_ms": 5.0},
    }
    cases.write_text(json.dumps({"cases": [{"id": f"c{i}", **case} for i in range(3)]}))
    trace = scratch / "trace.csv"
    rows = [f"{0.25 * i},{100 + 7 * i},{5 + i % 9}" for i in range(30)]
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + "\n".join(rows) + "\n")
    bench = scratch / "bench.json"
    lengths = {"input_lens": [100 + 7 * i for i in range(30)], "output_lens": [8] * 30}
    bench.write_text(json.dumps({**lengths, "request_rate": 4.0, "burstiness": 1.0}))
    return {"cases": str(cases), "trace": str(trace), "bench": str(bench)}


def settle(outcomes: list[Outcome]) -> list[Outcome]:
    """Each run's verdict with its insane findings: those its task's run has as it is are that
    run's (said once, in its row), not the value's."""
    base = {o.probe.task: set(o.problems) for o in outcomes if not o.probe.key}
    out = []
    for o in outcomes:
        own = [p for p in o.problems if not o.probe.key or p not in base.get(o.probe.task, ())]
        if own:
            o = Outcome(o.probe, o.value, "INSANE", "; ".join(own)[:600], o.problems, o.wall_s,
                        o.peak_rss_mb)  # fmt: skip
        out.append(o)
    return out


def table(outcomes: list[Outcome], values: list[str]) -> str:
    cells: dict[str, dict[str, str]] = {}
    for o in outcomes:
        cell = o.verdict if o.verdict in ("refused", "ran") else f"**{o.verdict}**"
        cells.setdefault(o.probe.label, {})[o.value] = cell
    names = [v if len(v) < 12 else "10**30" for v in values]
    lines = ["| key | " + " | ".join(names) + " |", "|---" + "|---" * len(values) + "|"]
    for label, row in cells.items():
        if set(row) == {"-"}:  # a task's run as it is: one run, said in every column
            row = dict.fromkeys(values, row["-"])
        lines.append(f"| `{label}` | " + " | ".join(row.get(v, "") for v in values) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2, help="runs at once (default 2)")
    ap.add_argument("--only", default=None, help="probe only keys whose label contains this")
    ap.add_argument("--values", default=None, help="comma-separated values (default: all seven)")
    ap.add_argument("--json", type=Path, default=None, help="write every outcome here")
    ap.add_argument("--lines", action="store_true", help="print every refusal's line too")
    args = ap.parse_args()
    values = args.values.split(",") if args.values else list(VALUES)
    chosen = [p for p in probes() if args.only is None or args.only in p.label]
    tasks = {p.task for p in chosen}
    todo = [p for p in probes() if not p.key and p.task in tasks] + [p for p in chosen if p.key]
    known = composed_keys()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="extreme_config_") as tmp:
        scratch = Path(tmp)
        files = write_inputs(scratch)
        pairs = [(p, v) for p in todo for v in (values if p.key else ["-"])]
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            outcomes = list(pool.map(lambda pv: run_one(*pv, scratch, files, known), pairs))
    outcomes = settle(outcomes)
    print(table(outcomes, values))
    bad = [o for o in outcomes if o.verdict in BAD]
    counts = {v: sum(o.verdict == v for o in outcomes) for v in ("refused", "ran", *BAD)}
    print(
        f"\n{len(outcomes)} runs in {time.perf_counter() - start:.0f} s: "
        + ", ".join(f"{n} {v}" for v, n in counts.items() if n)
        + f"; peak RSS at most {max((o.peak_rss_mb for o in outcomes), default=0):.0f} MB"
    )
    for o in bad:
        print(f"{o.verdict}: {o.probe.label}={o.value}: {o.detail}")
    if args.lines:
        for o in outcomes:
            if o.verdict == "refused":
                print(f"{o.probe.label}={o.value}: {o.detail}")
    if args.json:
        rows = [
            {
                "key": o.probe.label, "value": o.value, "verdict": o.verdict,
                "detail": o.detail, "wall_s": round(o.wall_s, 2),
                "peak_rss_mb": round(o.peak_rss_mb),
            }
            for o in outcomes
        ]  # fmt: skip
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
