"""Sweeps: the sweep table from the run dirs, and an interrupted sweep resuming."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from sim.sweep import DONE, PROGRESS, collect, progress_line, sweep_size, write_sweep_table


def fake_run(root, name, overrides: list[str], summary: dict) -> None:
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    if summary is not None:
        (run / "summary.json").write_text(json.dumps(summary))


def test_table_from_run_dirs(tmp_path):
    # runs written by different processes (or machines) into one sweep dir, in any order
    for k, (budget, rate) in enumerate([(512, 4.0), (512, 8.0), (2048, 4.0), (2048, 8.0)]):
        fake_run(
            tmp_path,
            str(10 - k),  # job numbers sort numerically, not as text
            [
                "workload.num_requests=20",
                f"engine_args.max_num_batched_tokens={budget}",
                f"workload.rate={rate}",
            ],
            {"p99_ttft_ms": budget / rate, "completed": 20, "sim": {"steps": 1}, "ok": True},
        )
    fake_run(tmp_path, "11", ["engine_args.max_num_batched_tokens=4096"], None)  # interrupted
    frame = write_sweep_table(tmp_path)
    # swept settings by their own names, then the metrics, then the run dir
    assert list(frame.columns) == ["max_num_batched_tokens", "rate", "p99_ttft_ms", "completed",
                                   "run_dir"]  # fmt: skip
    assert list(frame["run_dir"]) == ["7", "8", "9", "10"]
    assert list(frame["max_num_batched_tokens"]) == [2048, 2048, 512, 512]
    assert list(frame["p99_ttft_ms"]) == [256.0, 512.0, 64.0, 128.0]
    assert frame.attrs["unfinished"] == ["11"]
    on_disk = pd.read_parquet(tmp_path / "sweep.parquet")
    as_csv = pd.read_csv(tmp_path / "sweep.csv", dtype={"run_dir": str})
    pd.testing.assert_frame_equal(on_disk, as_csv, check_dtype=False)


def test_two_settings_with_one_name_keep_their_keys(tmp_path):
    for k, v in enumerate((1, 2)):
        overrides = [
            f"upgrade.before_args.max_num_seqs={v}",
            f"upgrade.after_args.max_num_seqs={v * 2}",
        ]
        fake_run(tmp_path, str(k), overrides, {"x": v})
    assert list(collect(tmp_path).columns) == [
        "upgrade.after_args.max_num_seqs",
        "upgrade.before_args.max_num_seqs",
        "x",
        "run_dir",
    ]


def sweep(out, *extra):
    cmd = [
        sys.executable, "-m", "sim", "-m", "hydra/launcher=joblib", f"hydra.sweep.dir={out}",
        "workload.num_requests=20", "output.report=false", "output.progress=false",
        "engine_args.max_num_batched_tokens=1024,2048", "workload.rate=4,8", *extra,
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_interrupted_sweep_resumes(tmp_path):
    out = sweep(tmp_path)
    assert "sweep: 4 runs" in out
    assert "sweep: 4/4 runs done" in out  # the last run to finish sees them all
    first = pd.read_csv(tmp_path / "sweep.csv")
    assert sorted(zip(first["max_num_batched_tokens"], first["rate"], strict=True)) == [
        (1024, 4), (1024, 8), (2048, 4), (2048, 8)]  # fmt: skip
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.glob("*/summary.json")}
    # an interruption: run 2 had not finished (no completion mark)
    (tmp_path / "2" / DONE).unlink()
    out = sweep(tmp_path)
    assert out.count("already finished, not run again") == 3
    assert "/2: already finished" not in out
    for path, stamp in stamps.items():
        unchanged = path.stat().st_mtime_ns == stamp
        assert unchanged == (path.parent.name != "2"), path
    # the same settings, the same seed: the rerun run gives the same row
    pd.testing.assert_frame_equal(first, pd.read_csv(tmp_path / "sweep.csv"))
    # a changed configuration in the same dir is run again, not taken from the old one
    out = sweep(tmp_path, "seed=1")
    assert "already finished" not in out


def test_ray_launcher_on_a_local_cluster(tmp_path):
    """A 2-point sweep through hydra/launcher=ray, on a Ray head this test starts, addressed
    as an existing cluster would be (hydra.launcher.ray.init.address)."""
    import shutil
    import socket

    ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray is None:
        pytest.skip("ray is not installed (pip install -e '.[ray]')")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    start = [ray, "start", "--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false"]
    started = subprocess.run(start, capture_output=True, text=True, env=env, timeout=180)
    assert started.returncode == 0, started.stderr[-3000:]
    try:
        cmd = [
            sys.executable, "-m", "sim", "-m", "hydra/launcher=ray",
            "hydra.launcher.ray.init.address=auto",  # the cluster this machine runs
            "+hydra.launcher.ray.init.object_store_memory=null",  # the cluster's own
            f"hydra.sweep.dir={tmp_path / 'sweep'}", "workload.num_requests=20",
            "output.report=false", "output.progress=false",
            "engine_args.max_num_batched_tokens=1024,2048",
        ]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
    finally:
        subprocess.run([ray, "stop", "--force"], capture_output=True, env=env, timeout=120)
    table = pd.read_csv(tmp_path / "sweep" / "sweep.csv")
    assert list(table["max_num_batched_tokens"]) == [1024, 2048]
    assert (table["completed"] == 20).all()
    # the same runs under joblib give the same numbers (the seed, not the launcher, decides)
    local = tmp_path / "local"
    subprocess.run(
        [*cmd[:4], "hydra/launcher=joblib", f"hydra.sweep.dir={local}", *cmd[8:]],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    for k in ("0", "1"):
        a = json.loads((tmp_path / "sweep" / k / "summary.json").read_text())
        b = json.loads((local / k / "summary.json").read_text())
        for s in (a, b):
            s["sim"].pop("wall_time_s")
        assert a == b


def test_sweep_size_and_progress(tmp_path):
    assert sweep_size(["a=1,2,3", "b=range(0,4)", "c=5", "hydra/launcher=joblib"]) == 12
    assert progress_line(tmp_path, 0.0) is None  # not a sweep dir
    (tmp_path / PROGRESS).write_text(json.dumps({"total": 8, "started_at": 100.0}))
    for k, finished_at in enumerate((50.0, 110.0, 120.0)):  # one resumed, two new
        (tmp_path / str(k)).mkdir()
        (tmp_path / str(k) / DONE).write_text("{}")
        os.utime(tmp_path / str(k) / DONE, (finished_at, finished_at))
    # 2 runs in 40 s -> 20 s each for the 5 left
    assert progress_line(tmp_path, 140.0) == "sweep: 3/8 runs done, 40 s so far, about 100 s left"
