"""The skeleton's invariants hold for every scheduler family: random workloads, random limits,
KV pools small enough to force preemption, retraction and swapping."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
from hypothesis import HealthCheck, given, settings

from sim.run.driver import check_conservation, run_loop, run_simpy
from sim.run.engine import SCHEDULERS
from sim.run.metrics import StepLog
from sim.run.setup import Setup
from sim.workload.generate import generate
from sim.workload.request import Status
from tests.conftest import config
from tests.test_scheduler import tiny_engine

# name: (engine spec, engine_args, whether every step stays within the token budget,
#        whether admissions follow arrival order)
FAMILIES = {
    "vllm_v0": ("vllm@0.6.6", {}, True, True),
    "vllm_v0_swap": ("vllm@0.6.6", {"preemption_mode": "swap"}, True, False),
    "vllm_v0_chunked": ("vllm@0.6.6", {"enable_chunked_prefill": True}, True, True),
    "vllm_v0_multi_step": ("vllm@0.6.6", {"num_scheduler_steps": 4}, True, True),
    "vllm_v1": ("vllm@0.10.2", {}, True, True),
    "vllm_v1_priority": ("vllm", {"scheduling_policy": "priority"}, True, False),
    "sglang_lpm": ("sglang@0.3.6", {}, False, False),
    "sglang": ("sglang", {}, False, False),
    "trtllm": ("trtllm", {}, True, True),
    "trtllm_max_utilization": (
        "trtllm",
        {"capacity_scheduler_policy": "MAX_UTILIZATION", "enable_chunked_prefill": True},
        True,
        False,
    ),
    "orca": ("orca", {}, True, True),
    "static": ("static", {}, True, True),
}


def family_config(family: str, seed: int, workload: dict, budget: int, max_num_seqs: int):
    spec, extra, _, _ = FAMILIES[family]
    args = {"max_model_len": 150, "max_num_seqs": max_num_seqs, **extra}
    if family in ("vllm_v0", "vllm_v0_swap", "vllm_v0_multi_step"):
        args["max_num_batched_tokens"] = 256  # V0 without chunking needs >= max_model_len
    else:
        args["max_num_batched_tokens"] = max(budget, max_num_seqs)
    if family.startswith("trtllm"):
        args["tokens_per_block"] = 16
    return config(workload=workload, seed=seed, engine=spec, engine_args=args)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    family=st.sampled_from(sorted(FAMILIES)),
    seed=st.integers(0, 10_000),
    num_requests=st.integers(1, 25),
    budget=st.sampled_from([16, 32, 64, 2048]),
    max_num_seqs=st.sampled_from([1, 2, 4, 16]),
    num_blocks=st.integers(12, 60),
    rate=st.sampled_from([5.0, 50.0, 500.0]),
    shared=st.sampled_from([0, 32]),
)
def test_invariants_hold_for_every_family(
    family, seed, num_requests, budget, max_num_seqs, num_blocks, rate, shared
):
    workload_cfg = {
        "num_requests": num_requests,
        "rate": rate,
        "length_dist": "uniform",
        "input_len": 40,
        "output_len": 12,
        "range_ratio": 0.9,
        "shared_prefix_tokens": shared,
        "num_shared_prefixes": 2,
        "priority_levels": 3,
    }
    cfg = family_config(family, seed, workload_cfg, budget, max_num_seqs)
    _, _, within_budget, in_order = FAMILIES[family]
    engine = tiny_engine(cfg, num_blocks)
    workload = generate(cfg.workload, np.random.default_rng(seed))
    sched = engine.scheduler
    limit = engine.cost.settings.max_num_batched_tokens
    seen_finished: list[int] = []
    advance = engine.advance

    def checked_advance(now, horizon):  # one step, or a fast-forwarded run of them
        waiting_before = [r.request_id for r in sched.waiting]
        preempted_before = {r.request_id: r.num_preemptions for r in sched.waiting}
        rows = len(engine.steps)
        durations, finished = advance(now, horizon)
        frame = engine.steps.frame().iloc[rows:]
        assert len(frame) == len(durations)
        if within_budget:
            assert ((frame["prefill_tokens"] + frame["decode_tokens"]) <= limit).all()
        assert (frame["batch_size"] <= engine.cost.settings.max_num_seqs).all()
        assert min(durations) > 0
        sched.check_invariants()
        seen_finished.extend(r.request_id for r in finished)
        if in_order:  # admissions from the waiting queue keep its order
            # admitted: gone from the queue, or back in it preempted since (a fast-forwarded
            # run can admit a request, run it and preempt it again: vLLM V0 recompute)
            still = {r.request_id: r.num_preemptions for r in sched.waiting}
            admitted = [
                rid for rid in waiting_before
                if rid not in still or still[rid] > preempted_before[rid]
            ]  # fmt: skip
            assert admitted == waiting_before[: len(admitted)]
        return durations, finished

    engine.advance = checked_advance
    outcome = run_loop(workload, engine)
    check_conservation(outcome, [engine])
    assert sorted(seen_finished) == sorted(
        r.request_id for r in outcome.requests if r.status is Status.FINISHED
    )
    assert len(seen_finished) == len(set(seen_finished))
    for r in outcome.requests:
        assert r.status in (Status.FINISHED, Status.REJECTED)
        if r.status is Status.FINISHED:
            assert r.num_output_tokens == r.max_output_len
            assert r.arrival_s <= r.first_scheduled_s <= r.first_token_s <= r.finish_s
        else:
            assert r.reject_reason


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    pp=st.sampled_from([1, 2, 4]),
    dp=st.sampled_from([1, 2, 3]),
    router=st.sampled_from(["least_loaded", "least_outstanding", "round_robin", "prefix_aware"]),
)
def test_pipeline_and_replicas_lose_nothing(seed, pp, dp, router):
    cfg = config(
        workload={
            "num_requests": 40,
            "rate": 200.0,
            "length_dist": "uniform",
            "range_ratio": 0.5,
            "shared_prefix_tokens": 64,
            "num_shared_prefixes": 3,
        },
        seed=seed,
        parallel={"pp": pp, "dp": dp, "router": router},
    )
    setup = Setup.from_config(cfg)
    engines = setup.engines(StepLog())
    outcome = run_simpy(generate(cfg.workload, np.random.default_rng(seed)), engines, router=router)
    check_conservation(outcome, engines)
    assert all(r.status is Status.FINISHED for r in outcome.requests)
    assert all(r.num_output_tokens == r.max_output_len for r in outcome.requests)
    used = {outcome.replica_of[r.request_id] for r in outcome.requests}
    assert used <= set(range(dp))
    if router == "round_robin":
        assert [outcome.replica_of[i] for i in range(6)] == [i % dp for i in range(6)]


def test_every_scheduler_family_is_covered():
    """A new family (docs/architecture.md's recipe) joins FAMILIES, or these tests miss it."""
    covered = {
        Setup.from_config(family_config(f, 0, {"num_requests": 1}, 256, 8)).settings.scheduler
        for f in FAMILIES
    }
    assert covered == set(SCHEDULERS)
