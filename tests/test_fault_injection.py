"""Fault injection (issue 42, section 3): a small sweep and a small upgrade study are killed at
seeded random moments, several times, by SIGINT, SIGTERM or SIGKILL to their whole process
group (the launcher's and joblib's workers too), each time resumed by the same command into
the same directory; the finished outputs must be byte-identical to those of a run never
interrupted, but for the fields that hold wall and CPU seconds (docs/reliability.md)."""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import as_terminal_job

REPO = Path(__file__).resolve().parent.parent
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
TIMED = {"wall_time_s", "cpu_time_s", "started_at"}  # the machine's clock, not the simulation's

pytestmark = pytest.mark.skipif(os.name != "posix", reason="signals and process groups")


def _run(cmd: list[str], timeout: float = 300) -> float:
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return time.monotonic() - start


def _kill_at(cmd: list[str], delay: float, sig: signal.Signals) -> str:
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=as_terminal_job
    )
    time.sleep(delay)
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    _, err = proc.communicate(timeout=120)
    for _ in range(100):  # no process of the group outlives the kill (plot or joblib workers)
        left = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True)
        if not left.stdout.strip():
            break
        time.sleep(0.1)
    assert not left.stdout.strip(), f"left behind after {sig.name}: {left.stdout}"
    return err.decode()


def _without_times(value):
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k not in TIMED}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def _contents(folder: Path, skip: set[str]) -> dict[str, bytes]:
    """Every file under `folder` as compared: JSON without its timed fields, CSV without
    their columns, Hydra's own record of the run (its dir, its job's time) left out."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if not path.is_file() or set(rel.parts) & skip or rel.parts[-1].startswith("."):
            continue
        data = path.read_bytes()
        if path.suffix == ".json":
            data = json.dumps(_without_times(json.loads(data)), sort_keys=True).encode()
        elif path.suffix == ".csv":
            frame = pd.read_csv(io.BytesIO(data))
            data = frame.drop(columns=[c for c in frame if c in TIMED]).to_csv().encode()
        out[str(rel)] = data
    return out


def _check_resumes(tmp_path: Path, make_cmd, seed: int, kills: int, skip: set[str]) -> None:
    fresh = tmp_path / "fresh"
    took = _run(make_cmd(fresh))
    rng = random.Random(seed)
    hurt = tmp_path / "hurt"
    for _ in range(kills):
        _kill_at(make_cmd(hurt), rng.uniform(0.2, took), rng.choice(SIGNALS))
    _run(make_cmd(hurt))
    want, got = _contents(fresh, skip), _contents(hurt, skip)
    assert sorted(got) == sorted(want)
    differ = [name for name in want if got[name] != want[name]]
    assert not differ, f"differ from the uninterrupted run: {differ}"


def test_a_sweep_killed_at_random_then_resumed_is_the_uninterrupted_sweep(tmp_path):
    def sweep(folder: Path) -> list[str]:
        return [
            sys.executable, "-m", "sim", "-m", f"hydra.sweep.dir={folder}",
            "workload.num_requests=200", "workload.rate=4,12", "output.progress=false",
        ]  # fmt: skip

    # .hydra: Hydra's record of each run (its own paths and times); simulations: none here
    _check_resumes(tmp_path, sweep, seed=42, kills=3, skip={".hydra", "multirun.yaml"})


def test_an_upgrade_study_killed_at_random_then_resumed_is_the_uninterrupted_study(tmp_path):
    def study(folder: Path) -> list[str]:
        return [
            sys.executable, "-m", "sim", "scenario=upgrade_diff", f"hydra.run.dir={folder}",
            "workload.num_requests=40", "upgrade.seeds=2", "upgrade.budget=8",
            "upgrade.loads=[1.0]", "upgrade.jobs=2", "output.progress=false",
        ]  # fmt: skip

    # simulations/: the kept outcomes themselves (the resume's means, compared by their use)
    _check_resumes(tmp_path, study, seed=7, kills=3, skip={".hydra", "simulations"})
