"""Closed loops as real clients run them (issue 43, item 3): the benchmark may have counted the
burst of its first wave (`vllm bench serve` does), so a closed loop with warm-up requests gets
that setting in its band; and a server's front end (HTTP, chat template, tokenisation) that
serves one request at a time stands between each client's send and the engine's queue."""

from __future__ import annotations

import numpy as np
import pytest

from sim.errors import UserError
from sim.run.driver import check_conservation, run_loop, run_simpy
from sim.run.metrics import StepLog
from sim.run.setup import Setup
from sim.run.simulate import simulate
from sim.scenarios.validate.cases import load_cases
from sim.scenarios.validate.runs import run_all
from sim.scenarios.validate.settings import (
    DEFAULT_LAUNCH,
    FIRST_WAVE,
    FIRST_WAVE_OUT,
    FRONT_END_MS,
    FRONT_END_SETTING,
    SETTINGS,
    plausible,
    run_settings,
    setting_name,
)
from sim.scenarios.validate.targets import CLOSED_LOOP_BAND_ROWS, band_targets, targets
from sim.scenarios.validate.validation import Row
from sim.workload.generate import generate
from tests.conftest import config
from tests.test_validate import BASE, case, write

LOOP = {"concurrency": 4, "num_requests": 12, "input_len": 512, "output_len": 8}


def test_a_closed_loop_with_warmup_may_have_counted_its_first_wave(tmp_path):
    specs = [
        case(id="warm-up", workload={"closed_loop": LOOP | {"warmup_requests": 4}}),
        case(id="none", workload={"closed_loop": LOOP}),
        case(id="spread", workload={"closed_loop": LOOP | {"warmup_requests": 4, "stagger": True}}),
        case(
            id="cached", workload={"closed_loop": LOOP | {"warmup_requests": 4, "cache_warm": True}}
        ),
        case(
            id="open",
            workload={
                "poisson": {"rate": 50.0, "num_requests": 12, "input_len": 64, "output_len": 8}
            },
        ),
    ]
    cases = load_cases([write(tmp_path, specs)], BASE)
    got = {c.id: plausible(c) for c in cases}
    assert FIRST_WAVE in got["warm-up"] and len(got["warm-up"]) == 6
    # a loop that counts its first wave may have left it out (a warm-up it ran first)
    assert FIRST_WAVE_OUT in got["none"] and FIRST_WAVE not in got["none"]
    # a stated client start or warm cache leaves no together-cold run; an open loop no wave
    for k in ("spread", "cached", "open"):
        assert FIRST_WAVE not in got[k] and FIRST_WAVE_OUT not in got[k]
    assert setting_name(FIRST_WAVE) == "clients together, prefix cache cold, first wave counted"
    assert setting_name(FIRST_WAVE_OUT).endswith("prefix cache cold, first wave left out")
    assert FIRST_WAVE in SETTINGS and FIRST_WAVE_OUT in SETTINGS


def test_the_counted_first_wave_raises_the_top_of_the_ttft_band(tmp_path):
    """Four clients sent together: the first wave's four prompts share their prefill, the
    later waves (here too, fixed lengths keep the grouping) no less; counting the first wave
    can only add a wave whose TTFT is no shorter, and the band's top is at least it."""
    loop = LOOP | {"num_requests": 8, "warmup_requests": 4}
    specs = [case(id="c", workload={"closed_loop": loop})]
    cases = load_cases([write(tmp_path, specs)], BASE)
    results = run_all(cases, jobs=1)
    band = run_settings(cases, results, 1, lambda c: True)
    assert band.num_runs == 5 and band.num_failed == 0
    counted = band.results[FIRST_WAVE]["c"].predicted
    main = results[0].predicted
    assert counted["mean_ttft_ms"] >= main["mean_ttft_ms"] > 0
    lo, hi = band.bands["c"]["mean_ttft_ms"]
    assert lo <= main["mean_ttft_ms"] <= hi and hi >= counted["mean_ttft_ms"]
    summary = band.summary([])
    (row,) = [s for s in summary["settings"] if s["first_wave_counted"]]
    assert row["num_cases"] == 1 and row["stagger"] is False and row["cache_warm"] is False


def test_leaving_the_first_wave_out_lowers_the_ttft_of_a_burst_start(tmp_path):
    """A loop that counts its burst start (ten requests per client, as AIConfigurator's
    runners send them) against the same loop after a wave sent first and left out: the burst
    can only add waiting, so the counted run's mean TTFT is no shorter, and both are in the
    band."""
    loop = LOOP | {"num_requests": 16}
    cases = load_cases([write(tmp_path, [case(id="c", workload={"closed_loop": loop})])], BASE)
    results = run_all(cases, jobs=1)
    band = run_settings(cases, results, 1, lambda c: True)
    left_out = band.results[FIRST_WAVE_OUT]["c"]
    assert left_out is not results[0] and not left_out.error
    main = results[0].predicted["mean_ttft_ms"]
    assert main >= left_out.predicted["mean_ttft_ms"] > 0
    lo, hi = band.bands["c"]["mean_ttft_ms"]
    assert lo <= left_out.predicted["mean_ttft_ms"] and main <= hi


def test_a_front_end_makes_the_next_request_miss_the_step_that_starts_as_the_last_ends(tmp_path):
    """Four clients whose 512-token prompts share a 1,024-token budget come apart by a step;
    without a front end a client's next request then reaches the engine at the very end of the
    step that finished its last one and joins the next step; through a front end of
    FRONT_END_MS it arrives during that step and waits for the one after: TTFT grows by more
    than the front end itself. A case that states its front end keeps it."""
    loop = LOOP | {"num_requests": 20}
    budget = {"max_num_batched_tokens": 1024}
    specs = [
        case(id="c", workload={"closed_loop": loop}, engine_args=budget),
        case(id="stated", workload={"closed_loop": loop | {"frontend_ms": 3.0}}),
    ]
    cases = load_cases([write(tmp_path, specs)], BASE)
    got = {c.id: plausible(c) for c in cases}
    assert FRONT_END_SETTING in got["c"] and FRONT_END_SETTING not in got["stated"]
    assert setting_name(FRONT_END_SETTING).endswith(f"a {FRONT_END_MS:g} ms front end")
    results = run_all(cases[:1], jobs=1)
    band = run_settings(cases[:1], results, 1, lambda c: True)
    front = band.results[FRONT_END_SETTING]["c"]
    assert not front.error and front is not results[0]
    main = results[0].predicted["mean_ttft_ms"]
    assert front.predicted["mean_ttft_ms"] > main + FRONT_END_MS
    assert band.bands["c"]["mean_ttft_ms"][1] >= front.predicted["mean_ttft_ms"]
    (row,) = [s for s in band.summary([])["settings"] if s["front_end_ms"]]
    assert row["front_end_ms"] == FRONT_END_MS and row["num_cases"] == 1


def _run(workload: dict, **top):
    cfg = config(workload, **top)
    setup = Setup.from_config(cfg)
    work = generate(cfg.workload, np.random.default_rng(cfg.seed))
    engines = setup.engines(StepLog())
    outcome = run_simpy(work, engines)
    check_conservation(outcome, engines)
    return work, outcome


def test_the_front_end_serves_the_clients_one_at_a_time():
    loop = {"kind": "closed_loop", **LOOP, "frontend_ms": 5.0, "frontend_us_per_token": 10.0}
    work, outcome = _run(loop)
    each = 5e-3 + 10e-6 * 512  # 10.12 ms per request
    assert work.frontend_s == pytest.approx(np.full(12, each))
    reqs = sorted(outcome.requests, key=lambda r: r.request_id)
    first = reqs[:4]  # sent together at 0, handed over one after another
    assert all(r.arrival_s == 0 for r in first)
    starts = [r.first_scheduled_s for r in first]
    for k, start in enumerate(starts):
        assert start >= (k + 1) * each - 1e-12
    # TTFT counts from the send, the front end's time in it
    assert min(r.first_token_s - r.arrival_s for r in reqs) >= each
    # never more than `concurrency` sent and not finished, those in the front end included
    events = sorted([(r.arrival_s, 1) for r in reqs] + [(r.finish_s, -1) for r in reqs])
    assert max(np.cumsum([d for _, d in events])) <= 4


def test_a_front_end_delays_an_open_loop_too_and_costs_nothing_when_off():
    poisson = {"kind": "poisson", "rate": 20.0, "num_requests": 20}
    plain = simulate(config(poisson)).summary
    off = simulate(config(poisson | {"frontend_ms": 0.0})).summary
    assert off["mean_ttft_ms"] == plain["mean_ttft_ms"]
    _, outcome = _run(poisson | {"frontend_ms": 20.0})
    for r in outcome.requests:
        assert r.first_scheduled_s >= r.arrival_s + 0.02 - 1e-12
    slow = simulate(config(poisson | {"frontend_ms": 20.0})).summary
    assert slow["mean_ttft_ms"] >= plain["mean_ttft_ms"] + 20.0 - 1e-9
    assert "front end of 20 ms" in slow["sim"]["workload"]


def test_front_end_keys_are_checked_and_the_plain_loop_refuses_them():
    with pytest.raises(UserError, match="frontend_ms"):
        config({"frontend_ms": -1.0})
    cfg = config({"kind": "closed_loop", **LOOP, "frontend_ms": 1.0})
    work = generate(cfg.workload, np.random.default_rng(0))
    engine = Setup.from_config(cfg).engines(StepLog())[0]
    with pytest.raises(ValueError, match="use run_simpy"):
        run_loop(work, engine)


def test_the_closed_loops_ttft_inside_its_band_is_a_target():
    def row(case, measured, band, kind="closed_loop", err=1.0):
        lo, hi = band
        return Row(case, "mean_ttft_ms", measured, 1.0, err, "h200", "vllm@0.12.0", kind, "m",
                   "", band_low=lo, band_high=hi)  # fmt: skip

    table = [
        row("in", 100.0, (50.0, 200.0)),
        row("edge", 50.0, (50.0, 200.0)),
        row("above", 300.0, (50.0, 200.0)),
        row("below", 10.0, (50.0, 200.0)),
        row("unbanded", 10.0, (None, None)),
        row("open", 10.0, (50.0, 200.0), kind="poisson"),  # not a closed loop
        row("nan", 100.0, (50.0, 200.0), err=float("nan")),  # no comparable value
    ]
    (t,) = [t for t in targets(table) if t.target == CLOSED_LOOP_BAND_ROWS]
    assert t.value_pct == 50.0 and t.num_values == 4 and t.met is False and t.limit_pct == 80.0
    (none,) = band_targets([])
    assert none.value_pct is None and none.met is None
    table = [row(f"c{i}", 100.0, (50.0, 200.0)) for i in range(4)] + [table[2]]
    (t,) = band_targets(table)
    assert t.value_pct == 80.0 and t.met


def test_a_disaggregated_run_refuses_a_front_end_it_would_ignore():
    from sim.run.disagg import check

    for key in ("frontend_ms", "frontend_us_per_token"):
        with pytest.raises(UserError, match="disagg with a workload front end is not modelled"):
            check(config(workload={key: 2.0}))


def test_a_launch_an_importer_assumed_is_also_run_with_the_engines_defaults(tmp_path):
    """A silicon row's server is launched as AIConfigurator's generator launches it (a token
    budget of concurrency + ISL + 1500); the band also runs the engine's defaults (vLLM's
    8,192 on an H100), which let four 512-token prompts share one prefill step."""
    args = {"max_num_batched_tokens": 4 + 512 + 1500, "max_num_seqs": 4}
    loop = LOOP | {"num_requests": 16}
    specs = [
        case(
            id="c",
            workload={"closed_loop": loop},
            engine_args=args,
            launch={"source": "a generator", "engine_args": args},
        ),
        case(id="stated", workload={"closed_loop": loop}, engine_args=args),
    ]
    cases = load_cases([write(tmp_path, specs)], BASE)
    got = {c.id: plausible(c) for c in cases}
    assert DEFAULT_LAUNCH in got["c"] and DEFAULT_LAUNCH not in got["stated"]
    assert setting_name(DEFAULT_LAUNCH).endswith("the engine's default launch")
    results = run_all(cases[:1], jobs=1)
    band = run_settings(cases[:1], results, 1, lambda c: True)
    default = band.results[DEFAULT_LAUNCH]["c"]
    assert not default.error and default is not results[0]
    # at the default budget the four prompts of a wave prefill in one step, not in two
    main, dflt = results[0].predicted["mean_ttft_ms"], default.predicted["mean_ttft_ms"]
    assert dflt != main and min(dflt, main) > 0
