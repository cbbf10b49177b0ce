"""A multirun's sweep table: one row per run, written once the sweep ends, however it ran.

`python -m sim -m KEY=a,b,c ... hydra.sweep.dir=DIR` runs each point in DIR/<job number>/ (with
the joblib launcher on every core, or the Ray launcher on a cluster); Hydra then calls
SweepTable.on_multirun_end (sim/scenarios/sweep/callback.py) in the launching process, which
reads every run's .hydra/overrides.yaml and summary.json and writes DIR/sweep.parquet and
DIR/sweep.csv:

    the swept settings, by their own names (`max_num_batched_tokens`, `rate`; the dotted key
    where two share a name), then the summary's scalar metrics (`p99_ttft_ms`, ...), then
    `run_dir`.

The table holds this sweep's points and no others: a run dir another sweep left in DIR is set
aside when the sweep starts (sim/scenarios/sweep/points.py), and collect() reads only the run
dirs of the sweep's points. A run whose dir already holds a summary.json of the same
configuration (and the same input files) is not simulated again (sim/scenarios/runner.py), so
an interrupted sweep resumes where it stopped and the table still has every row.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from dataclasses import replace
from pathlib import Path
from stat import S_ISREG

import pandas as pd
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

from sim.cli import params_not_given, to_sim_config
from sim.errors import UserError
from sim.run.outputs import PARQUET_OPTIONS, atomic_write
from sim.run.setup import Setup
from sim.scenarios.sweep.points import Points, job_order, run_dirs

LOAD_KEYS = ("rate", "concurrency")  # the load of a sweep, when swept; the rest are settings


def split_columns(frame: pd.DataFrame) -> tuple[str | None, list[str]]:
    """(the load column or None, the setting columns) of a sweep table."""
    swept = list(frame.attrs.get("swept", []))
    load = next((k for k in LOAD_KEYS if k in swept), None)
    return load, [k for k in swept if k != load]


def label(row, settings: list[str]) -> str:
    """One setting's name in the report: `budget=512, cap=0`."""
    return ", ".join(f"{k}={fmt_value(row[k])}" for k in settings) or "(one setting)"


def fmt_value(v) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return "null" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def _overrides(run_dir: Path) -> dict[str, str]:
    path = run_dir / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return {}
    items = yaml.safe_load(path.read_text()) or []
    return dict(item.split("=", 1) for item in items if "=" in item)


# simulator figures (summary.json's "sim") worth a column of their own
SIM_COLUMNS = ("prefix_cache_hit_rate", "preemptions", "mean_batch_size", "kv_usage_peak")


def _metrics(summary: dict) -> dict:
    """The summary's top-level numbers, and a few simulator figures (the rest of the nested
    records stay in summary.json)."""
    out = {
        k: v for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    sim = summary.get("sim") or {}
    out |= {k: sim[k] for k in SIM_COLUMNS if k in sim}
    if (o := sim.get("overload")) and o["overloaded"] is not None:  # judged (sim/run/summary.py)
        out |= {k: o[k] for k in ("overloaded", "offered_rate", "served_rate")}
    if (a := summary.get("audit")) is not None:  # the physics audit (sim/run/audit.py)
        out["audit_violations"] = a["violations"]
    if d := summary.get("disagg"):  # a disaggregated run: its GPUs, transfers, TTFT parts
        out |= {"gpus": d["gpus"], "kv_transfer_mean_ms": d["transfer"]["mean_ms"]}
        out |= {f"mean_ttft_{p}_ms": v["mean"] for p, v in d["ttft_split_ms"].items()}
    return out


def collect(sweep_dir: Path, points: Points | None = None) -> pd.DataFrame:
    """One row per finished run under `sweep_dir`, of `points` alone when given (runs without a
    summary.json are left out and named in the frame's attrs["unfinished"])."""
    runs, unfinished = [], []
    for run_dir in sorted(run_dirs(sweep_dir), key=job_order):
        if points is not None and not points.owns(run_dir):
            continue
        summary = run_dir / "summary.json"
        if not summary.is_file():
            unfinished.append(run_dir.name)
            continue
        runs.append((run_dir, _overrides(run_dir), json.loads(summary.read_text())))
    keys = list(dict.fromkeys(k for _, o, _ in runs for k in o))  # in Hydra's order
    swept = [k for k in keys if len({o.get(k) for _, o, _ in runs}) > 1]
    leaves = Counter(k.rpartition(".")[2] for k in swept)
    names = {k: k.rpartition(".")[2] if leaves[k.rpartition(".")[2]] == 1 else k for k in swept}
    rows = []
    for run_dir, overrides, summary in runs:
        row = {names[k]: _value(overrides.get(k)) for k in swept}
        row |= _metrics(summary)
        row["run_dir"] = run_dir.name
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame.attrs["unfinished"] = unfinished
    frame.attrs["swept"] = [names[k] for k in swept]
    frame.attrs["keys"] = {names[k]: k for k in swept}
    slo = next((s["slo"] for _, _, s in runs if isinstance(s.get("slo"), dict)), {})
    frame.attrs["slo"] = {k.removesuffix("_ms"): v for k, v in slo.items()}
    return frame


def _value(text: str | None):
    """An override's value as YAML reads it (8192 -> int, 0.5 -> float, null -> None)."""
    if text is None:
        return None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def write_sweep_table(sweep_dir: Path, points: Points | None = None) -> pd.DataFrame:
    frame = collect(sweep_dir, points)
    atomic_write(
        sweep_dir / "sweep.parquet",
        lambda tmp: frame.to_parquet(tmp, index=False, **PARQUET_OPTIONS),
    )
    atomic_write(sweep_dir / "sweep.csv", lambda tmp: frame.to_csv(tmp, index=False))
    return frame


PROGRESS = "sweep_progress.json"  # the sweep's size and start, for each run's progress line


def sweep_size(overrides: list[str], params: dict | None = None) -> int:
    """Runs a basic sweep makes of these command-line overrides and the config's
    hydra.sweeper.params (a scenario's own sweep; the command line wins for a key it sets):
    the product of each swept key's number of values."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    extra = params_not_given(parsed, params or {})
    size = 1
    for o in [*parsed, *OverridesParser.create().parse_overrides(extra)]:
        if o.is_sweep_override():
            size *= len(list(o.sweep_string_iterator()))
    return size


def progress_line(sweep_dir: Path, now: float) -> str | None:
    """`sweep: 12/64 runs done, 41 s so far, about 3 min left`, from the finished runs' marks
    in the run dirs of this sweep's points (the rate from those finished since this sweep
    started, so resumed runs do not count)."""
    try:
        info = json.loads((sweep_dir / PROGRESS).read_text())
        started, total, dirs = float(info["started_at"]), int(info["total"]), info.get("dirs")
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
    paths = sweep_dir.glob(f"*/{DONE}") if dirs is None else (sweep_dir / d / DONE for d in dirs)
    marks = [t for t in map(_mtime, paths) if t is not None]
    done = min(len(marks), total)  # a sweep of another sweeper: its points are not known
    fresh = sum(1 for t in marks if t >= started)
    elapsed = max(now - started, 0.0)
    line = f"sweep: {done}/{total} runs done, {elapsed:.0f} s so far"
    left = total - done
    if fresh and left > 0:
        line += f", about {elapsed / fresh * left:.0f} s left"
    return line


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


DONE = "done.json"  # what a finished run ran (done_record), written after all its outputs


def done_record(config: dict) -> dict:
    """What a run's outputs depend on, as done.json holds it: its configuration, and the size
    and modification time of each file the configuration names (a model's config.json, a
    trace), so a resumed sweep runs a point again when such a file has changed."""
    files = {}
    for value in _strings(config):
        try:
            stat = os.stat(value) if 0 < len(value) < 4096 else None
        except (OSError, ValueError):  # not a path, or nothing there
            continue
        if stat is not None and S_ISREG(stat.st_mode):
            files[value] = [stat.st_size, stat.st_mtime_ns]
    config = json.loads(json.dumps(config, default=str))
    return {"config": config, "input_files": dict(sorted(files.items()))}


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def finished_summary(run_dir: Path, config: dict) -> dict | None:
    """The summary of a run dir that already ran exactly `config` (done_record), else None;
    a done.json of anything else is removed, as the run dir is about to run again (so the
    sweep's progress does not count it)."""
    done, summary = run_dir / DONE, run_dir / "summary.json"
    if not done.is_file():
        return None
    try:
        if summary.is_file() and json.loads(done.read_text()) == done_record(config):
            return json.loads(summary.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        pass
    done.unlink(missing_ok=True)
    return None


def mark_finished(run_dir: Path, config: dict) -> None:
    record = json.dumps(done_record(config), default=str, indent=1)
    atomic_write(run_dir / DONE, lambda tmp: tmp.write_text(record))


def engine_default_label(config, frame: pd.DataFrame) -> str | None:
    """The label (see label()) of the engine's own values of the swept engine arguments on
    this configuration, when every swept setting is an engine argument."""
    _, settings = split_columns(frame)
    keys = frame.attrs.get("keys", {})
    if not settings or not all(keys[s].startswith("engine_args.") for s in settings):
        return None
    try:
        cfg = to_sim_config(config)
        args = dict(cfg.engine_args) | {s: None for s in settings}
        setup = Setup.from_config(replace(cfg, engine_args=args))
    except (UserError, KeyError, ValueError):
        return None
    values = setup.settings.as_mapping()
    if not all(s in values for s in settings):
        return None
    return label({s: values[s]["value"] for s in settings}, settings)
