"""A sweep's points: which run dirs of its sweep dir are its own, and the rest set aside.

Hydra's basic sweeper runs job k of a sweep (its k-th combination of the swept values) in
DIR/<k>/ (hydra.sweep.subdir: ${hydra.job.num}) and writes the job's overrides to
DIR/<k>/.hydra/overrides.yaml as it starts. A second sweep into the same DIR with other values
(or over another key) would find the first one's run dirs there: DIR/<k>/ of another point, or
a k beyond its own count. So when a sweep starts (SweepTable.on_multirun_start), every run dir
of DIR that is not one of its points is moved into DIR/set_aside/<date>_<time>/ (a folder the
table never reads), and one line says how many and where:

    sweep: set aside 2 run dirs that are not this sweep's points, and the sweep table and
    report they made, in D/set_aside/2026-12-07_06-41-09

A run dir of one of its points (the same overrides, in any order) stays: if it finished the same
configuration it is reused (done.json, sim/scenarios/sweep/table.py), else (interrupted, or the
config changed under the same overrides) it runs again. The sweep's own outputs (the table,
report.md, sweep_summary.json, the plots, multirun.yaml) stay only when the sweep that last
started in DIR had the same points (its multirun.yaml says which); else they are set aside too.
With another sweeper than Hydra's basic one the points are not known ahead: nothing is set
aside, and the table reads every run dir.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

SET_ASIDE = "set_aside"  # DIR/set_aside/<date>_<time>/: what an earlier sweep left in DIR
JOB_SUBDIR = "${hydra.job.num}"  # Hydra's default hydra.sweep.subdir (scenarios/config.yaml)
# what a sweep writes beside its run dirs (sim/scenarios/sweep/table.py and report.py)
TABLE = ("sweep.parquet", "sweep.csv")
REPORT = ("report.md", "report.html", "sweep_summary.json")
PLOTS = ("pareto.png", "goodput.png", "hit_rate.png", "ttft.png")
OUTPUTS = (*TABLE, *REPORT, *PLOTS)
CONFIG = "multirun.yaml"  # Hydra's copy of the sweep's config, written as the sweep starts


@dataclass(frozen=True, slots=True)
class Points:
    """The jobs of one sweep: each job's overrides in Hydra's order, and its run dir's name
    (None where hydra.sweep.subdir is not the job number: run dirs then match by overrides)."""

    overrides: tuple[tuple[str, ...], ...]
    names: tuple[str, ...] | None

    def owns(self, run_dir: Path) -> bool:
        """Whether `run_dir` is one of these points' (its name, and its overrides in any
        order: Hydra's order follows the command line's). A job's dir without overrides to
        read was stopped as Hydra began it (it writes them first thing): its own, run again."""
        found = overrides_of(run_dir)
        if found is None:
            return self.names is not None and run_dir.name in self.names
        if self.names is None:
            return sorted(found) in (sorted(o) for o in self.overrides)
        k = int(run_dir.name) if run_dir.name.isdigit() else len(self.names)
        if k >= len(self.names) or self.names[k] != run_dir.name:
            return False
        return sorted(found) == sorted(self.overrides[k])


def sweep_points(config) -> Points | None:
    """The points of the sweep a multirun's config makes, as Hydra's basic sweeper makes them
    (hydra.sweeper.params first, then the command line; a key given twice takes the last
    value), or None for another sweeper or overrides it does not split."""
    sweeper = config.hydra.sweeper
    if sweeper.get("_target_", "") != f"{BasicSweeper.__module__}.BasicSweeper":
        return None
    params = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
    task = list(OmegaConf.to_container(config.hydra.overrides.task, resolve=False))
    try:
        parsed = OverridesParser.create().parse_overrides([*params, *task])
        batches = BasicSweeper.split_arguments(parsed, None)
    except Exception:  # Hydra's sweeper reports it, in its own words
        return None
    jobs = tuple(tuple(job) for batch in batches for job in batch)
    subdir = OmegaConf.to_container(config.hydra.sweep, resolve=False).get("subdir")
    names = tuple(str(k) for k in range(len(jobs))) if subdir == JOB_SUBDIR else None
    return Points(jobs, names)


def overrides_of(run_dir: Path) -> list[str] | None:
    """A run dir's overrides (.hydra/overrides.yaml), or None where it has none to read."""
    try:
        items = yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return [str(i) for i in items] if isinstance(items, list) else None


def run_dirs(sweep_dir: Path) -> list[Path]:
    """The run dirs in a sweep dir: its folders that Hydra ran a job in (a .hydra folder)."""
    return [p for p in sweep_dir.iterdir() if p.is_dir() and (p / ".hydra").is_dir()]


def set_aside(sweep_dir: Path, points: Points, earlier: Points | None, now: float) -> str | None:
    """Move what is not this sweep's out of `sweep_dir` (see the module's note) and return the
    line that says so, or None when everything there is its own. `earlier`: the points of the
    sweep that last started in `sweep_dir` (its multirun.yaml), None where not known."""
    strays = sorted((p for p in run_dirs(sweep_dir) if not points.owns(p)), key=job_order)
    ours = earlier == points
    outputs = [] if ours else [sweep_dir / n for n in OUTPUTS if (sweep_dir / n).is_file()]
    if not strays and not outputs:
        return None
    folder = _new_folder(sweep_dir / SET_ASIDE, now)
    config = [sweep_dir / CONFIG] if not ours and (sweep_dir / CONFIG).is_file() else []
    for path in [*strays, *outputs, *config]:
        path.rename(folder / path.name)
    what = []
    if strays:
        s = "s" if len(strays) > 1 else ""
        what.append(f"{len(strays)} run dir{s} that {'are' if s else 'is'} not this sweep's points")
    if outputs:
        what.append("an earlier sweep's table and report")
    return f"sweep: set aside in {folder}: {', and '.join(what)}"


def earlier_points(sweep_dir: Path) -> Points | None:
    """The points of the sweep that last started in `sweep_dir`, from the multirun.yaml Hydra
    wrote there (None: none, or not a basic sweep)."""
    try:
        return sweep_points(OmegaConf.load(sweep_dir / CONFIG))
    except Exception:  # unreadable, or not Hydra's: its outputs are set aside
        return None


def job_order(path: Path) -> tuple:
    """Run dirs by job number (10 after 9), then any other name."""
    return (0, int(path.name), "") if path.name.isdigit() else (1, 0, path.name)


def _new_folder(parent: Path, now: float) -> Path:
    """parent/<date>_<time>, with _2, _3, ... when two sweeps start within a second."""
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(now))
    for n in range(1, 1000):
        folder = parent / (stamp if n == 1 else f"{stamp}_{n}")
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
    raise FileExistsError(f"{parent}/{stamp}_*: a thousand folders already")
