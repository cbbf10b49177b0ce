"""scenario=capacity: the search finds known capacities, the noise rule, the cost arithmetic.

The known cases use an engine with a constant step time: one request at a time
(max_num_seqs=1), each a 512-token prompt answered in one token, so every step is the same
prefill step of D seconds (tests/test_queueing.py checks the engine gives M/D/1 waits there).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from scipy import optimize

from sim.errors import UserError
from sim.scenarios.capacity.result import cost_figures
from sim.scenarios.capacity.search import Search, run_capacity
from sim.scenarios.probes import margin, verdict
from sim.specs.hardware import load_hardware
from tests.conftest import config, run_plain


def service_time_s() -> float:
    probe = config(
        workload={"num_requests": 1, "input_len": 512, "output_len": 1},
        engine_args={"max_num_seqs": 1},
    )
    _, engine, _ = run_plain(probe)
    return engine.steps.columns["duration_s"][0]


def one_at_a_time(kind: str, n: int, ttft_ms: float, **capacity):
    return config(
        workload={"kind": kind, "num_requests": n, "input_len": 512, "output_len": 1},
        engine_args={"max_num_seqs": 1},
        slo={"ttft_ms": ttft_ms},
        capacity={"jobs": 1, **capacity},
    )


def test_constant_arrivals_find_the_hand_computed_rate():
    """D/D/1: requests every 1/r, each served alone in D. Below r = 1/D each finds the engine
    idle (TTFT = D exactly, every seed alike: no noise); at or above it the queue grows without
    end. With a TTFT target above D, the capacity is 1/D; below D, nothing meets it."""
    d = service_time_s()
    cfg = one_at_a_time("constant", 200, 1.5 * d * 1e3, tolerance=0.001, max_probes=40)
    result = run_capacity(cfg)
    out = result.answer
    assert out.saturated_rate == pytest.approx(1.0 / d, rel=1e-9)
    assert not out.noise_limited and out.stopped_by == "tolerance"
    assert (1 - 0.001) / d <= out.capacity_rate < 1.0 / d
    assert out.capacity_rate_upper == out.saturated_rate  # the first overloaded rate
    assert out.at_capacity.p99_ttft_ms == pytest.approx(d * 1e3, rel=1e-9)
    verdicts = {p.verdict for p in result.probes}
    assert verdicts == {"meets", "overloaded"}
    too_tight = run_capacity(one_at_a_time("constant", 200, 0.9 * d * 1e3)).answer
    assert too_tight.capacity_rate == 0.0
    assert too_tight.stopped_by == "no rate meets the SLOs"


def md1_p99_wait(rate: float, d: float) -> float:
    """The 99th percentile of the M/D/1 wait in queue, from Erlang's distribution
    P(W <= t) = (1 - rho) sum_{k=0}^{floor(t/D)} (lam (kD - t))^k / k! exp(-lam (kD - t))."""
    rho = rate * d

    def cdf(t: float) -> float:
        k = np.arange(math.floor(t / d) + 1)
        x = rate * (k * d - t)
        logs = k * np.log(np.abs(x) + 1e-300) - np.array([math.lgamma(j + 1) for j in k]) - x
        return (1 - rho) * float(np.sum(np.sign(x) ** k * np.exp(logs)))

    if cdf(0.0) >= 0.99:
        return 0.0
    hi = d  # the smallest power-of-two multiple of D past the p99 (the alternating sum
    while cdf(hi) < 0.99:  # loses precision far beyond it)
        hi *= 2
    return optimize.brentq(lambda t: cdf(t) - 0.99, 0.0, hi)


def test_poisson_arrivals_find_the_md1_capacity():
    """M/D/1: the rate whose p99 TTFT (wait + D) is S, from Erlang's M/D/1 wait distribution,
    against the noise-aware search on Poisson arrivals (seeds differ: the probes are noisy)."""
    d = service_time_s()
    s = 5.0 * d
    expected = optimize.brentq(lambda r: md1_p99_wait(r, d) + d - s, 0.05 / d, 0.9 / d)
    assert 0.5 < expected * d < 0.8  # a moderate load, where the p99 is well estimated
    cfg = one_at_a_time("poisson", 10_000, s * 1e3, seeds=3, max_seeds=6, tolerance=0.02)
    out = run_capacity(cfg).answer
    # the answer is a bracket: the highest rate shown to meet, the lowest shown to miss; the
    # theory's rate lies in it (2% of slack for the p99 of a finite run), and it is narrow
    lo, hi = out.capacity_rate, out.capacity_rate_upper
    assert lo <= expected * 1.02 and hi >= expected * 0.98
    assert hi / lo - 1 <= 0.2
    assert lo == pytest.approx(expected, rel=0.06)


def test_replicas_for_a_rate():
    """Constant arrivals at R spread round-robin over c replicas: each sees R / c, served
    alone in D each, so the SLO is met exactly when R / c < 1/D: c = ceil(R D)."""
    d = service_time_s()
    rate = 3.5 / d
    cfg = one_at_a_time("constant", 800, 1.5 * d * 1e3, rate=rate)
    cfg = replace(cfg, parallel=replace(cfg.parallel, router="round_robin"))
    out = run_capacity(cfg)
    assert out.answer.mode == "replicas"
    assert out.answer.replicas == math.ceil(rate * d) == 4
    assert out.cost.gpus == 4
    tried = {p.replicas: p.verdict for p in out.probes}
    assert tried == {1: "overloaded", 2: "overloaded", 4: "meets", 3: "overloaded"}


def test_verdict_is_decisive_only_outside_the_noise():
    assert verdict([0.5, 0.5, 0.5], 0.95)[0] == "meets"
    assert verdict([1.5, 1.5], 0.95)[0] == "fails"
    assert verdict([0.8, 1.1, 0.9], 0.95)[0] == "unclear"
    state, mean, half = verdict([0.9, 0.92, 0.91], 0.95)
    assert state == "meets" and mean == pytest.approx(0.91)
    # t(0.975, 2) = 4.303: half-width 4.303 x 0.01 / sqrt(3)
    assert half == pytest.approx(4.302653 * 0.01 / math.sqrt(3), rel=1e-5)
    assert margin({"p99_ttft_ms": 500.0, "p99_tpot_ms": 60.0}, {"ttft": 1000, "tpot": 50}) == 1.2


def test_unclear_probes_get_more_seeds():
    """A probe right at the capacity stays unclear; it is rerun with more seeds, up to
    max_seeds, before the search gives up resolving it."""
    d = service_time_s()
    cfg = one_at_a_time("poisson", 300, 3 * d * 1e3, seeds=2, max_seeds=5)
    search = Search(cfg)
    p = search.probe(0.75 / d, 1)
    runs = p.seeded.runs
    assert len(runs) in (2, 4, 5)
    if p.verdict == "unclear":
        assert len(runs) == 5
    assert len({r["p99_ttft_ms"] for r in runs}) == len(runs)  # different draws


def test_cost_per_million_output_tokens():
    cfg = config(parallel={"tp": 2, "pp": 1})
    h100 = load_hardware("h100-sxm")
    result = {"replicas": 3, "capacity_rate": 12.0, "output_tokens_per_s": 5000.0}
    out = cost_figures(cfg, h100, **result)
    assert out.gpus == 6 and out.capacity_rate_per_gpu == 2.0
    assert out.gpu_hour_usd == h100.gpu_hour_usd == 2.99
    # 6 GPUs x $2.99/h = $17.94/h for 5,000 tok/s = 18M tok/h: $0.99667 per million
    assert out.cost_per_million_output_tokens == pytest.approx(17.94 / 18.0)
    cheap = cost_figures(replace(cfg, capacity=replace(cfg.capacity, gpu_hour_usd=1.0)), h100,
                         **result)  # fmt: skip
    assert cheap.price_source == "capacity.gpu_hour_usd"
    assert cheap.cost_per_million_output_tokens == pytest.approx(6.0 / 18.0)
    nothing = cost_figures(cfg, load_hardware("l40s"), **result)
    assert nothing.gpu_hour_usd is None and nothing.cost_per_million_output_tokens is None


def test_bad_capacity_requests_fail_clearly():
    with pytest.raises(UserError, match=r"slo\.ttft_ms"):
        run_capacity(config())
    closed = config(workload={"kind": "closed_loop", "concurrency": 4}, slo={"ttft_ms": 100})
    with pytest.raises(UserError, match="varies the request rate"):
        run_capacity(closed)
    done = subprocess.run(
        [sys.executable, "-m", "sim", "scenario=capacity", "slo.ttft_ms=null", "slo.tpot_ms=null"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "needs latency targets" in done.stderr
    assert "Traceback" not in done.stderr


def test_capacity_scenario_end_to_end(tmp_path):
    """python -m sim scenario=capacity writes its summary, probes, report and plot, and the
    same command gives the same summary (wall time aside)."""
    cmd = [
        sys.executable, "-m", "sim", "scenario=capacity", "workload.num_requests=150",
        "capacity.seeds=2", "capacity.max_seeds=3", "capacity.tolerance=0.1",
        "output.progress=false",
    ]  # fmt: skip
    outs = []
    for k in range(2):
        out = tmp_path / str(k)
        done = subprocess.run([*cmd, f"hydra.run.dir={out}"], capture_output=True, text=True,
                              timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert "capacity: llama-3.1-8b on 1 x h100-sxm" in done.stdout
        for name in ("summary.json", "probes.csv", "report.md", "capacity.png"):
            assert (out / name).is_file(), name
        outs.append(out)
    a, b = (json.loads((o / "summary.json").read_text()) for o in outs)
    a.pop("wall_time_s"), b.pop("wall_time_s")
    assert a == b
    assert a["capacity_rate"] > 0 and a["cost_per_million_output_tokens"] > 0
    assert "per million output tokens" in (outs[0] / "report.md").read_text()
