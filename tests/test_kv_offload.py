"""KV offload tiers: evicted prefix blocks move down instead of vanishing, hits load them back
at the link's price, and a block's content lives in exactly one tier or none."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sim.errors import UserError
from sim.kv.offload import OffloadTiers
from sim.run.setup import Setup
from sim.run.simulate import simulate
from sim.schedulers.base import StepPlan
from tests.conftest import config, run_plain

MULTI_TURN = {
    "num_requests": 160, "rate": 40.0, "turns_per_session": 4, "concurrent_sessions": 40,
    "input_len": 600, "output_len": 32,
}  # fmt: skip


def _cfg(cpu_bytes: float = 0, **args):
    """Multi-turn chat on a pool far too small for the sessions (400 blocks of 16 tokens)."""
    engine_args = {
        "num_gpu_blocks_override": 400, "max_model_len": 6000, "kv_offload_cpu_bytes": cpu_bytes,
        **args,
    }  # fmt: skip
    return config(MULTI_TURN, engine_args=engine_args)


def test_tiers_move_content_down_and_back_once():
    t = OffloadTiers(2, 1, bytes_per_block=1000, cpu_bytes_per_s=1e6, disk_bytes_per_s=1e5)
    for h in (1, 2, 3):
        t.store(h)  # 1 overflows to disk
    assert (t.where(1), t.where(2), t.where(3)) == ("disk", "cpu", "cpu")
    t.store(4)  # 2 to disk, 1 out
    assert t.where(1) is None and t.where(2) == "disk"
    t.load(2)
    t.load(4)
    assert t.where(2) is None and t.where(4) is None
    assert t.take_load_s() == pytest.approx(1000 / 1e5 + 1000 / 1e6)
    assert t.take_load_s() == 0.0
    t.drop(3)
    assert t.where(3) is None
    t.check_invariants(gpu_hashes=set())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("sld"), st.integers(0, 12)), max_size=80))
@example([("s", 1), ("s", 3), ("s", 0), ("s", 2), ("s", 1)])  # 1 stored again from disk
def test_a_content_is_in_one_tier_or_none(ops):
    t = OffloadTiers(3, 2, 10, 1.0, 1.0)
    gpu = set()
    for op, h in ops:
        if op == "s":  # the GPU pool evicts its last copy: the content moves down
            gpu.discard(h)
            t.store(h)
        elif op == "l" and t.where(h) is not None:  # a hit below: back into a GPU block
            t.load(h)
            gpu.add(h)
        elif op == "d":  # computed again on the GPU
            t.drop(h)
            gpu.add(h)
        t.check_invariants(gpu)


def test_every_step_keeps_the_tiers_and_the_pool_consistent():
    _, engine, _ = run_plain(_cfg(2048 * 2**21), check_every_step=True)
    lower = engine.kv.pool.lower
    assert lower.stored_blocks > 0 and lower.loaded_blocks["cpu"] > 0


def test_a_cpu_tier_turns_evictions_into_hits_and_pays_for_the_loads():
    off, on = simulate(_cfg()), simulate(_cfg(8192 * 2**21))  # 8,192 blocks of 2 MiB: all of it
    hit_off = off.summary["sim"]["prefix_cache_hit_rate"]
    hit_on = on.summary["sim"]["prefix_cache_hit_rate"]
    assert hit_on > hit_off + 0.1
    assert on.summary["mean_ttft_ms"] < off.summary["mean_ttft_ms"]
    record = on.summary["sim"]["kv_offload"]
    assert record["cpu_blocks"] == 8192 and record["blocks_loaded_from_cpu"] > 0
    assert off.summary["sim"]["kv_offload"] is None
    # the loads are priced: a block over PCIe, before the step's compute
    setup = Setup.from_config(on.setup.config)
    cost, per_block = (
        setup.cost_model(),
        setup.memory.bytes_per_block / setup.hardware.pcie_bytes_per_s,
    )
    req = on.workload.request(0)
    plan = StepPlan([req], [1], [700], 0, 1, 0)
    loaded = StepPlan([req], [1], [700], 0, 1, 0, load_s=3 * per_block)
    assert cost.step_cost(loaded).total_s == cost.step_cost(plan).total_s + 3 * per_block
    assert on.steps["duration_s"].sum() < off.steps["duration_s"].sum()  # loads beat prefill
    for r in (off, on):  # nothing lost, every block back
        c = r.summary["sim"]["conservation"]
        assert c["finished"] == MULTI_TURN["num_requests"]


def test_a_disk_tier_below_catches_what_the_cpu_tier_drops():
    r = simulate(_cfg(256 * 2**21, kv_offload_disk_bytes=8192 * 2**21))
    record = r.summary["sim"]["kv_offload"]
    assert record["disk_blocks"] == 8192 and record["blocks_loaded_from_disk"] > 0


@pytest.mark.parametrize(
    ("top", "match"),
    [
        ({"engine": "sglang", "engine_args": {"kv_offload_cpu_bytes": 1e9}}, "V1 engine"),
        ({"engine_args": {"kv_offload_cpu_bytes": 1e9, "enable_prefix_caching": False}},
         "enable_prefix_caching"),
        ({"engine_args": {"kv_offload_cpu_bytes": -1}}, ">= 0"),
    ],
)  # fmt: skip
def test_impossible_offloading_is_refused(top, match):
    with pytest.raises(UserError, match=match):
        Setup.from_config(config(**top))
