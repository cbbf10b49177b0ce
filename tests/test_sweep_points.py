"""A sweep dir holds one sweep: its table, report and progress count its own points; what an
earlier sweep into the same dir left is set aside (sim/scenarios/sweep/points.py); a point is
reused only for the same configuration and input files; a report that cannot be written ends
the sweep with one line and a failing status, no earlier report left (issue 42, 1.1)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from sim.scenarios.sweep.callback import SweepTable
from sim.scenarios.sweep.table import DONE, PROGRESS, finished_summary, mark_finished, progress_line

REPO = Path(__file__).resolve().parent.parent


def sweep(out: Path, *overrides: str, launcher: str = "basic") -> subprocess.CompletedProcess:
    cmd = [
        sys.executable, "-m", "sim", "-m", f"hydra/launcher={launcher}",
        f"hydra.sweep.dir={out}", "workload.num_requests=20", "output.progress=false", *overrides,
    ]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)


def progress(stdout: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in re.findall(r"sweep: (\d+)/(\d+) runs done", stdout)]


def set_aside_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("sweep: set aside")]


def test_sweeps_of_other_rates_into_one_dir_keep_to_their_own_points(tmp_path):
    """The issue's sweeps: fewer rates after more (under joblib, the default launcher), then a
    resume after an interruption with more rates that share the first two points: the table,
    report and progress count this sweep's points alone; the rest is set aside and said."""
    out = tmp_path / "sweep"
    first = sweep(out, "workload.rate=2,4,8,16")
    assert first.returncode == 0, first.stderr[-2000:]
    assert set_aside_lines(first.stdout) == []  # a new dir: nothing to set aside
    # 0 and 1 hold other rates, 2 and 3 are beyond this sweep's count
    second = sweep(out, "workload.rate=3,5", launcher="joblib")
    assert second.returncode == 0, second.stderr[-2000:]
    [line] = set_aside_lines(second.stdout)
    assert "4 run dirs that are not this sweep's points" in line, line
    assert "an earlier sweep's table and report" in line, line
    aside = Path(line.split("set aside in ")[1].split(":")[0])
    assert aside.parent == out / "set_aside"
    assert sorted(p.name for p in aside.iterdir()) == [
        "0", "1", "2", "3", "multirun.yaml", "report.html", "report.md", "sweep.csv",
        "sweep.parquet", "sweep_summary.json"]  # fmt: skip
    assert list(pd.read_csv(aside / "sweep.csv")["rate"]) == [2, 4, 8, 16]  # kept as it was
    assert list(pd.read_csv(out / "sweep.csv")["rate"]) == [3, 5]
    assert sorted(p.name for p in out.iterdir() if (p / ".hydra").is_dir()) == ["0", "1"]
    assert (out / "report.md").read_text().startswith("# Sweep report\n\n2 runs")
    assert "already finished" not in second.stdout
    assert progress(second.stdout) and all(b == 2 and a <= 2 for a, b in progress(second.stdout))
    # run 1 interrupted; the same two rates and two more: runs 0 and 1 are this sweep's (1
    # runs again), no run dir is set aside, only the table and report of the sweep before
    (out / "1" / DONE).unlink()
    (out / "1" / "summary.json").unlink()
    third = sweep(out, "workload.rate=3,5,8,16")
    assert third.returncode == 0, third.stderr[-2000:]
    assert third.stdout.count("already finished, not run again") == 1
    assert f"{out / '0'}: already finished" in third.stdout
    [line] = set_aside_lines(third.stdout)
    assert "run dir" not in line and "an earlier sweep's table and report" in line, line
    assert list(pd.read_csv(out / "sweep.csv")["rate"]) == [3, 5, 8, 16]
    assert all(b == 4 and a <= 4 for a, b in progress(third.stdout)), third.stdout


def test_a_sweep_over_another_key_then_a_report_that_cannot_be_written(tmp_path):
    """A sweep of engine_args.max_num_seqs into the dir of a rate sweep has a table of its own
    two points (it used to read all four and fail in the report, exit 0); then its report
    cannot be written (pareto.png is a folder): one line, a failing status, no report.md left."""
    out = tmp_path / "sweep"
    assert sweep(out, "workload.rate=2,4").returncode == 0
    other = sweep(out, "engine_args.max_num_seqs=64,128")
    assert other.returncode == 0, other.stderr[-2000:]
    assert "Callback" not in other.stderr and "Traceback" not in other.stderr
    [line] = set_aside_lines(other.stdout)
    assert "2 run dirs that are not this sweep's points" in line, line
    table = pd.read_csv(out / "sweep.csv")
    assert list(table.columns[:2]) == ["max_num_seqs", "completed"]
    assert list(table["max_num_seqs"]) == [64, 128]
    assert (out / "pareto.png").is_file() and "Use max_num_seqs=" in (out / "report.md").read_text()
    # the same sweep again (every point reused), its report blocked
    (out / "pareto.png").unlink()
    (out / "pareto.png").mkdir()
    failed = sweep(out, "engine_args.max_num_seqs=64,128")
    assert failed.returncode in (1, 2), failed.stderr[-2000:]  # 2: an output it cannot write
    assert failed.stdout.count("already finished, not run again") == 2
    [error] = failed.stderr.strip().splitlines()
    assert error.startswith("sim: error: writing the sweep's table and report failed: ")
    assert "pareto.png" in error and "report.md there before is removed" in error
    assert not (out / "report.md").exists() and not (out / "sweep_summary.json").exists()
    assert list(pd.read_csv(out / "sweep.csv")["max_num_seqs"]) == [64, 128]  # this sweep's


def test_a_point_is_reused_only_with_the_same_config_and_input_files(tmp_path):
    """done.json holds the configuration and the size and time of each file it names (here a
    model's config.json): a changed file runs the point again, and its old mark goes."""
    model = tmp_path / "config.json"
    model.write_text(json.dumps({"hidden_size": 4096}))
    run = tmp_path / "0"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"completed": 20}))
    config = {"model": str(model), "seed": 0, "workload": {"rate": 4.0}}
    mark_finished(run, config)
    assert finished_summary(run, config) == {"completed": 20}
    assert finished_summary(run, {**config, "seed": 1}) is None  # another configuration
    assert not (run / DONE).exists()  # about to run again: no longer counted as done
    mark_finished(run, config)
    stat = model.stat()
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # the file rewritten
    assert finished_summary(run, config) is None
    mark_finished(run, config)
    assert finished_summary(run, config) == {"completed": 20}


def test_progress_counts_this_sweeps_dirs_and_never_passes_the_total(tmp_path):
    record = {"total": 2, "started_at": 100.0, "dirs": ["0", "1"]}
    (tmp_path / PROGRESS).write_text(json.dumps(record))
    for name in ("0", "2", "3"):  # 2 and 3: not this sweep's (an earlier sweep's count)
        (tmp_path / name).mkdir()
        (tmp_path / name / DONE).write_text("{}")
        os.utime(tmp_path / name / DONE, (110.0, 110.0))
    assert progress_line(tmp_path, 120.0) == "sweep: 1/2 runs done, 20 s so far, about 20 s left"
    # another sweeper (its points not known ahead): every mark counted, at most the total
    (tmp_path / PROGRESS).write_text(json.dumps(record | {"dirs": None}))
    assert progress_line(tmp_path, 120.0) == "sweep: 2/2 runs done, 20 s so far"
    (tmp_path / PROGRESS).write_text("{}")  # a broken record: no line, no error
    assert progress_line(tmp_path, 120.0) is None


def test_a_sweep_dir_that_cannot_be_made_this_sweeps_is_one_line_and_exit_2(tmp_path, capsys):
    sweep_dir = tmp_path / "sweep"
    (sweep_dir / "5" / ".hydra").mkdir(parents=True)  # a run dir of another sweep's
    (sweep_dir / "set_aside").write_text("")  # where it would go: not a folder
    config = OmegaConf.create(
        {
            "hydra": {
                "sweep": {"dir": str(sweep_dir), "subdir": "${hydra.job.num}"},
                "sweeper": {
                    "_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                    "params": None,
                },
                "overrides": {"task": ["workload.rate=3,5"]},
            }
        }
    )
    with pytest.raises(SystemExit) as exit_:
        SweepTable().on_multirun_start(config)
    assert exit_.value.code == 2
    [error] = capsys.readouterr().err.strip().splitlines()
    assert error.startswith(f"sim: error: starting the sweep in {sweep_dir} failed: ")
    assert error.endswith("make it writable, or give another hydra.sweep.dir")
    assert (sweep_dir / "5").is_dir()  # left where it was
