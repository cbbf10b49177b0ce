"""vLLM V1's lane (the running set as arrays, sim/schedulers/lane.py) changes nothing: runs
scheduled through it and through the Request objects write the same bytes.

LANE_MIN is set to 1 (every step with a running request goes through the lane where it can)
or out of reach (never), on the command path with fast-forward off (every step scheduled one
at a time) and on; each case must really use the lane, or the comparison would prove nothing.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from sim.config import SimConfig
from sim.schedulers import vllm_v1
from sim.schedulers.lane import Lane
from tests.conftest import run_plain
from tests.test_determinism import _run
from tests.test_fast_forward import CASES as FF_CASES

CASES = {
    "default": [],
    "prefix-sharing": FF_CASES["vllm-v1-prefix-sharing"],
    # (short of blocks: without a prefix cache fast-forwarded runs admit the waiting requests
    # themselves, and with fast-forward on few steps are left to the scheduler otherwise)
    "no-prefix-caching": [
        "engine_args.enable_prefix_caching=false",
        *FF_CASES["vllm-v1-short-of-blocks"],
    ],
    # the budget cuts the running requests (chunked prefills beside decodes) and a threshold
    "small-budget": [
        "engine_args.max_num_batched_tokens=256",
        "engine_args.max_num_seqs=64",
        "engine_args.long_prefill_token_threshold=96",
        "workload.rate=30",
    ],
    # short of blocks: steps that might preempt go through objects, the rest through the lane
    "short-of-blocks": FF_CASES["vllm-v1-short-of-blocks"],
    "priority": FF_CASES["vllm-v1-priority"],
    "closed-loop-warmup": FF_CASES["vllm-v1-closed-loop-warmup"],
    "pipeline-parallel": ["parallel.pp=2"],
    "offload": [
        "scenario=multi_turn",
        "engine_args.num_gpu_blocks_override=400",
        "engine_args.max_model_len=6000",
        "engine_args.kv_offload_cpu_bytes=536870912",
    ],
    "disagg": FF_CASES["vllm-v1-disagg-short-of-blocks"],
    # requests in flight at the stop are read as the lane holds them (the driver syncs it)
    "time-limit": FF_CASES["vllm-v1-time-limit"],
    "two-replicas": ["parallel.dp=2"],
}


def _count_lane_steps(monkeypatch) -> list[int]:
    used = [0]
    schedule = vllm_v1.VllmV1Scheduler._schedule_lane

    def counted(self, lane, now):
        plan = schedule(self, lane, now)
        used[0] += plan is not None
        return plan

    monkeypatch.setattr(vllm_v1.VllmV1Scheduler, "_schedule_lane", counted)
    return used


@pytest.mark.parametrize("fast_forward", [False, True])
@pytest.mark.parametrize("name", list(CASES))
def test_lane_gives_the_same_bytes(name, fast_forward, tmp_path, monkeypatch):
    common = ["workload.num_requests=120", f"fast_forward={str(fast_forward).lower()}"]
    common += CASES[name]
    used = _count_lane_steps(monkeypatch)
    monkeypatch.setattr(vllm_v1, "LANE_MIN", 10**9)
    objects = _run(tmp_path, "objects", monkeypatch, *common)
    assert used[0] == 0
    monkeypatch.setattr(vllm_v1, "LANE_MIN", 1)
    lane = _run(tmp_path, "lane", monkeypatch, *common)
    assert used[0] > 20, "the lane scheduled (almost) nothing"
    files = sorted(p.name for p in objects.iterdir() if p.is_file() and p.name != "summary.json")
    assert files == sorted(
        p.name for p in lane.iterdir() if p.is_file() and p.name != "summary.json"
    )
    for file in files:
        assert (objects / file).read_bytes() == (lane / file).read_bytes(), file
    a, b = (json.loads((d / "summary.json").read_text()) for d in (objects, lane))
    for s in (a, b):  # (runs that admit stop where the lane would schedule: fewer steps in
        # runs with LANE_MIN at 1)
        s["sim"].pop("wall_time_s"), s["sim"].pop("cpu_time_s")
        s["sim"].pop("fast_forwarded_steps")
    assert a == b


@pytest.mark.parametrize(
    "workload",
    [
        {"num_requests": 150, "rate": 60.0, "input_len": 300, "output_len": 60},
        {"num_requests": 150, "rate": 60.0, "shared_prefix_tokens": 256, "num_shared_prefixes": 3},
    ],
)
def test_lane_mirrors_the_requests_after_every_step(workload, monkeypatch):
    """With a pool short of blocks (preemptions) and fast-forward on, the lane's arrays equal
    the running requests' own counters after every step and run (check_invariants)."""
    monkeypatch.setattr(vllm_v1, "LANE_MIN", 1)
    used = _count_lane_steps(monkeypatch)
    cfg = SimConfig.from_mapping(
        {
            "cost_profile": "prior",
            "engine_args": {
                "num_gpu_blocks_override": 300,
                "max_num_seqs": 64,
                "max_model_len": 2048,
            },
            "workload": workload,
        }
    )
    outcome, engine, _ = run_plain(cfg, check_every_step=True)
    assert used[0] > 20
    assert engine.scheduler.num_preemptions > 0  # steps through objects too
    assert all(r.status.value == "finished" for r in outcome.requests)


def test_lane_check_catches_a_stale_row():
    """Lane.check fails when a request's counter moved without the lane."""
    from sim.workload.request import Request

    reqs = [Request(i, 0.0, 20, 5, [i], 16) for i in range(3)]
    blocks = {r.request_id: [object(), object()] for r in reqs}
    lane = Lane(reqs, blocks, 0)
    lane.check(reqs, blocks)
    reqs[1].num_computed_tokens = 7
    with pytest.raises(AssertionError, match=r"^c$"):
        lane.check(reqs, blocks)
    assert np.array_equal(lane.t, [20, 20, 20])


def _pool_state(kv) -> tuple:
    pool = kv.pool
    return (
        {rid: list(blocks) for rid, blocks in kv.req_blocks.items()},
        [(h, list(same)) for h, same in pool.cached.items()],
        list(pool.free_queue),
        dict(kv.num_cached_blocks),
        dict(kv.private_from),
    )


@pytest.mark.parametrize("seed", range(6))
def test_grow_decodes_makes_the_pool_calls_grow_makes(seed):
    """KVCacheManager.grow_decodes against grow one request at a time: requests whose content
    comes from a tiny alphabet (blocks hashed as they fill collide with cached, idle blocks the
    takes evict), finishing now and then; the same blocks, hashes, queue and counts."""
    from sim.kv.manager import KVCacheManager, cdiv
    from sim.workload.request import Request

    rng = np.random.default_rng(seed)
    bs = 4
    a, b = (KVCacheManager(40, bs, True) for _ in range(2))
    live: list[Request] = []
    next_id = 0
    for _ in range(600):
        if len(live) < 8 and rng.random() < 0.5:  # admit one
            ids = rng.integers(0, 1 + seed % 3, 40).tolist()  # one letter: every hash collides
            r = Request(next_id, 0.0, int(rng.integers(2, 14)), 20, ids, 2)
            r.first_private_id = None if rng.random() < 0.7 else 3
            next_id += 1
            hits_a, tok = a.get_computed_blocks(r)
            hits_b, _ = b.get_computed_blocks(r)
            got = a.allocate_slots(r, r.num_tokens - tok, hits_a, tok)
            if got is None:
                continue
            assert b.allocate_slots(r, r.num_tokens - tok, hits_b, tok) is not None
            r.num_computed_tokens = r.num_tokens
            r.num_output_tokens = 1  # sampled: its KV computed by the next step
            live.append(r)
        elif live and rng.random() < 0.15:  # finish one
            r = live.pop(int(rng.integers(len(live))))
            a.free(r, finished=True)
            b.free(r, finished=True)
        else:  # a decode step of every live request
            rows, takes = [], []
            for r in live:
                c, held = r.num_computed_tokens, len(a.req_blocks[r.request_id])
                if cdiv(c + 1, bs) > held or (c + 1) // bs > c // bs:
                    rows.append(r)
                    takes.append(cdiv(c + 1, bs) > held)
            if sum(takes) > a.num_free_blocks:
                continue
            for r in rows:
                assert a.grow(r, 1)
            b.grow_decodes(rows, takes, [r.num_computed_tokens for r in rows])
            for r in live:  # the token computed, and the next one sampled
                r.num_computed_tokens += 1
                r.num_output_tokens += 1
            for r in [r for r in live if r.num_output_tokens == r.max_output_len]:
                live.remove(r)
                a.free(r, finished=True)
                b.free(r, finished=True)
        assert _pool_state(a) == _pool_state(b)
    a.check_invariants()
    b.check_invariants()
