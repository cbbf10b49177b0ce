"""Extreme values of every numeric key (issue 42, 2.4-2.6): a time the clock cannot resolve, an
overflow, a worker per case. Each is refused in one line naming the key, the value, the range
and why, or runs correctly; benchmarks/extreme_config.py probes every key at 0, -1, 1e-300,
1e308, inf, nan and 10**30."""

from __future__ import annotations

import contextlib
import json
import math
import os

import numpy as np
import pytest
import yaml
from joblib import Parallel

from sim.config import MAX_SPAN_S, SimConfig, WorkloadConfig, slowest_rate
from sim.errors import UserError
from sim.run.simulate import simulate
from sim.scenarios import fanout
from sim.scenarios.fanout import fan_out, jobs_at_once, say_if_capped, usable_cores
from sim.scenarios.validate.suite import _parser
from sim.workload.generate import generate
from tests.conftest import config
from tests.test_cli import sim
from tests.test_validate import case


def _refused(data: dict) -> str:
    with pytest.raises(UserError) as exc:
        SimConfig.from_mapping(data)
    return str(exc.value)


def test_a_rate_whose_arrivals_outrun_the_clock_is_refused_with_the_slowest_that_fits():
    # 1e-300 req/s put arrivals near 1e301 s, where 1e301 + 0.01 == 1e301: every latency read 0
    message = _refused({"workload": {"rate": 1e-300, "num_requests": 50}})
    assert message.startswith("workload.rate=1e-300: 50 requests at that rate arrive over")
    assert "the smallest rate that fits is num_requests / 1e+09 s = 5e-08 req/s" in message
    for kind in ("gamma", "constant"):
        assert "5e-08 req/s" in _refused(
            {"workload": {"kind": kind, "rate": 1e-300, "num_requests": 50}}
        )
    assert slowest_rate(50) == 50 / MAX_SPAN_S == 5e-08
    SimConfig.from_mapping({"workload": {"rate": 5e-08, "num_requests": 50}})  # the edge fits
    scaled = _refused({"task": "capacity", "capacity": {"rate": 1e-12}})
    assert scaled.startswith("capacity.rate=1e-12:") and "1e-06 req/s" in scaled


@pytest.mark.parametrize("kind", ["poisson", "gamma", "constant"])
def test_rates_the_config_never_saw_are_bounded_as_they_are_drawn(kind):
    # upgrade.loads x the measured capacity, a bench JSON's own rate: they reach generate only
    cfg = WorkloadConfig(kind=kind, rate=1e-300, num_requests=50, burstiness=None)
    with pytest.raises(UserError, match=r"workload.rate=1e-300: 50 requests .* 5e-08 req/s"):
        generate(cfg, np.random.default_rng(0))
    with pytest.raises(UserError, match=r"workload\.rate=0: 50 requests"):
        generate(WorkloadConfig(kind=kind, rate=0.0, num_requests=50), np.random.default_rng(0))
    ok = generate(WorkloadConfig(kind=kind, rate=1.0, num_requests=50), np.random.default_rng(0))
    assert ok.arrival_s[-1] <= MAX_SPAN_S


def test_a_replayed_trace_and_a_bench_files_rate_are_bounded_too(tmp_path):
    trace = tmp_path / "t.csv"
    rows = "\n".join(f"{0.5 * i},{100 + i},{8}" for i in range(30))
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + rows + "\n")
    replay = WorkloadConfig(kind="trace", path=str(trace), rate=1e-300, num_requests=None)
    with pytest.raises(UserError, match=r"workload.rate=1e-300: 30 requests .* 3e-08 req/s"):
        generate(replay, np.random.default_rng(0))
    bench = tmp_path / "b.json"
    lens = {"input_lens": [100] * 30, "output_lens": [8] * 30}
    bench.write_text(json.dumps({**lens, "request_rate": 1e-300, "burstiness": 1.0}))
    from_file = WorkloadConfig(kind="bench_json", path=str(bench), rate=None, num_requests=None)
    with pytest.raises(UserError, match="30 requests at that rate"):
        generate(from_file, np.random.default_rng(0))


def test_at_the_slowest_rate_that_fits_every_request_has_its_latencies():
    n = 20
    cfg = config({"num_requests": n, "rate": 1.5 * slowest_rate(n)})
    result = simulate(cfg)
    done = result.requests[result.requests["status"] == "finished"]
    assert len(done) == n and result.workload.arrival_s[-1] > 1e8  # spread over years
    for col in ("ttft_s", "e2el_s", "tpot_s"):
        assert (done[col] > 0).all() and np.isfinite(done[col]).all(), col
    # years apart, each runs alone: with the same prompt, the same latencies as the first
    # (to float64's resolution at 5e8 s, 6e-8 s)
    for col in ("ttft_s", "tpot_s"):
        assert np.allclose(done[col], done[col].iloc[0], rtol=1e-4), col


def test_a_burstiness_past_floats_range_gives_constant_gaps_not_none():
    # rate x burstiness overflowed: the scale 1 / inf = 0 put every request at t = 0
    w = WorkloadConfig(kind="gamma", rate=16.0, burstiness=1e308, num_requests=20)
    arrival = generate(w, np.random.default_rng(0)).arrival_s
    assert np.allclose(np.diff(arrival), 1 / 16, rtol=1e-12)
    same = WorkloadConfig(kind="gamma", rate=16.0, burstiness=0.5, num_requests=20)
    a, b = (generate(same, np.random.default_rng(3)).arrival_s for _ in range(2))
    assert a.tobytes() == b.tobytes()  # a burstiness in range draws as it did


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"max_sim_time_s": 1e308}, "max_sim_time_s=1e+308: must be <= 1000000000 (about 30 "),
        ({"long_context": {"arrival_s": 1e308}}, "long_context.arrival_s=1e+308: must be <="),
        ({"teach": {"long_gap_s": 1e308}}, "teach.long_gap_s=1e+308: must be <= 1000000000"),
        ({"task": "teach", "teach": {"long_prompts": 5, "long_gap_s": 5e8}}, "shorten the gap"),
        ({"workload": {"input_sigma": 1e308}}, "workload.input_sigma=1e+308: must be <= 10 ("),
        ({"workload": {"output_sigma": 50}}, "workload.output_sigma=50.0: must be <= 10 ("),
        ({"workload": {"burstiness": 1e-300}}, "workload.burstiness=1e-300: must be >= 0.001 ("),
        ({"upgrade": {"loads": [0.5, 1e-300]}}, "upgrade.loads=[0.5, 1e-300]: every value must"),
        ({"upgrade": {"loads": [1e308]}}, "every value must be <= 1000.0 (x the before"),
        (
            {"upgrade": {"auto_rate_fraction": 1e-300}},
            "auto_rate_fraction=1e-300: must be >= 0.001",
        ),
        ({"long_context": {"budgets": [2**40]}}, "every value must be <= 16777216 (more tokens"),
        ({"engine_args": {"max_num_seqs": math.inf}}, "engine_args.max_num_seqs=inf: must be a"),
        ({"engine_args": {"cpu_exposed_s": math.nan}}, "engine_args.cpu_exposed_s=nan: must be"),
        ({"engine_args": {"num_gpu_blocks_override": 10**30}}, "finite number below 2**63"),
        # an int past a float's range (benchmarks/fuzz.py's huge kind): was an OverflowError
        ({"engine_args": {"max_num_seqs": 10**400}}, "finite number below 2**63"),
        ({"engine_args": {"spec_acceptance": [0.5, math.inf]}}, "spec_acceptance=inf: must be"),
        (
            {"upgrade": {"after_args": {"swap_space": 1e308}}},
            "upgrade.after_args.swap_space=1e+308",
        ),
        (
            {"disagg": {"decode": {"engine_args": {"max_num_seqs": math.inf}}}},
            "disagg.decode.engine_args.max_num_seqs=inf",
        ),
    ],
)
def test_values_past_what_the_simulator_can_hold_are_one_line(data, said):
    message = _refused(data)
    assert said in message and "\n" not in message


def test_the_time_limit_at_its_edge_runs_to_the_end():
    cfg = config({"num_requests": 20}, max_sim_time_s=MAX_SPAN_S)
    result = simulate(cfg)
    assert (result.requests["status"] == "finished").all()
    assert result.summary["completed"] == 20


def test_max_sim_time_past_the_clocks_range_is_one_line_from_the_command_line(tmp_path):
    r = sim("max_sim_time_s=1e308", "workload.num_requests=20", f"hydra.run.dir={tmp_path / 'r'}",
            cwd=tmp_path)  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("sim: error: max_sim_time_s=1e+308: must")
    assert "null: no limit" in r.stderr


def test_jobs_beyond_the_cores_start_no_more_workers_than_cores(monkeypatch, capsys):
    cores = usable_cores()
    assert cores == len(os.sched_getaffinity(0))
    assert jobs_at_once(100_000) == jobs_at_once(None) == cores and jobs_at_once(1) == 1
    asked = []

    class Recorded(Parallel):  # joblib's, told how many workers to start
        def __init__(self, n_jobs, **kwargs):
            asked.append(n_jobs)
            super().__init__(n_jobs=n_jobs, backend="sequential", **kwargs)

    monkeypatch.setattr(fanout, "Parallel", Recorded)
    monkeypatch.setattr(fanout, "parallel_config", lambda **_: contextlib.nullcontext())
    calls = [(i,) for i in range(cores + 3)]
    assert fan_out(abs, calls, jobs=100_000) == list(range(cores + 3))
    assert asked == ([cores] if cores > 1 else [])
    say_if_capped(100_000, "validate.jobs")
    say_if_capped(cores, "validate.jobs")
    err = capsys.readouterr().err
    assert err == (
        f"sim: validate.jobs=100000 is more than the {cores} cores this process may use: "
        f"{cores} simulations at a time\n"
    )


def test_validate_jobs_past_the_cores_is_capped_and_said(tmp_path):
    tiny = {"closed_loop": {"concurrency": 2, "num_requests": 6, "input_len": 64, "output_len": 4}}
    one = case(id="c", workload=tiny, measured={"mean_ttft_ms": 20.0})
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump({"cases": [one]}))
    r = sim("scenario=validate", f"validate.cases={path}", "validate.jobs=100000",
            f"hydra.run.dir={tmp_path / 'r'}", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert f"sim: validate.jobs=100000 is more than the {usable_cores()} cores" in r.stderr
    assert "validate: 1 cases (0 could not be simulated)" in r.stdout


@pytest.mark.parametrize("jobs", ["0", "-3", "x"])
def test_the_validation_suites_jobs_is_a_whole_number_from_one(jobs, capsys):
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args(["--jobs", jobs])
    assert exc.value.code == 2 and "expected a whole number >= 1" in capsys.readouterr().err
