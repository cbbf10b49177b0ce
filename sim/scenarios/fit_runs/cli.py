"""`python -m sim.calibrate --runs FILE [--only ID ...] --out PATH [KEY=VALUE ...]`: calibrate
each deployment of the runs to them (sim/scenarios/fit_runs/), refusing what cannot be fitted
with a one-line error naming the fix."""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import asdict
from pathlib import Path

from sim.config import SimConfig
from sim.errors import UserError
from sim.run.calibration import describe
from sim.scenarios.fit_runs import held_out
from sim.scenarios.fit_runs.fit import READS, choose_terms, errors, fit
from sim.scenarios.fit_runs.inputs import Run, by_deployment, parse_overrides, read_runs
from sim.scenarios.fit_runs.output import LABELS, Calibrated, write

CONTRADICTION = 0.15  # two runs of one workload measured further apart than this disagree


def base_config() -> SimConfig:
    return SimConfig.from_mapping({"output": {"report": False, "progress": False}})


def calibrate_runs(args, argv: list[str]) -> list[Path]:
    """The --runs mode of python -m sim.calibrate (its arguments parsed)."""
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    overrides = parse_overrides(args.overrides)
    only = [i for group in (args.only or []) for i in group]
    skipped: dict[str, int] | None = {} if args.held_out else None  # a suite: some cannot run
    runs = read_runs(args.runs, only, overrides, base_config(), skipped)
    asked = [t.strip() for t in args.terms.split(",") if t.strip()] if args.terms else None
    command = "python -m sim.calibrate " + shlex.join(argv)
    if args.held_out:
        for why, n in sorted((skipped or {}).items()):
            say(f"left out {n} runs: {why}")
        slices = held_out.study(runs, args.jobs, asked)
        if not slices:
            raise UserError(f"no deployment has {held_out.MIN_RUNS} runs to hold out")
        written = held_out.write(Path(args.out), slices, command)
        print(f"wrote {', '.join(str(p) for p in written)}")
        return written
    calibrated = []
    for deployment, group in by_deployment(runs):
        check_agreement(group)
        names = choose_terms(group, asked)
        say(f"{describe(deployment)}: {len(group)} runs, fitting {', '.join(names)}")
        result = fit(group, names, args.jobs, say)
        check_reproduced(group, result, args.tolerance)
        calibrated.append(Calibrated(deployment, group, result))
        shown = ", ".join(f"{n} {result.terms[n]:.4g} ± {result.sd[n]:.2g}" for n in result.names)
        say(f"  {shown} ({result.simulations} simulations, {result.seconds:.1f} s)")
    written = write(Path(args.out), calibrated, command)
    print(f"wrote {', '.join(str(p) for p in written)}")
    return written


def check_agreement(runs: list[Run]) -> None:
    """Refuse two runs of the same deployment and workload whose measurements disagree."""
    seen: dict[str, Run] = {}
    for run in runs:
        cfg = asdict(run.case.config)
        same = {k: cfg[k] for k in ("workload", "engine_args", "parallel")}
        sig = json.dumps(same, sort_keys=True, default=str)
        other = seen.get(sig)
        if other is None:
            seen[sig] = run
            continue
        for key in set(run.keys.values()) & set(other.keys.values()):
            a, b = other.case.measured[key], run.case.measured[key]
            if abs(a - b) / ((a + b) / 2) > CONTRADICTION:
                raise UserError(
                    f"runs {other.id} and {run.id} are the same deployment and workload but "
                    f"measured {key} {a:.4g} and {b:.4g} ({abs(a - b) / min(a, b) * 100:.0f}% "
                    "apart): they contradict each other; drop one (--only) or check that both "
                    "ran on the same deployment"
                )


def check_reproduced(runs: list[Run], result, tolerance: float) -> None:
    """Refuse a run the fitted terms cannot reproduce within `tolerance`."""
    worst = None
    for i, run in enumerate(runs):
        for key, e in (errors(run, result.after[i]) or {}).items():
            if abs(e) > tolerance and (worst is None or abs(e) > abs(worst[2])):
                worst = (run, key, e, result.after[i].predicted[key])
    if worst is None:
        return
    run, key, e, predicted = worst
    family = next(f for f, k in run.keys.items() if k == key)
    hint = READS.get(family, LABELS[family])
    raise UserError(
        f"run {run.id} cannot be reproduced: {key} measured {run.case.measured[key]:.4g}, the "
        f"best fit of the {len(runs)} runs gives {predicted:.4g} ({e * 100:+.1f}%, beyond "
        f"--tolerance {tolerance:g}); its {hint} disagrees with the others: drop it (--only) or "
        "accept the error with a larger --tolerance"
    )
