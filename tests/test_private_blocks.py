"""Blocks no other request can share are hashed lazily (only when their request is preempted),
which changes nothing: the same requests and steps as hashing every block when it fills."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from sim.cli import compose_config, to_sim_config
from sim.run.driver import check_conservation, run_simpy
from sim.run.metrics import StepLog, requests_frame
from sim.run.setup import Setup
from sim.workload.generate import first_private_ids, generate
from tests.conftest import shared_data

CASES = {
    "chat": [],
    "prefix-sharing": ["scenario=prefix_sharing"],
    "multi-turn": ["scenario=multi_turn"],
    "preemptions": ["scenario=overload", "workload.num_requests=300"],
    "sglang-retractions": ["scenario=overload", "workload.num_requests=300", "engine=sglang"],
    "v0-swap": [
        "scenario=overload",
        "workload.num_requests=300",
        "engine=vllm@0.6.6",
        "engine_args.preemption_mode=swap",
        "engine_args.enable_prefix_caching=true",
    ],
    "two-replicas-prefix-router": [
        "scenario=multi_turn",
        "parallel.dp=2",
        "parallel.router=prefix_aware",
    ],
}


def _run(overrides: list[str], lazy: bool):
    cfg = to_sim_config(compose_config(["workload.num_requests=200", *overrides]))
    setup = Setup.from_config(cfg)
    workload = generate(cfg.workload, np.random.default_rng(cfg.seed))
    if not lazy:
        workload = replace(workload, first_private=None)  # every block hashed when filled
    log = StepLog()
    engines = setup.engines(log)
    outcome = run_simpy(workload, engines, router=cfg.parallel.router)
    check_conservation(outcome, engines)
    for engine in engines:
        engine.kv.check_invariants()
    requests = requests_frame(outcome.records, workload.priority)
    return requests, log.frame(), engines


@pytest.mark.parametrize("name", list(CASES))
def test_lazy_hashing_changes_nothing(name):
    eager_requests, eager_steps, eager = _run(CASES[name], lazy=False)
    lazy_requests, lazy_steps, lazy = _run(CASES[name], lazy=True)
    assert eager_requests.equals(lazy_requests)
    assert eager_steps.equals(lazy_steps)
    if name == "preemptions":
        assert eager_steps["num_preempted"].sum() > 0
    if name in ("prefix-sharing", "multi-turn"):
        assert eager_requests["cached_tokens"].sum() > 0
    # and it saves work: fewer hashed blocks left behind in the pool
    assert sum(len(e.kv.pool.cached) for e in lazy) <= sum(len(e.kv.pool.cached) for e in eager)


def test_lazy_hashing_on_the_mooncake_trace():
    """Mooncake's own prefix hash ids: shared blocks stay hashed when filled."""
    path = shared_data("traces/mooncake_fast25/conversation_trace.jsonl")
    overrides = [
        "workload=trace",
        f"workload.path={path}",
        "workload.num_requests=150",
        "engine_args.max_model_len=131072",
    ]
    eager_requests, eager_steps, _ = _run(overrides, lazy=False)
    lazy_requests, lazy_steps, _ = _run(overrides, lazy=True)
    assert eager_requests["cached_tokens"].sum() > 0
    assert eager_requests.equals(lazy_requests)
    assert eager_steps.equals(lazy_steps)


def test_first_private_ids():
    ids = np.array([1, 2, 3, 1, 2, 9, 5, 5, 7, 8, 3])
    offsets = np.array([0, 3, 6, 8, 10, 11])
    # request 0 shares 1, 2 with request 1 and 3 with request 4: nothing private;
    # request 1's 9 is its own; 5 appears twice, both in request 2: still private
    assert first_private_ids(ids, offsets).tolist() == [3, 2, 0, 0, 1]
