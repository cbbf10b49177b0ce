"""Scheduler properties on random workloads and tiny KV pools that force preemption."""

from __future__ import annotations

from dataclasses import replace

import hypothesis.strategies as st
import numpy as np
from hypothesis import HealthCheck, given, settings

from sim.config import SimConfig
from sim.run.driver import check_conservation, run_loop
from sim.run.metrics import StepLog
from sim.run.setup import Setup
from sim.workload.generate import generate
from sim.workload.request import Status
from tests.conftest import config, run_plain


def tiny_engine(cfg: SimConfig, num_blocks: int):
    """The configured engine with its KV pool cut to `num_blocks` blocks."""
    setup = Setup.from_config(cfg)
    setup = replace(setup, memory=replace(setup.memory, num_blocks=num_blocks))
    (engine,) = setup.engines(StepLog())
    return engine


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    num_requests=st.integers(1, 25),
    budget=st.sampled_from([16, 32, 64, 2048]),
    max_num_seqs=st.sampled_from([1, 2, 4, 16]),
    threshold=st.sampled_from([0, 8, 24]),
    num_blocks=st.integers(12, 60),
    reserve_full=st.booleans(),
    rate=st.sampled_from([5.0, 50.0, 500.0]),
    shared=st.sampled_from([0, 32]),
)
def test_properties_under_pressure(
    seed, num_requests, budget, max_num_seqs, threshold, num_blocks, reserve_full, rate, shared
):
    cfg = config(
        workload={
            "num_requests": num_requests,
            "rate": rate,
            "length_dist": "uniform",
            "input_len": 40,
            "output_len": 12,
            "range_ratio": 0.9,
            "shared_prefix_tokens": shared,
            "num_shared_prefixes": 2,
        },
        seed=seed,
        engine_args={
            "max_num_batched_tokens": max(budget, max_num_seqs),
            "max_num_seqs": max_num_seqs,
            "long_prefill_token_threshold": threshold,
            "scheduler_reserve_full_isl": reserve_full,
            "max_model_len": 150,
        },
    )
    engine = tiny_engine(cfg, num_blocks)
    workload = generate(cfg.workload, np.random.default_rng(seed))
    sched = engine.scheduler
    seen_finished: list[int] = []
    advance = engine.advance

    def checked_advance(now, horizon):  # one step, or a fast-forwarded run of them
        waiting_before = [r.request_id for r in sched.waiting]
        preemptions_before = {r.request_id: r.num_preemptions for r in sched.waiting}
        rows = len(engine.steps)
        durations, finished = advance(now, horizon)
        frame = engine.steps.frame().iloc[rows:]
        assert len(frame) == len(durations)
        tokens = frame["prefill_tokens"] + frame["decode_tokens"]
        assert (tokens <= engine.cost.settings.max_num_batched_tokens).all()  # budget kept
        assert (frame["batch_size"] <= max_num_seqs).all()
        assert min(durations) > 0
        sched.check_invariants()
        seen_finished.extend(r.request_id for r in finished)
        # admissions from the waiting queue keep its order (FCFS); a request admitted and then
        # preempted back to the waiting queue within a fast-forwarded run of steps was admitted
        still = {r.request_id: r.num_preemptions for r in sched.waiting}
        admitted = [
            rid
            for rid in waiting_before
            if rid not in still or still[rid] > preemptions_before[rid]
        ]
        assert admitted == waiting_before[: len(admitted)]
        return durations, finished

    engine.advance = checked_advance
    outcome = run_loop(workload, engine)
    check_conservation(outcome, [engine])
    finished = [r for r in outcome.requests if r.status is Status.FINISHED]
    assert sorted(seen_finished) == sorted(r.request_id for r in finished)
    assert len(seen_finished) == len(set(seen_finished))  # every request finishes once
    for r in outcome.requests:
        assert r.status in (Status.FINISHED, Status.REJECTED)
        if r.status is Status.FINISHED:
            assert r.num_output_tokens == r.max_output_len
            assert r.arrival_s <= r.first_scheduled_s <= r.first_token_s <= r.finish_s


def test_preemption_recomputes_and_loses_nothing():
    """A pool far too small for the load: requests are preempted, and all still finish."""
    cfg = config(
        workload={"num_requests": 30, "rate": 1000.0, "input_len": 64, "output_len": 64},
        engine_args={"max_model_len": 256},
    )
    engine = tiny_engine(cfg, 30)
    workload = generate(cfg.workload, np.random.default_rng(0))
    outcome = run_loop(workload, engine)
    check_conservation(outcome, [engine])
    assert engine.scheduler.num_preemptions > 0
    preempted = [r for r in outcome.requests if r.num_preemptions]
    assert preempted and all(r.status is Status.FINISHED for r in preempted)
    assert sum(engine.steps.columns["num_preempted"]) == engine.scheduler.num_preemptions


def test_fcfs_first_scheduled_in_arrival_order():
    cfg = config(
        workload={
            "num_requests": 200,
            "rate": 40.0,
            "length_dist": "lognormal",
            "input_len": 800,
            "output_len": 100,
        },
        engine_args={"gpu_memory_utilization": 0.3, "max_model_len": 8192},
    )
    outcome, _engine, _ = run_plain(cfg, check_every_step=True)
    firsts = [r.first_scheduled_s for r in outcome.requests if r.status is Status.FINISHED]
    assert len(firsts) > 150 and firsts == sorted(firsts)


def test_chunked_prefill_respects_long_prefill_threshold():
    cfg = config(
        workload={"num_requests": 3, "rate": 1.0, "input_len": 1000, "output_len": 2},
        engine_args={"long_prefill_token_threshold": 128},
    )
    _outcome, engine, _ = run_plain(cfg)
    prefill = np.frombuffer(engine.steps.columns["prefill_tokens"], dtype=np.int64)
    assert prefill.max() <= 128
    # 1000 prompt tokens in chunks of at most 128: 8 chunks per request before its first token
    assert (prefill > 0).sum() >= 3 * 8
