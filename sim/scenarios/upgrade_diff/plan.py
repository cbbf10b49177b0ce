"""upgrade_diff's plan: every check before the first simulation (versions, arguments, the
baseline and measured results), and the two versions' resolved settings and their difference.

A baseline is the before version simulated on a fixed workload (upgrade.baseline=simulated),
or a recorded run of it (a run dir, or a vllm bench serve result) that the simulated before is
checked against; without one the scenario refuses.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from sim.config import AUTO, SimConfig
from sim.engines.resolve import parse_engine_spec
from sim.engines.settings import EngineSettings
from sim.errors import UserError
from sim.scenarios.upgrade_diff.changes import Change, diff, resolved
from sim.workload.bench_results import bench_metrics

NO_BASELINE = (
    "upgrade_diff needs a pre-upgrade baseline: attribution explains the difference between "
    "two runs of one fixed workload, and without the before run there is nothing to explain "
    "the after run against (a throughput figure alone cannot say which setting moved it). "
    "Give the version upgraded from, upgrade.before=NAME@VERSION, with upgrade.baseline="
    "simulated (that version simulated on this workload) or upgrade.baseline=PATH (a run dir "
    "or a vllm bench serve --save-result JSON recorded before the upgrade)"
)
SIMULATED = "simulated"


@dataclass(frozen=True, slots=True)
class Recorded:
    """A real (or earlier) result: its metrics, where it came from, and its config if a run."""

    path: str
    kind: str  # "run_dir" | "bench_json"
    metrics: dict
    config: dict | None = None
    backend: str | None = None


@dataclass(frozen=True, slots=True)
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
    _check_auto_rate(cfg)
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
    notes += [
        f"{s.engine}@{s.version} has no rule set of its own: it runs with {s.engine} "
        f"{s.rule_set}'s rules (the nearest earlier release the catalogue knows)"
        for s in ((before,) if before.version == after.version else (before, after))
        if s.version != s.rule_set
    ]
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


OPEN_LOOP = ("poisson", "gamma", "constant", "trace", "bench_json")  # workloads with a rate


def _check_auto_rate(cfg: SimConfig) -> None:
    """What workload.rate=auto (sim/scenarios/upgrade_diff/rate.py) refuses."""
    w = cfg.workload
    if w.rate != AUTO:
        return
    if w.kind not in OPEN_LOOP:
        load = "its concurrency" if w.kind == "closed_loop" else "every request at once"
        raise UserError(
            f"workload.rate=auto needs a workload with a request rate ({', '.join(OPEN_LOOP)}); "
            f"workload={w.kind} has none (its load is {load})"
        )
    if cfg.upgrade.baseline != SIMULATED:
        raise UserError(
            f"workload.rate=auto with upgrade.baseline={cfg.upgrade.baseline}: the recorded "
            "baseline ran at its own rate, which the study must keep; drop workload.rate=auto"
        )


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
