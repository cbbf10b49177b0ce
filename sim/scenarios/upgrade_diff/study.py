"""scenario=upgrade_diff: which changed setting made the upgrade slower (or faster), and why.

baseline     the before version simulated on a fixed workload (common random numbers: every
             run of one seed sees the same arrivals and lengths), or a recorded run of it
             (a run dir, or a vllm bench serve result) that the simulated before is checked
             against first; without one the scenario refuses
diff         every resolved setting that differs, with its category and rule
attribution  one at a time both ways, a minimal set (delta debugging), Shapley values with
             95% intervals over seeds, by category plus the interaction
unexplained  with real results of both versions, the measured change minus the simulated one
load sweep   before and after at several loads around the before version's capacity
report       summary.json, report.md with the verdict, a waterfall, the settings table, the
             load sweep, and the engine flags that restore the old behaviour
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from sim.config import SimConfig
from sim.engines.resolve import parse_engine_spec
from sim.engines.settings import INVERTED, EngineSettings
from sim.errors import UserError
from sim.scenarios.upgrade_diff.mixtures import (
    KERNELS,
    LOWER_IS_BETTER,
    METRICS,
    Attribution,
    Change,
    attribute,
    diff,
    resolved,
    run_tasks,
)

NO_BASELINE = (
    "upgrade_diff needs a pre-upgrade baseline: attribution explains the difference between "
    "two runs of one fixed workload, and without the before run there is nothing to explain "
    "the after run against (a throughput figure alone cannot say which setting moved it). "
    "Give the version upgraded from, upgrade.before=NAME@VERSION, with upgrade.baseline="
    "simulated (that version simulated on this workload) or upgrade.baseline=PATH (a run dir "
    "or a vllm bench serve --save-result JSON recorded before the upgrade)"
)
SIMULATED = "simulated"
MATCH_WARN_PCT = 10.0  # a simulated before further than this from the baseline is flagged
APPEARS_PCT = 5.0  # a change smaller than this at a load does not count as appearing there


@dataclass(frozen=True)
class Recorded:
    """A real (or earlier) result: its metrics, where it came from, and its config if a run."""

    path: str
    kind: str  # "run_dir" | "bench_json"
    metrics: dict
    config: dict | None = None
    backend: str | None = None


@dataclass(frozen=True)
class Plan:
    cfg: SimConfig  # the workload every simulation runs (seed per attribution seed)
    before: EngineSettings
    after: EngineSettings
    changes: list[Change]
    baseline: Recorded | None  # None: the simulated before is the baseline
    measured_before: Recorded | None
    measured_after: Recorded | None
    notes: tuple[str, ...] = ()


def _args(common, side) -> dict:
    out = {k: v for k, v in (common or {}).items() if v is not None}
    out |= {k: v for k, v in (side or {}).items() if v is not None}
    return out


def load_recorded(path: str, what: str) -> Recorded:
    """A run dir (its summary.json) or a vllm bench serve result JSON."""
    from sim.workload.bench_results import bench_metrics

    p = Path(path).expanduser()
    if p.is_dir():
        summary = p / "summary.json"
        if not summary.is_file():
            raise UserError(f"{what}={path}: no summary.json in that folder (is it a run dir?)")
        data = _json(summary, what)
        if "upgrade" in data or "validation" in data or "request_throughput" not in data:
            raise UserError(f"{what}={path}: not the run dir of one simulation or benchmark")
        return Recorded(
            str(p), "run_dir", bench_metrics(summary), data.get("config"), data.get("backend")
        )
    if not p.is_file():
        raise UserError(f"{what}={path}: no such file or run dir")
    data = _json(p, what)
    metrics = bench_metrics(p)
    missing = [m for m in ("request_throughput", "output_throughput") if m not in metrics]
    if missing or not isinstance(data, dict):
        raise UserError(
            f"{what}={path}: not a vllm bench serve result (no {', '.join(missing)}); save one "
            "with `vllm bench serve ... --save-result`"
        )
    return Recorded(str(p), "bench_json", metrics, None, data.get("backend"))


def _json(path: Path, what: str):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{what}={path}: not a JSON file ({exc})") from None


def make_plan(cfg: SimConfig) -> Plan:
    """Every check before the first simulation: versions, arguments, baseline, measurements."""
    up = cfg.upgrade
    baseline_path = up.baseline
    if baseline_path is None or str(baseline_path).strip().lower() in ("", "none", "null"):
        raise UserError(NO_BASELINE)
    if up.before is None:
        raise UserError(NO_BASELINE)
    if up.after is None:
        raise UserError(
            "upgrade.after=NAME@VERSION is required: the version upgraded to (for a what-if "
            "on one version, give it twice and set upgrade.after_args.NAME=VALUE)"
        )
    notes: list[str] = []
    baseline = None
    if baseline_path != SIMULATED:
        baseline = load_recorded(baseline_path, "upgrade.baseline")
        cfg, note = _baseline_workload(cfg, baseline)
        notes += note
    before = resolved(cfg, up.before, _args(cfg.engine_args, up.before_args))
    after = resolved(cfg, up.after, _args(cfg.engine_args, up.after_args))
    if baseline is not None and baseline.backend:
        _check_baseline_engine(baseline, before)
    changes = diff(cfg, before, after)
    mb = (
        load_recorded(up.measured_before, "upgrade.measured_before") if up.measured_before else None
    )
    ma = load_recorded(up.measured_after, "upgrade.measured_after") if up.measured_after else None
    if mb is None and ma is not None:
        if baseline is None:
            raise UserError(
                "upgrade.measured_after needs the measured before too: upgrade.measured_before="
                "PATH, or a recorded upgrade.baseline=PATH"
            )
        mb = baseline
    if mb is not None and ma is None:
        raise UserError("upgrade.measured_before needs upgrade.measured_after=PATH as well")
    return Plan(cfg, before, after, changes, baseline, mb, ma, tuple(notes))


def _baseline_workload(cfg: SimConfig, base: Recorded) -> tuple[SimConfig, list[str]]:
    """The workload the baseline ran: a bench result's own requests are replayed; a run dir
    must have run this configuration (else the fix is named)."""
    if base.kind == "bench_json":
        w = cfg.workload
        if (
            w.kind == "bench_json"
            and w.path
            and Path(w.path).resolve() != Path(base.path).resolve()
        ):
            raise UserError(
                f"upgrade.baseline={base.path} but workload.path={w.path}: the baseline must be "
                "a run of the workload simulated; drop workload.path"
            )
        if w.kind != "bench_json":
            new = replace(w, kind="bench_json", path=base.path, num_requests=None, rate=None)
            cfg = replace(cfg, workload=new)
        return cfg, [f"workload: the baseline's own requests, replayed from {base.path}"]
    if base.config is None:
        return cfg, []
    ran = base.config
    mine = asdict(cfg)
    wrong = []
    for key in ("hardware", "model", "dtype", "entry_point", "seed"):
        if key in ran and ran[key] != mine[key]:
            wrong.append(f"{key}={ran[key]}")
    for group in ("parallel", "workload"):
        for key, value in (ran.get(group) or {}).items():
            if key in mine[group] and mine[group][key] != value:
                wrong.append(f"{group}.{key}={'null' if value is None else value}")
    if wrong:
        raise UserError(
            f"upgrade.baseline={base.path} ran a different configuration; to compare like with "
            f"like, run with the baseline's: {' '.join(wrong[:8])}"
        )
    return cfg, [f"configuration: as the baseline run {base.path}"]


def _check_baseline_engine(base: Recorded, before: EngineSettings) -> None:
    backend = str(base.backend)
    if backend.startswith("sim:"):
        name, version, _ = parse_engine_spec(backend[4:])
        if (name, version) != (before.engine, before.version):
            raise UserError(
                f"upgrade.baseline={base.path} was a run of {name}@{version}, but upgrade.before="
                f"{before.engine}@{before.version}; set upgrade.before={name}@{version}"
            )


# ---- the engine flags that restore the old behaviour ------------------------------------------
NO_FLAG = {
    "cpu_step_overhead_s": "the release's engine-loop CPU time, not a setting",
    "cpu_per_seq_overhead_s": "the release's per-sequence CPU time, not a setting",
    "cpu_output_per_seq_s": "the release's output processing, not a setting",
    "cpu_exposed_s": "the release's CPU time left serial, not a setting",
    "prefix_hash_s_per_token": "the release's prefix hashing cost (vLLM 0.10+: "
    "--prefix-caching-hash-algo chooses the hash)",
    "block_watermark": "vLLM V0's admission watermark, not a flag",
    "cudagraph_memory_bytes": "how the release sizes the KV pool, not a flag",
    "non_torch_memory_bytes": "how the release sizes the KV pool, not a flag",
    KERNELS: "the kernels the release ships: to test, pin the older torch / FlashAttention / "
    "FlashInfer builds",
    "retract_decode_steps": "SGLang's retraction rule of the release, not a flag",
    "retract_ratio_offset": "SGLang's retraction rule of the release, not a flag",
    "new_token_ratio_decay": "set through --schedule-conservativeness",
    "min_new_token_ratio": "set through --schedule-conservativeness",
}
LAUNCH = {
    "vllm": "vllm serve {model}",
    "sglang": "python -m sglang.launch_server --model-path {model}",
    "trtllm": "trtllm-serve {model}",
}
GIB = 1 << 30
SGLANG_BACKENDS = {  # the simulator's backend names -> SGLang's --attention-backend values
    "FLASH_ATTN_FA3": "fa3",
    "FLASHINFER": "flashinfer",
    "FLASHINFER_MLA": "flashinfer",
    "TRITON_ATTN": "triton",
    "TRITON_MLA": "triton",
}


def restore_flag(after: EngineSettings, change: Change) -> tuple[str | None, str]:
    """(the flag or environment variable that sets the before value on the after version, or
    None; why not / what it does)."""
    name, old = change.name, change.before
    if name in NO_FLAG:
        return None, NO_FLAG[name]
    engine = after.engine
    own = after.display_name(name)
    shown = (not old) if own in INVERTED else old
    if engine == "vllm":
        major_minor = tuple(int(x) for x in after.version.split(".")[:2])
        match name:
            case "attention_backend":
                if str(old).startswith("FLASH_ATTN_FA"):
                    return (
                        f"VLLM_ATTENTION_BACKEND=FLASH_ATTN VLLM_FLASH_ATTN_VERSION={old[-1]}",
                        "environment",
                    )
                return f"VLLM_ATTENTION_BACKEND={old}", "environment"
            case "cudagraph_mode":
                return (
                    ("--enforce-eager", "") if old == "NONE" else (f"-O.cudagraph_mode={old}", "")
                )
            case "cudagraph_capture_sizes":
                if not old:
                    return "--enforce-eager", ""
                return f"-O.cudagraph_capture_sizes=[{','.join(map(str, old))}]", ""
            case "compile":
                return ("-O3" if old else "-O0"), "torch.compile level"
            case "scheduler":
                if old == "vllm_v0" and major_minor < (0, 11):
                    return "VLLM_USE_V1=0", "environment: the V0 engine"
                return None, "the V0 engine is gone from vLLM 0.11 on"
            case "policy":
                return f"--scheduling-policy {old}", ""
            case "swap_space_bytes":
                return f"--swap-space {old / GIB:g}", "GiB"
            case "async_output_proc":
                return ("--disable-async-output-proc" if not old else None), (
                    "" if not old else "on by default"
                )
    if engine == "sglang" and name == "attention_backend":
        flag = SGLANG_BACKENDS.get(str(old), str(old).lower())
        return f"--attention-backend {flag}", ""
    if engine == "trtllm" and name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
        return f"--{own} {old}", ""
    if engine == "trtllm":
        return None, f"{own}: {shown} in the file given to --extra_llm_api_options"
    flag = "--" + own.replace("_", "-")
    if isinstance(shown, bool):
        if engine == "vllm":
            return (flag if shown else f"--no-{own.replace('_', '-')}"), ""
        return (flag, "") if shown else (None, f"drop {flag}")
    if isinstance(shown, tuple):
        if name == "cudagraph_capture_sizes" and engine == "sglang":
            return (
                (f"--cuda-graph-max-bs {max(shown)}", "") if shown else ("--disable-cuda-graph", "")
            )
        shown = ",".join(map(str, shown))
    return f"{flag} {shown}", ""


# ---- load sweep --------------------------------------------------------------------------------
def load_points(plan: Plan, factors) -> tuple[str, list[dict]]:
    """(what is swept, [{factor, workload}]) around the before version's capacity: request
    rates x its saturated throughput (open loop), or concurrencies x the configured one."""
    w = plan.cfg.workload
    if w.kind == "closed_loop" or (w.kind == "bench_json" and _bench_concurrency(plan)):
        base = w.concurrency or _bench_concurrency(plan)
        points = [
            {"factor": f, "concurrency": max(1, round(base * f))} for f in sorted(set(factors))
        ]
        return "concurrency", points
    return "rate", [{"factor": f} for f in sorted(set(factors))]


def _bench_concurrency(plan: Plan) -> int | None:
    if plan.cfg.workload.kind != "bench_json":
        return None
    from sim.workload.traces import load_trace

    return load_trace(plan.cfg.workload.path).max_concurrency


def _open_loop(w, rate: float):
    """The workload's requests at a Poisson `rate` (a trace keeps its lengths)."""
    if w.kind == "trace":
        return replace(w, kind="poisson", lengths=w.path, path=None, rate=rate)
    if w.kind == "bench_json":
        return replace(w, rate=rate, burstiness=1.0)
    kind = w.kind if w.kind in ("poisson", "gamma", "constant") else "poisson"
    return replace(w, kind=kind, rate=rate, concurrency=None)


def capacity_rps(plan: Plan, jobs, progress=None, cache: Path | None = None) -> float:
    """The before version's saturated request throughput: every request queued at t=0."""
    w = plan.cfg.workload
    burst = replace(w, kind="burst", rate=None, concurrency=None)
    if w.kind in ("trace",):
        burst = replace(burst, lengths=w.path, path=None)
    if w.kind == "bench_json":
        burst = replace(w, rate=float("inf"), concurrency=None)
    cfg = replace(plan.cfg, workload=burst)
    (out,) = run_tasks([(cfg, ())], plan.before, plan.after, plan.changes, 1, progress, cache)
    return out["request_throughput"]


def load_sweep(plan: Plan, factors, jobs, progress=None, cache: Path | None = None) -> dict:
    """Before and after (seed of the first attribution seed) at each load."""
    what, points = load_points(plan, factors)
    capacity = None
    if what == "rate":
        capacity = capacity_rps(plan, jobs, cache=cache)
        for p in points:
            p["rate"] = round(capacity * p["factor"], 4)
    tasks = []
    everything = tuple(range(len(plan.changes)))
    for p in points:
        w = plan.cfg.workload
        w = _open_loop(w, p["rate"]) if what == "rate" else replace(w, concurrency=p["concurrency"])
        cfg = replace(plan.cfg, workload=w)
        tasks += [(cfg, ()), (cfg, everything)]
    out = run_tasks(tasks, plan.before, plan.after, plan.changes, jobs, progress, cache)
    rows = []
    for k, p in enumerate(points):
        b, a = out[2 * k], out[2 * k + 1]
        rows.append(
            p
            | {
                "before": {m: b[m] for m in METRICS},
                "after": {m: a[m] for m in METRICS},
                "change_pct": {m: _pct(b[m], a[m]) for m in METRICS},
            }
        )
    runs = len(tasks) + (capacity is not None)
    return {"swept": what, "capacity_rps": capacity, "points": rows, "simulations": runs}


def _pct(before: float, after: float) -> float:
    return (after - before) / before * 100 if before else 0.0


def adverse(metric: str, change_pct: float) -> float:
    """How much worse (positive) a change makes a metric."""
    return change_pct if LOWER_IS_BETTER[metric] else -change_pct


def appears_at(sweep: dict, metric: str) -> dict | None:
    """The lowest load at which the metric got at least APPEARS_PCT worse."""
    for p in sweep["points"]:
        if adverse(metric, p["change_pct"][metric]) >= APPEARS_PCT:
            return p
    return None


# ---- the whole scenario ------------------------------------------------------------------------
@dataclass(frozen=True)
class UpgradeResult:
    """upgrade_diff's answer: summary.json as a dict."""

    summary: dict


def run_upgrade_diff(cfg: SimConfig, progress=None, cache: Path | None = None) -> UpgradeResult:
    """Plan, attribute, sweep; the summary (report and plots are written by the caller).
    With `cache` (a folder), every simulation's outcome is kept there and a rerun into the
    same folder reuses them: an interrupted upgrade_diff resumes where it stopped."""
    started = time.perf_counter()
    plan = make_plan(cfg)
    up = cfg.upgrade
    seeds = [cfg.seed + k for k in range(up.seeds)]

    def tick(done, total):
        if progress:
            progress(done, total)

    result = attribute(
        plan.cfg,
        plan.before,
        plan.after,
        plan.changes,
        seeds,
        up.budget,
        up.headline,
        up.jobs,
        tick,
        cache,
    )
    simulations = result.simulations_run
    sweep = None
    if up.loads:
        n_sweep = 2 * len(set(up.loads))

        def tick2(k):
            tick(simulations + k, simulations + n_sweep)

        sweep = load_sweep(plan, up.loads, up.jobs, tick2, cache)
        simulations += sweep["simulations"]
    return UpgradeResult(summarize(plan, result, sweep, simulations, time.perf_counter() - started))


def _metrics(outcome: dict) -> dict:
    return {k: v for k, v in outcome.items() if k != "sim"} | {"sim": dict(outcome["sim"])}


def summarize(plan: Plan, r: Attribution, sweep, simulations: int, wall_s: float) -> dict:
    changes = plan.changes
    headline = r.headline
    rows = []
    for i, c in enumerate(changes):
        flag, why = restore_flag(plan.after, c)
        rows.append(
            {
                "setting": c.flag if c.name != KERNELS else KERNELS,
                "category": c.category.value,
                "before": _plain(c.before),
                "after": _plain(c.after),
                "rule": c.rule_after,
                "rule_before": c.rule_before,
                "effect_pct": {m: r.shapley_pct[m][i] for m in METRICS},
                "ci_pct": {m: r.ci_pct[m][i] for m in METRICS},
                "added_pct": {m: r.added_pct[m][i] for m in METRICS},
                "removed_pct": {m: r.removed_pct[m][i] for m in METRICS},
                "inert": i in r.inert,
                "in_minimal_set": i in r.minimal,
                "linked": [name for name, _, _ in c.linked],
                "restore_flag": flag,
                "restore_note": why,
                "field": c.name,
            }
        )
    order = sorted(
        range(len(rows)),
        key=lambda i: (-abs(rows[i]["effect_pct"][headline]), rows[i]["setting"]),
    )
    rows = [rows[i] for i in order]
    before, after = _metrics(r.before), _metrics(r.after)
    baseline = {"kind": SIMULATED, "path": None, "match_pct": None}
    if plan.baseline is not None:
        b = plan.baseline
        ran = r.outcome((), seed=r.seeds[0])  # the baseline's seed
        match = {m: _pct(b.metrics[m], ran[m]) for m in METRICS if m in b.metrics}
        baseline = {
            "kind": b.kind,
            "path": b.path,
            "measured": b.metrics,
            "simulated": {m: ran[m] for m in METRICS},
            "match_pct": match,
        }
    measured = None
    unexplained = None
    if plan.measured_after is not None:
        mb, ma = plan.measured_before.metrics, plan.measured_after.metrics
        both = [m for m in METRICS if m in mb and m in ma]
        measured = {
            "before": {"path": plan.measured_before.path, **{m: mb[m] for m in both}},
            "after": {"path": plan.measured_after.path, **{m: ma[m] for m in both}},
            "change_pct": {m: _pct(mb[m], ma[m]) for m in both},
        }
        unexplained = {m: measured["change_pct"][m] - r.change_pct[m] for m in both}
    minimal = [changes[i].flag if changes[i].name != KERNELS else KERNELS for i in r.minimal]
    summary = {
        "before": {"engine": f"{plan.before.engine}@{plan.before.version}", **before},
        "after": {"engine": f"{plan.after.engine}@{plan.after.version}", **after},
        "change_pct": dict(r.change_pct),
        "change_ci_pct": dict(r.change_ci_pct),
        "headline": headline,
        "attribution": rows,
        "by_category_pct": r.by_category_pct,
        "interaction_pct": dict(r.interaction_pct),
        "unexplained_pct": unexplained,
        "simulations_run": simulations,
        "minimal_set": minimal,
        "shapley": {
            "exact": r.exact,
            "orders_per_seed": r.orders,
            "seeds": r.seeds,
            "changes": len(changes),
            "inert": [rows_name(changes[i]) for i in r.inert],
            "inert_residual_pct": dict(r.inert_residual_pct),
            "attribution_simulations": r.simulations_run,
        },
        "baseline": baseline,
        "measured": measured,
        "load_sweep": sweep,
        "restore_command": restore_command(plan, r),
        "notes": list(plan.notes),
        "wall_time_s": wall_s,
    }
    summary["verdict"] = verdict(plan, r, summary)
    summary["config"] = asdict(plan.cfg)
    return summary


def rows_name(c: Change) -> str:
    return KERNELS if c.name == KERNELS else c.flag


def _plain(value):
    if isinstance(value, tuple):
        return list(value)
    return value


def restore_command(plan: Plan, r: Attribution) -> dict:
    """The after version launched with the flags that set every changed setting back (the
    changes that matter first), the minimal set's flags alone, and what no flag restores."""
    head = LAUNCH.get(plan.after.engine, "{model}").format(model=plan.cfg.model)
    effect = {i: abs(r.shapley_pct[r.headline][i]) for i in range(len(plan.changes))}
    chosen = list(r.minimal) + sorted(
        (i for i in range(len(plan.changes)) if i not in r.minimal),
        key=lambda i: (i in r.inert, -effect[i], i),
    )

    def command(indices) -> tuple[str, list[dict]]:
        env, flags, unflagged = [], [], []
        for i in indices:
            flag, why = restore_flag(plan.after, plan.changes[i])
            if flag is None:
                unflagged.append({"setting": rows_name(plan.changes[i]), "why": why})
            elif why.startswith("environment"):
                env.append(flag)
            else:
                flags.append(flag)
        return " ".join([*env, head, *flags]), unflagged

    full, unflagged = command(chosen)
    minimal, missing = command(r.minimal)
    return {
        "command": full,
        "minimal_command": minimal if len(missing) < len(r.minimal) else None,
        "not_restorable": unflagged,
    }


# ---- the verdict -------------------------------------------------------------------------------
NAMES = {
    "request_throughput": ("request throughput", "req/s", 2),
    "output_throughput": ("output throughput", "tok/s", 0),
    "mean_ttft_ms": ("mean TTFT", "ms", 1),
    "p99_ttft_ms": ("p99 TTFT", "ms", 1),
    "mean_tpot_ms": ("mean TPOT", "ms", 2),
    "p99_tpot_ms": ("p99 TPOT", "ms", 2),
}


def fmt(metric: str, value: float) -> str:
    _, unit, digits = NAMES[metric]
    return f"{value:,.{digits}f} {unit}"


def mechanism(a: dict, b: dict) -> list[str]:
    """What the simulation shows moving between two runs' figures, strongest first."""
    sa, sb = a["sim"], b["sim"]
    found: list[tuple[float, str]] = []

    def rel(x, y):
        return (y - x) / x if x else (1.0 if y else 0.0)

    p0, p1 = sa["preemptions"], sb["preemptions"]
    if abs(p1 - p0) >= max(5, 0.25 * max(p0, p1)):
        word = "more" if p1 > p0 else "fewer"
        found.append((abs(rel(p0, p1)) + 1, f"{word} preemptions ({p0:,.0f} -> {p1:,.0f})"))
    for key, up, down, unit, digits in (
        ("mean_batch_size", "larger batches", "smaller batches", "", 1),
        ("mean_step_ms", "longer steps", "shorter steps", " ms", 2),
        ("p99_step_ms", "longer worst steps", "shorter worst steps", " ms", 1),
        ("mean_tokens_per_step", "more tokens per step", "fewer tokens per step", "", 0),
    ):
        x, y = sa[key], sb[key]
        change = rel(x, y)
        if abs(change) >= 0.1:
            word = up if change > 0 else down
            label = key.replace("_", " ").replace(" ms", "").replace("mean ", "mean ")
            found.append(
                (abs(change), f"{word} ({label} {x:,.{digits}f}{unit} -> {y:,.{digits}f}{unit})")
            )
    h0, h1 = sa["prefix_cache_hit_rate"], sb["prefix_cache_hit_rate"]
    if abs(h1 - h0) >= 0.05:
        found.append((abs(h1 - h0), f"prefix-cache hits {h0:.0%} -> {h1:.0%}"))
    k0, k1 = sa["attention_kernel"], sb["attention_kernel"]
    if k0 != k1 or sa["kernel_family"] != sb["kernel_family"]:
        what = f"{k0} -> {k1}" if k0 != k1 else f"{sa['kernel_family']} -> {sb['kernel_family']}"
        found.append((0.5, f"a different kernel ({what})"))
    if (
        sa["num_kv_blocks"] != sb["num_kv_blocks"]
        and abs(rel(sa["num_kv_blocks"], sb["num_kv_blocks"])) >= 0.05
    ):
        found.append(
            (
                abs(rel(sa["num_kv_blocks"], sb["num_kv_blocks"])),
                f"a {'larger' if sb['num_kv_blocks'] > sa['num_kv_blocks'] else 'smaller'} KV "
                f"pool ({sa['num_kv_blocks']:,.0f} -> {sb['num_kv_blocks']:,.0f} blocks)",
            )
        )
    found.sort(key=lambda t: -t[0])
    return [text for _, text in found]


def verdict(plan: Plan, r: Attribution, s: dict) -> str:
    m = r.headline
    title, _, _ = NAMES[m]
    b, a = s["before"][m], s["after"][m]
    total = r.change_pct[m]
    versions = f"from {s['before']['engine']} to {s['after']['engine']}"
    if not plan.changes:
        same = f"{title} {fmt(m, b)}"
        return f"No setting differs {versions}: the two runs are the same ({same})."
    if abs(total) < 0.05:
        return f"{title} is unchanged {versions} ({fmt(m, b)})."
    word = "rose" if total > 0 else "fell"
    lead = f"{title} {word} {abs(total):.1f}% ({fmt(m, b)} -> {fmt(m, a)}) {versions}"
    rows = [row for row in s["attribution"] if not row["inert"]]
    pushing = [row for row in rows if row["effect_pct"][m] * total > 0]
    top, share = [], 0.0
    for row in pushing:  # sorted by size: the fewest that make up 70% of the change
        top.append(row)
        share += row["effect_pct"][m]
        if share / total >= 0.7 or len(top) == 3:
            break
    if not top:
        return lead + ": no single setting accounts for it; it comes from their interaction."

    def named(row) -> str:
        return (
            f"{row['setting']} ({_short(row['before'])} -> {_short(row['after'])}, "
            f"{row['category']}: {row['effect_pct'][m]:+.1f} ± {row['ci_pct'][m]:.1f} points)"
        )

    text = f"{lead}: {_join([named(row) for row in top])}"
    text += " accounts" if len(top) == 1 else " account"
    text += f" for {share:+.1f} of the {total:+.1f} points"
    against = [row for row in rows if row["effect_pct"][m] * total < 0]
    if share / total > 1.1 and against:
        offsets = [f"{row['setting']} ({row['effect_pct'][m]:+.1f})" for row in against[:2]]
        text += f", partly offset by {_join(offsets)}"
    idx = [i for i, c in enumerate(plan.changes) if rows_name(c) == top[0]["setting"]]
    how = mechanism(r.before, r.outcome(idx)) or mechanism(r.before, r.after)
    if how:
        text += f"; the simulation shows {' and '.join(how[:2])}"
    return text + "."


def _short(value) -> str:
    if isinstance(value, list):
        return f"{len(value)} sizes up to {max(value)}" if value else "none"
    if isinstance(value, float) and value and abs(value) < 1e-3:
        return f"{value:.2g}"
    return str(value)


def _join(parts: list[str]) -> str:
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]
