"""vLLM V0 multi-step scheduling as the client sees it.

Before 0.6.2 a window's tokens reach the client together when the window ends (one chunk per
request: the benchmark client counts it as one inter-token gap), and a request that finishes
inside a window ends with it; from 0.6.2 each step's tokens stream. New requests wait for the
window either way. num_scheduler_steps exists from 0.5.5 to 0.10.0 only.
"""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from sim.engines.resolve import resolve
from sim.errors import UserError
from sim.run.driver import check_conservation, run_loop
from sim.run.simulate import simulate
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model
from sim.workload.generate import generate
from sim.workload.request import Status
from tests.conftest import config
from tests.test_scheduler import tiny_engine
from tests.test_scheduler_families import drive, make, req


def gaps(sched) -> list[float]:
    return sorted(np.repeat(np.frombuffer(sched.itl.gaps_s), sched.itl.counts).tolist())


def test_window_tokens_reach_the_client_at_its_end():
    sched = make("vllm@0.6.0", 40, max_model_len=64, num_scheduler_steps=4)
    a = req("A", 16, 8)
    steps = drive(sched, {1: [a]}, 8)
    assert steps == [[("A", 16)]] + [[("A", 1)]] * 7  # prefill, a 4-step window, 3 of the next
    assert a.first_token_s == 1.0  # the prefill step's token is shown at once
    assert a.finish_s == 8.0 and a.num_output_tokens == 8
    assert gaps(sched) == [3.0, 4.0]  # steps 2-5 shown at 5, steps 6-8 at 8 (A ended it)


def test_streamed_each_step_from_0_6_2():
    sched = make("vllm@0.6.2", 40, max_model_len=64, num_scheduler_steps=4)
    a = req("A", 16, 8)
    drive(sched, {1: [a]}, 8)
    assert gaps(sched) == [1.0] * 7 and a.finish_s == 8.0


def test_a_request_finishing_inside_a_window_ends_with_it():
    sched = make("vllm@0.6.0", 40, max_model_len=64, num_scheduler_steps=4)
    a, b = req("A", 16, 12), req("B", 16, 3)
    finished_at, padding = {}, {}
    for k in range(1, 10):
        if k == 1:
            for r in (a, b):
                sched.add_request(r)
        plan = sched.schedule(k - 1.0)
        padding[k] = plan.padding_context
        for r in sched.update_from_output(plan, float(k)):
            finished_at[chr(r.request_id)] = k
        sched.check_invariants()
        ids = {r.request_id for r in sched.held_requests()}
        assert ("B" not in finished_at) == (ord("B") in ids)  # held until the driver is told
    # prefill at 1, window of steps 2-5: B's tokens 2 and 3 come at steps 2 and 3, shown at 5
    assert finished_at["B"] == 5 and b.finish_s == 5.0 and b.num_output_tokens == 3
    assert b.last_token_s == 5.0
    # the engine learns of B's end at 5: its row still runs at steps 4 and 5 (context 18, 19)
    assert padding == {k: () for k in range(1, 10)} | {4: (18,), 5: (19,)}


def test_new_request_waits_for_the_window_before_its_prefill():
    sched = make("vllm@0.6.0", 40, max_model_len=64, num_scheduler_steps=4)
    a, c = req("A", 16, 8), req("C", 16, 2)
    steps = drive(sched, {1: [a], 3: [c]}, 6)
    assert steps[5] == [("C", 16)]  # arrived at 2, prefilled once the window (2-5) ended
    assert c.first_token_s == 6.0


def small(steps: int, engine: str = "vllm@0.6.0"):
    cfg = config(
        {"num_requests": 50, "rate": 8.0, "input_len": 256, "output_len": 64},
        engine=engine,
        engine_args={"num_scheduler_steps": steps, "max_model_len": 4096},
    )
    return simulate(cfg)


def test_itl_is_the_window_and_ttft_grows_with_multi_step():
    one, ten = small(1), small(10)
    for run in (one, ten):
        assert (run.requests["status"] == "finished").all() and len(run.requests) == 50
        assert (run.requests["output_tokens"] == 64).all()  # no token lost or added
    s1, s10 = one.summary, ten.summary
    # one gap per window: about ten steps, where single steps give one
    assert 6 * s1["median_itl_ms"] < s10["median_itl_ms"] < 12 * s1["median_itl_ms"]
    assert s10["mean_ttft_ms"] > s1["mean_ttft_ms"]  # arrivals wait for the running window
    # ITL entries: one per window and request, 63 tokens after the first in windows of 10
    assert ten.itl[1].sum() < one.itl[1].sum() / 5


def test_from_0_6_2_itl_is_the_step():
    one, ten = small(1, "vllm@0.6.3"), small(10, "vllm@0.6.3")
    assert ten.summary["median_itl_ms"] < 2 * one.summary["median_itl_ms"]


def resolved(spec: str, **args):
    return resolve(spec, load_hardware("a100-80gb"), load_model("llama-3.1-8b"), 1, overrides=args)


@pytest.mark.parametrize(
    "spec", ["vllm@0.5.5", "vllm@0.6.0", "vllm@0.7.3", "vllm@0.9.2", "vllm@0.10.0"]
)
def test_every_release_with_multi_step_takes_it(spec):
    s = resolved(spec, num_scheduler_steps=8)
    assert s.num_scheduler_steps == 8 and s.scheduler == "vllm_v0"


def test_chunked_prefill_auto_on_gives_way_before_0_6_2():
    s = resolved("vllm@0.6.0", num_scheduler_steps=8)  # max_model_len 131072 > 32K
    assert not s.enable_chunked_prefill and s.max_num_batched_tokens == s.max_model_len
    assert resolved("vllm@0.6.0").enable_chunked_prefill  # single-step: auto-on as before


@pytest.mark.parametrize(
    ("spec", "args", "says"),
    [
        ("vllm@0.5.3", {}, "arrived in 0.5.5"),
        ("vllm@0.10.2", {}, "removed in 0.10.1"),
        ("vllm@0.11.0", {}, "removed in 0.10.1"),
        ("vllm@0.6.0", {"enable_chunked_prefill": True}, "refuses both together"),
        ("sglang@0.4.6", {}, "not sglang's"),
    ],
)
def test_releases_without_multi_step_refuse_it(spec, args, says):
    with pytest.raises(UserError, match=says):
        resolved(spec, num_scheduler_steps=4, **args)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    num_requests=st.integers(1, 25),
    max_num_seqs=st.sampled_from([1, 2, 4, 16]),
    num_blocks=st.integers(12, 60),
    rate=st.sampled_from([5.0, 50.0, 500.0]),
    swap=st.booleans(),
    steps=st.sampled_from([2, 4, 10]),
    time_limit=st.sampled_from([None, 0.05, 0.2]),
)
def test_nothing_lost_when_windows_hold_tokens_back(
    seed, num_requests, max_num_seqs, num_blocks, rate, swap, steps, time_limit
):
    """Small pools (preemption, swapping), every window length, runs cut by a time limit
    while finished requests are held back: every request is accounted for once."""
    args = {"max_model_len": 150, "max_num_seqs": max_num_seqs, "max_num_batched_tokens": 256}
    args |= {"num_scheduler_steps": steps, "preemption_mode": "swap" if swap else "recompute"}
    cfg = config(
        {
            "num_requests": num_requests,
            "rate": rate,
            "length_dist": "uniform",
            "input_len": 40,
            "output_len": 12,
            "range_ratio": 0.9,
        },
        seed=seed,
        engine="vllm@0.6.0",
        engine_args=args,
        max_sim_time_s=time_limit,
    )
    engine = tiny_engine(cfg, num_blocks)
    assert engine.scheduler.burst
    workload = generate(cfg.workload, np.random.default_rng(seed))
    seen: list[int] = []
    advance = engine.advance

    def checked(now, horizon):
        durations, finished = advance(now, horizon)
        engine.scheduler.check_invariants()
        seen.extend(r.request_id for r in finished)
        return durations, finished

    engine.advance = checked
    outcome = run_loop(workload, engine, until_s=time_limit)
    check_conservation(outcome, [engine])
    assert len(seen) == len(set(seen))
    for r in outcome.requests:
        if r.status is Status.FINISHED:
            assert r.request_id in seen and r.num_output_tokens == r.max_output_len
            assert r.arrival_s <= r.first_token_s <= r.finish_s
    if time_limit is None:
        assert all(r.status in (Status.FINISHED, Status.REJECTED) for r in outcome.requests)
