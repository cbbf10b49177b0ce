"""vLLM V1's async scheduling (on by default from 0.14.0) plans step n + 1 while step n runs
(EngineCore.step_with_batch_queue, a batch queue of two at pp 1), as SGLang's overlap
scheduler does (sim/schedulers/ahead.py): a request that reaches the engine while a step runs
waits for the step after the next; an idle engine plans at once (issue 43)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.run.colocated import stagger_first_wave
from sim.run.driver import check_conservation, run_simpy
from sim.run.metrics import StepLog
from sim.run.setup import Setup
from sim.workload.generate import generate
from tests.conftest import config

# clients spread over a request's lifetime (workload.stagger): each sends while others run
LOOP = {"kind": "closed_loop", "concurrency": 4, "num_requests": 16, "input_len": 500}


def _run(engine: str, engine_args: dict | None = None, workload: dict | None = None, **kw):
    cfg = config(
        LOOP | {"output_len": 16, "stagger": True} | (workload or {}),
        engine=engine,
        hardware="h100-sxm",
        model="llama-3.1-8b",
        engine_args=engine_args or {},
        **kw,
    )
    setup = Setup.from_config(cfg)
    work = generate(cfg.workload, np.random.default_rng(cfg.seed))
    if cfg.workload.stagger:
        work = stagger_first_wave(work, setup)
    log = StepLog()
    engines = setup.engines(log)
    outcome = run_simpy(work, engines)
    check_conservation(outcome, engines)
    reqs = sorted(outcome.requests, key=lambda r: r.request_id)
    return setup.settings, reqs, log.frame(), engines[0].scheduler


def _lags(reqs, steps) -> list[int]:
    """For each request sent while others still run (a closed loop's next request, sent as
    its client's last one finishes), the steps from the one starting at its send to the one
    that first schedules it."""
    starts = list(np.round(steps.start_s.to_numpy(), 12))
    lags = []
    for r in reqs[4:]:
        if any(q.first_scheduled_s < r.arrival_s < q.finish_s for q in reqs if q is not r):
            sent = starts.index(round(r.arrival_s, 12))
            lags.append(starts.index(round(r.first_scheduled_s, 12)) - sent)
    return lags


@pytest.mark.parametrize(
    ("engine", "args", "lag"),
    [
        ("vllm@0.18.0", {}, 2),  # async scheduling auto-enabled (0.14.0)
        ("vllm@0.14.0", {}, 2),
        ("vllm@0.13.0", {}, 0),  # an opt-in flag before 0.14
        ("vllm@0.18.0", {"async_scheduling": False}, 0),
        ("vllm@0.13.0", {"async_scheduling": True}, 2),
    ],
)
def test_a_request_sent_while_a_step_runs_waits_for_the_step_after_the_next(engine, args, lag):
    settings, reqs, steps, sched = _run(engine, args)
    assert sched.plans_ahead == settings.async_scheduling == (lag > 0)
    lags = _lags(reqs, steps)
    assert lags and lags == [lag] * len(lags)


def test_an_idle_engine_plans_a_request_at_once():
    _, reqs, _, _ = _run("vllm@0.18.0", workload={"concurrency": 1, "num_requests": 3})
    for r in reqs:
        assert r.first_scheduled_s == r.arrival_s


def test_a_burst_larger_than_a_step_is_planned_step_after_step():
    """A burst woke the idle engine; its first plan saw every request, so the plan of the
    second step (made as the first starts) sees the ones the first had no budget for."""
    burst = {"concurrency": 8, "num_requests": 8, "input_len": 1500, "stagger": False}
    _, reqs, steps, _ = _run("vllm@0.18.0", {"max_num_batched_tokens": 2048}, burst)
    starts = list(np.round(steps.start_s.to_numpy(), 12))
    firsts = sorted({starts.index(round(r.first_scheduled_s, 12)) for r in reqs})
    assert len(firsts) > 2 and firsts == list(range(len(firsts)))


def test_the_lag_costs_about_a_step_of_ttft_and_nothing_of_the_tokens():
    """Open loop, the same requests: the mean TTFT of a busy engine is longer by about one
    step (the rest of the running step is waited for either way)."""
    work = {"kind": "poisson", "rate": 8.0, "num_requests": 60, "output_len": 64, "stagger": False}
    _, on, steps_on, _ = _run("vllm@0.18.0", workload=work)
    _, off, _, _ = _run("vllm@0.18.0", {"async_scheduling": False}, work)
    ttft = lambda reqs: np.array([r.first_token_s - r.arrival_s for r in reqs])  # noqa: E731
    extra = ttft(on) - ttft(off)
    step = float(np.median(steps_on.duration_s))
    assert 0.3 * step < extra.mean() < 2.0 * step, (extra.mean(), step)
    assert sum(r.num_output_tokens for r in on) == sum(r.num_output_tokens for r in off)


def test_pipeline_parallel_replicas_do_not_plan_ahead_again():
    """With pp > 1 vLLM's batch queue holds pp micro-batches whether or not async scheduling
    is on (the executor's max_concurrent_batches): the pipeline's own model, no second lag."""
    settings, _, _, sched = _run("vllm@0.18.0", parallel={"tp": 1, "pp": 2})
    assert settings.async_scheduling and not sched.plans_ahead
