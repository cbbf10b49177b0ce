"""Nothing lost, nothing half-written: conservation on every run, time limits, streamed steps,
run dirs marked INCOMPLETE until their task finishes, Ctrl-C, and upgrade_diff resuming."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import sim.run.metrics
import sim.scenarios.upgrade_diff.outcomes
from sim.cli import compose_config, to_sim_config
from sim.errors import UserError
from sim.run.driver import check_conservation, run_simpy
from sim.run.metrics import StepLog
from sim.run.outputs import INCOMPLETE
from sim.run.setup import Setup
from sim.run.simulate import simulate
from sim.scenarios.fanout import fan_out
from sim.scenarios.upgrade_diff.study import run_upgrade_diff
from sim.workload.generate import generate
from tests.conftest import as_terminal_job, config, run_task_into

REPO = Path(__file__).resolve().parent.parent


def _run_task(out: Path, monkeypatch, *overrides) -> dict:
    return run_task_into(out, monkeypatch, overrides)


def test_every_run_reports_its_conservation():
    s = simulate(config({"num_requests": 60, "rate": 50.0})).summary["sim"]
    c = s["conservation"]
    assert c == {
        "arrived": 60, "finished": 60, "rejected": 0, "in_flight": 0, "in_flight_running": 0,
        "in_flight_waiting": 0, "not_sent": 0,
    }  # fmt: skip


def test_prompts_beyond_max_model_len_are_rejected_and_counted():
    cfg = config(
        {"num_requests": 40, "length_dist": "uniform", "range_ratio": 0.9, "input_len": 600},
        engine_args={"max_model_len": 512},
    )
    r = simulate(cfg)
    c = r.summary["sim"]["conservation"]
    rejected = r.requests[r.requests["status"] == "rejected"]
    assert len(rejected) == c["rejected"] == r.summary["failed"] > 0
    assert (rejected["prompt_tokens"] + rejected["max_output_tokens"] > 512).all()
    assert rejected["reject_reason"].str.contains("max_model_len").all()
    assert c["finished"] + c["rejected"] == c["arrived"] == 40


def test_a_time_limit_stops_cleanly_and_says_what_was_in_flight():
    cfg = config({"num_requests": 400, "rate": 40.0, "output_len": 256}, max_sim_time_s=3.0)
    r = simulate(cfg)
    s = r.summary["sim"]
    c = s["conservation"]
    assert s["stopped_at_s"] == 3.0
    status = r.requests["status"].value_counts()
    sent = r.requests["replica"] >= 0
    assert c["not_sent"] == int((~sent).sum()) > 0
    assert c["in_flight_running"] == status.get("running", 0) > 0
    assert c["in_flight"] == c["in_flight_running"] + c["in_flight_waiting"]
    assert c["arrived"] == c["finished"] + c["rejected"] + c["in_flight"]
    assert s["unfinished_at_time_limit"] == c["in_flight"] + c["not_sent"]
    assert (r.requests.loc[~sent, "arrival_s"] >= 3.0).all()  # not sent: had not arrived


def test_any_time_limit_leaves_every_request_accounted_for():
    """Stops at many instants, some in the middle of a step that finishes requests: those
    are still running at the stop (their last token comes after it), never finished twice
    or lost."""
    cut = 0
    for k in range(24):
        limit = 0.05 + k * 0.107  # within the run (80 requests arrive over ~2.7 s)
        cfg = config(
            {"num_requests": 80, "rate": 30.0, "length_dist": "lognormal", "output_len": 24},
            max_sim_time_s=limit,
        )
        r = simulate(cfg)
        c = r.summary["sim"]["conservation"]
        assert c["arrived"] == c["finished"] + c["rejected"] + c["in_flight"]
        req = r.requests
        done = req[req["status"] == "finished"]
        assert (done["finish_s"] <= limit).all()
        assert (req["first_token_s"].dropna() <= limit).all()
        running = req[req["status"] == "running"]
        cut += int((running["output_tokens"] == running["max_output_tokens"] - 1).sum())
    assert cut > 0  # some stop fell in a request's last step


def test_conservation_catches_a_lost_request():
    cfg = config({"num_requests": 30, "rate": 1000.0, "output_len": 64}, max_sim_time_s=0.05)
    setup = Setup.from_config(cfg)
    engines = setup.engines(StepLog())
    workload = generate(cfg.workload, np.random.default_rng(0))
    outcome = run_simpy(workload, engines, until_s=0.05)
    check_conservation(outcome, engines)  # as run
    sched = engines[0].scheduler
    lost = (sched.waiting or sched.running).pop()  # a request vanishes from its replica
    with pytest.raises(RuntimeError, match="conservation violated"):
        check_conservation(outcome, engines)
    sched.running.append(lost)
    engines[0].kv.req_blocks.pop(next(iter(engines[0].kv.req_blocks)))  # a block leaks
    with pytest.raises(RuntimeError, match="KV blocks in use"):
        check_conservation(outcome, engines)


def test_streamed_steps_equal_the_steps_held_in_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(sim.run.metrics, "STEP_CHUNK_ROWS", 300)  # many row groups
    cfg = config({"num_requests": 300, "rate": 30.0})
    held = simulate(cfg, run_dir=tmp_path / "held")
    streamed = simulate(
        config({"num_requests": 300, "rate": 30.0}, output={"stream": True}),
        run_dir=tmp_path / "streamed",
    )
    steps = pd.read_parquet(tmp_path / "streamed" / "steps.parquet")
    assert len(steps) > 5 * 300
    pd.testing.assert_frame_equal(steps, held.steps)
    assert not (tmp_path / "held" / "steps.parquet").exists()  # written by the task, not here
    a, b = held.summary, streamed.summary
    assert b["sim"]["steps_streamed"] and not a["sim"]["steps_streamed"]
    for key in ("completed", "mean_ttft_ms", "p99_itl_ms", "p99_tpot_ms", "duration"):
        assert a[key] == b[key]
    for key in ("steps", "preemptions", "kv_usage_peak", "mean_batch_size", "sim_time_s"):
        assert a["sim"][key] == b["sim"][key]
    assert a["sim"]["kv_usage_mean"] == pytest.approx(b["sim"]["kv_usage_mean"], rel=1e-12)
    view = streamed.overview
    assert view.every == 1 and len(view.sample) == len(steps)
    assert view.decode_tokens.sum() == steps["decode_tokens"].sum()
    leftovers = [p.name for p in (tmp_path / "streamed").iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_streaming_cannot_trace():
    cfg = config({"num_requests": 10}, trace=True, output={"stream": True})
    with pytest.raises(UserError, match=r"output.stream=true and trace=true"):
        simulate(cfg, run_dir=Path("/nonexistent"))


def test_a_finished_run_dir_has_no_incomplete_mark(tmp_path, monkeypatch):
    out = tmp_path / "run"
    _run_task(out, monkeypatch, "workload.num_requests=30", "output.report=false")
    assert (out / "summary.json").is_file() and not (out / INCOMPLETE).exists()


def test_a_failed_task_leaves_its_run_dir_marked(tmp_path, monkeypatch):
    out = tmp_path / "run"
    with pytest.raises(UserError):
        _run_task(out, monkeypatch, "scenario=validate", "validate.cases=/no/such/file.yaml")
    assert "stopped by an error" in (out / INCOMPLETE).read_text()


def test_ctrl_c_leaves_the_run_dir_marked_incomplete(tmp_path):
    """A real SIGINT to `python -m sim` in the middle of a long, streamed run."""
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "sim", f"hydra.run.dir={out}", "workload.num_requests=200000",
        "output.stream=true", "output.progress=false",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (out / INCOMPLETE).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(3.0)  # well into the simulation (it takes minutes)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err.decode()[-2000:]
    assert "interrupted" in err.decode() and "Traceback" not in err.decode()
    assert "interrupted (Ctrl-C)" in (out / INCOMPLETE).read_text()
    names = sorted(p.name for p in out.iterdir())
    assert names == [".hydra", INCOMPLETE]  # no half-written summary, steps or temp files


def test_interrupted_upgrade_diff_resumes_without_redoing_simulations(tmp_path, monkeypatch):
    overrides = [
        "scenario=upgrade_diff", "workload.num_requests=60", "upgrade.seeds=2",
        "upgrade.budget=8", "upgrade.loads=[1.0]", "upgrade.jobs=1",
    ]  # fmt: skip
    cfg = to_sim_config(compose_config(overrides))
    ran = []
    real = sim.scenarios.upgrade_diff.outcomes.mixture_outcome

    def counted(*args):
        ran.append(1)
        return real(*args)

    monkeypatch.setattr(sim.scenarios.upgrade_diff.outcomes, "mixture_outcome", counted)
    fresh = run_upgrade_diff(cfg).summary
    total = len(ran)
    assert total == fresh["simulations_run"] > 10

    cache = tmp_path / "simulations"

    def interrupt(done, _total):
        if done >= 7:
            raise KeyboardInterrupt

    ran.clear()
    with pytest.raises(KeyboardInterrupt):
        run_upgrade_diff(cfg, progress=interrupt, cache=cache)
    kept = len(list(cache.glob("*.json")))
    assert kept == len(ran) == 7
    ran.clear()
    resumed = run_upgrade_diff(cfg, cache=cache).summary
    assert len(ran) == total - kept  # only the simulations not done before
    for s in (fresh, resumed):
        s.pop("wall_time_s")
    assert json.dumps(resumed, sort_keys=True, default=str) == json.dumps(
        fresh, sort_keys=True, default=str
    )
    ran.clear()
    run_upgrade_diff(cfg, cache=cache)  # everything kept: nothing simulated again
    assert ran == []


def _worker_sigint(_):
    return signal.getsignal(signal.SIGINT) == signal.SIG_IGN


def test_fan_out_workers_leave_ctrl_c_to_the_parent():
    """A terminal's Ctrl-C reaches every process of its group: a joblib worker interrupted
    between tasks printed its own traceback (loky's gc.collect) under sim's one line."""
    assert fan_out(_worker_sigint, [(i,) for i in range(4)], jobs=2) == [True] * 4


@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_ctrl_c_to_the_process_group_of_a_fan_out(tmp_path):
    """Ctrl-C as a terminal sends it (SIGINT to the whole group: the parent and joblib's
    workers) in the middle of upgrade_diff: one line, exit 130, no traceback, no worker left."""
    out = tmp_path / "ud"
    cmd = [
        sys.executable, "-m", "sim", "scenario=upgrade_diff", f"hydra.run.dir={out}",
        "upgrade.jobs=2", "output.progress=false",
    ]  # fmt: skip

    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=as_terminal_job
    )
    deadline = time.monotonic() + 120
    while len(list(out.glob("simulations/*.json"))) < 20 and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err.decode()[-2000:]
    assert "interrupted" in err.decode() and "Traceback" not in err.decode(), err.decode()
    left = "?"
    for _ in range(100):  # joblib stops its workers; loky's resource tracker follows them
        left = subprocess.run(["pgrep", "-a", "-g", str(proc.pid)], capture_output=True, text=True)
        if not left.stdout.strip():
            break
        time.sleep(0.1)
    assert left.stdout.strip() == ""


@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_ctrl_c_in_a_sweep_then_resume(tmp_path):
    """SIGINT to a sweep in one process (the basic launcher: joblib is the default for -m): the
    finished runs are kept, the rest rerun."""
    sweep = tmp_path / "sweep"
    cmd = [
        sys.executable, "-m", "sim", "-m", f"hydra.sweep.dir={sweep}", "hydra/launcher=basic",
        "workload.num_requests=3000", "output.report=false", "output.progress=false",
        "workload.rate=8,9,10,11",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 180
    while not (sweep / "1" / INCOMPLETE).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert (sweep / "0" / "summary.json").is_file() and not (sweep / "0" / INCOMPLETE).exists()
    assert (sweep / "1" / INCOMPLETE).exists()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("already finished, not run again") == 1
    assert not list(sweep.glob("*/" + INCOMPLETE))
    assert len(pd.read_csv(sweep / "sweep.csv")) == 4


def test_user_errors_are_one_line_and_debug_shows_the_traceback(tmp_path):
    cmd = [sys.executable, "-m", "sim", f"hydra.run.dir={tmp_path}", "workload.rate=-1"]
    plain = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 2
    assert plain.stderr.strip() == "sim: error: workload.rate=-1.0: must be > 0"
    debug = subprocess.run([*cmd, "--debug"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert debug.returncode != 0
    assert "Traceback" in debug.stderr and "UserError: workload.rate=-1.0" in debug.stderr


def test_a_long_streamed_run_holds_one_chunk_of_steps(tmp_path, monkeypatch):
    """The bounded version of benchmarks/run.py's million: 20,000 requests through the CLI's
    task, steps streamed in row groups of 4,096; the step log never holds more than a chunk
    (plus one fast-forwarded run), and the file has every step."""
    import pyarrow.parquet as pq

    from sim.run.fast_forward import MAX_RUN_STEPS

    monkeypatch.setattr(sim.run.metrics, "STEP_CHUNK_ROWS", 4096)
    held = []
    flush = StepLog.flush

    def spy(self):
        held.append(len(self.columns["start_s"]))
        flush(self)

    monkeypatch.setattr(StepLog, "flush", spy)
    out = tmp_path / "run"
    s = _run_task(out, monkeypatch, "workload.num_requests=20000", "output.stream=true")
    assert s["sim"]["steps_streamed"] and s["completed"] == 20000
    meta = pq.ParquetFile(out / "steps.parquet").metadata
    assert meta.num_rows == s["sim"]["steps"] == sum(held)
    assert meta.num_row_groups == len(held) > 10
    assert max(held) < 4096 + MAX_RUN_STEPS
    assert (out / "throughput_kv.png").is_file() and (out / "report.html").is_file()
    assert not (out / INCOMPLETE).exists()
