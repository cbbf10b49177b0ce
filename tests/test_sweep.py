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

from sim.scenarios.sweep.table import (
    DONE,
    PROGRESS,
    collect,
    progress_line,
    sweep_size,
    write_sweep_table,
)


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
    assert list(collect(tmp_path).columns) == [  # in the command line's order
        "upgrade.before_args.max_num_seqs",
        "upgrade.after_args.max_num_seqs",
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
    as an existing cluster would be (hydra.launcher.ray.init.address); the same sweep in one
    process (Hydra's basic launcher) and under joblib writes byte-identical outputs."""
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
    # the same runs in one process and under joblib: the seed, not the launcher, decides
    for launcher in ("basic", "joblib"):
        subprocess.run(
            [*cmd[:4], f"hydra/launcher={launcher}", f"hydra.sweep.dir={tmp_path / launcher}",
             *cmd[8:]],
            check=True, capture_output=True, timeout=300,
        )  # fmt: skip
        for k in ("0", "1"):
            ray_run, run = tmp_path / "sweep" / k, tmp_path / launcher / k
            for name in ("requests.parquet", "steps.parquet"):
                assert (ray_run / name).read_bytes() == (run / name).read_bytes(), (launcher, k)
            a, b = (json.loads((d / "summary.json").read_text()) for d in (ray_run, run))
            for s in (a, b):
                s["sim"].pop("wall_time_s"), s["sim"].pop("cpu_time_s")
            assert a == b, (launcher, k)


def test_sweep_size_and_progress(tmp_path):
    assert sweep_size(["a=1,2,3", "b=range(0,4)", "c=5", "hydra/launcher=joblib"]) == 12
    # a scenario's own sweep (hydra.sweeper.params): the command line replaces a key it sets
    assert sweep_size(["a=1,2"], {"a": "1,2,3", "b": "4,5,6", "c": "7"}) == 6
    assert progress_line(tmp_path, 0.0) is None  # not a sweep dir
    (tmp_path / PROGRESS).write_text(json.dumps({"total": 8, "started_at": 100.0}))
    for k, finished_at in enumerate((50.0, 110.0, 120.0)):  # one resumed, two new
        (tmp_path / str(k)).mkdir()
        (tmp_path / str(k) / DONE).write_text("{}")
        os.utime(tmp_path / str(k) / DONE, (finished_at, finished_at))
    # 2 runs in 40 s -> 20 s each for the 5 left
    assert progress_line(tmp_path, 140.0) == "sweep: 3/8 runs done, 40 s so far, about 100 s left"


def known_table(slo=True) -> pd.DataFrame:
    """Three budgets at two loads: 512 keeps TTFT low but TPOT high at the heavy load, 8192
    the opposite, 2048 meets both."""
    rows = []
    figures = {  # budget: (rate 4: goodput, rate 8: goodput, p99 TTFT, p99 TPOT at rate 8)
        512: (4.0, 5.0, 900.0, 80.0),
        2048: (4.0, 7.5, 1200.0, 40.0),
        8192: (4.0, 6.0, 3000.0, 30.0),
    }
    for budget, (g4, g8, ttft, tpot) in figures.items():
        for rate, g in ((4, g4), (8, g8)):
            heavy = rate == 8
            rows.append({
                "max_num_batched_tokens": budget, "rate": rate,
                "request_throughput": float(rate), "request_goodput": g,
                "p99_ttft_ms": ttft if heavy else 100.0, "p99_tpot_ms": tpot if heavy else 20.0,
                "median_ttft_ms": 50.0, "median_tpot_ms": 10.0, "median_itl_ms": 10.0,
                "p99_itl_ms": 30.0, "ttft_slo_met_pct": 100.0 - (budget == 8192) * 30 * heavy,
                "tpot_slo_met_pct": 100.0 - (budget == 512) * 40 * heavy,
                "slo_met_pct": 100.0 * g / rate, "run_dir": f"{budget}-{rate}",
            })  # fmt: skip
    frame = pd.DataFrame(rows)
    if not slo:
        frame = frame.drop(columns=[c for c in frame if "slo" in c or "goodput" in c])
    frame.attrs |= {"swept": ["max_num_batched_tokens", "rate"], "unfinished": []}
    frame.attrs["slo"] = {"ttft": 2000.0, "tpot": 50.0} if slo else {}
    return frame


def test_recommendation_names_the_winner_and_why():
    from sim.scenarios.sweep.report import rank_settings, recommend

    frame = known_table()
    ranked = rank_settings(frame, "rate", ["max_num_batched_tokens"])
    assert list(ranked["setting"]) == [
        "max_num_batched_tokens=2048", "max_num_batched_tokens=8192",
        "max_num_batched_tokens=512"]  # fmt: skip
    assert list(ranked["score"]) == [5.75, 5.0, 4.5]  # mean goodput over the two loads
    rec = recommend(frame, "rate", ["max_num_batched_tokens"], "max_num_batched_tokens=8192")
    assert rec["setting"] == "max_num_batched_tokens=2048"
    assert rec["compared_role"] == "the engine's default" and rec["at_load"] == 8
    s = rec["sentence"]
    assert "it has the most goodput" in s and "7.50 req/s against 6.00" in s
    assert "30% of its requests miss the TTFT target (p99 3,000 ms) against 0% here" in s
    # without the default among the swept: against the runner-up
    rec = recommend(frame, "rate", ["max_num_batched_tokens"], None)
    assert rec["compared_with"] == "max_num_batched_tokens=8192"
    assert rec["compared_role"] == "the runner-up"


def test_a_tie_goes_to_the_setting_with_room_to_spare():
    from sim.scenarios.sweep.report import recommend

    frame = known_table()
    frame.loc[frame["max_num_batched_tokens"] == 8192, "request_goodput"] = frame.loc[
        frame["max_num_batched_tokens"] == 2048, "request_goodput"].to_numpy()  # fmt: skip
    rec = recommend(frame, "rate", ["max_num_batched_tokens"], "max_num_batched_tokens=8192")
    # same goodput; worse p99 / SLO averaged over loads: 2048 (0.4 + 0.8)/2 = 0.6 against
    # 8192 (0.4 + 1.5)/2 = 0.95
    assert rec["setting"] == "max_num_batched_tokens=2048"
    assert "as much goodput as max_num_batched_tokens=8192" in rec["sentence"]
    assert "60% of its target against 95%" in rec["sentence"]


def test_sweep_report_files(tmp_path):
    from sim.scenarios.sweep.report import write_sweep_report

    out = write_sweep_report(tmp_path, known_table(), "max_num_batched_tokens=8192")
    assert out["recommendation"]["setting"] == "max_num_batched_tokens=2048"
    assert out["plots"] == ["pareto.png", "goodput.png"]
    text = (tmp_path / "report.md").read_text()
    assert "**Recommendation.** Use max_num_batched_tokens=2048" in text
    assert "max_num_batched_tokens=8192 (engine default)" in text
    assert text.count("### rate = ") == 2
    for name in ("pareto.png", "goodput.png", "sweep_summary.json"):
        assert (tmp_path / name).stat().st_size > 0
    # without SLOs: ranked by throughput, no goodput columns
    plain = write_sweep_report(tmp_path, known_table(slo=False))
    assert "throughput" in plain["recommendation"]["sentence"]


def test_pareto_front():
    import numpy as np

    from sim.scenarios.sweep.plots import pareto_mask

    x = np.array([1.0, 2.0, 3.0, 2.0, 3.0])
    y = np.array([5.0, 3.0, 1.0, 4.0, 3.0])
    assert pareto_mask(x, y).tolist() == [True, True, True, False, False]


def test_chunked_prefill_scenario_sweep(tmp_path):
    """The scenario's own sweep, narrowed on the command line: 2 budgets x 2 loads (the cap
    given one value is not swept), then the table, report, plots and recommendation."""
    cmd = [
        sys.executable, "-m", "sim", "-m", "scenario=chunked_prefill", "hydra/launcher=joblib",
        f"hydra.sweep.dir={tmp_path}", "workload.num_requests=120",
        "engine_args.max_num_batched_tokens=256,4096", "engine_args.long_prefill_token_threshold=0",
        "workload.rate=3,6", "output.progress=false",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sweep: 4/4 runs done" in done.stdout
    assert "sweep: Use max_num_batched_tokens=" in done.stdout
    table = pd.read_csv(tmp_path / "sweep.csv")
    assert list(table.columns[:3]) == ["max_num_batched_tokens", "rate", "completed"]
    for col in ("p99_ttft_ms", "median_itl_ms", "p99_tpot_ms", "request_goodput", "slo_met_pct"):
        assert col in table
    assert len(table) == 4 and (table["completed"] == 120).all()
    summary = json.loads((tmp_path / "sweep_summary.json").read_text())
    assert summary["settings"] == ["max_num_batched_tokens"] and summary["load"] == "rate"
    assert summary["recommendation"]["sentence"] in (tmp_path / "report.md").read_text()
    assert (tmp_path / "pareto.png").is_file() and (tmp_path / "goodput.png").is_file()
    # the per-run lines are one line each in a sweep, with the goodput
    assert done.stdout.count("goodput") >= 4 and "Serving Benchmark Result" not in done.stdout


def test_chunked_prefill_on_a_trace(tmp_path):
    """workload=trace with the scenario: the trace's lengths and arrival pattern, at each
    swept rate (the scenario's synthetic lengths give way)."""
    trace = tmp_path / "trace.csv"
    rows = [
        f"2023-11-16 18:00:{k // 10:02d}.{k % 10},{300 + 50 * k},{5 + k % 7}" for k in range(60)
    ]
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    out = tmp_path / "sweep"
    cmd = [
        sys.executable, "-m", "sim", "-m", "scenario=chunked_prefill", "hydra/launcher=joblib",
        f"hydra.sweep.dir={out}", "workload=trace", f"workload.path={trace}",
        "engine_args.max_num_batched_tokens=256,2048", "engine_args.long_prefill_token_threshold=0",
        "workload.rate=20", "output.progress=false",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    table = pd.read_csv(out / "sweep.csv")
    assert list(table["max_num_batched_tokens"]) == [256, 2048]
    assert (table["completed"] == 60).all()
    assert (table["total_input_tokens"] == sum(300 + 50 * k for k in range(60))).all()
    summary = json.loads((out / "0" / "summary.json").read_text())
    assert "replayed from azure2023 at 20 req/s" in summary["sim"]["workload"]


def test_scenario_sweep_is_checked_before_anything_runs(tmp_path):
    """Every point of the scenario's own sweep is validated up front: a budget below
    max_num_seqs (which vLLM refuses) fails in one line, and no run starts."""
    from sim.cli import check_overrides

    configs = check_overrides(["scenario=chunked_prefill"], multirun=True)
    assert len(configs) == 64
    points = {(c.engine_args["max_num_batched_tokens"], c.workload.rate) for c in configs}
    assert (256, 3.0) in points and (32768, 7.5) in points
    # the command line replaces the scenario's values for a key it sets
    configs = check_overrides(["scenario=chunked_prefill", "workload.rate=9"], multirun=True)
    assert len(configs) == 16 and {c.workload.rate for c in configs} == {9.0}
    cmd = [sys.executable, "-m", "sim", "-m", "scenario=chunked_prefill",
           "engine_args.max_num_seqs=1024", f"hydra.sweep.dir={tmp_path / 'sweep'}"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "max_num_batched_tokens (256) must be >= max_num_seqs (1024)" in done.stderr
    assert not (tmp_path / "sweep").exists()
