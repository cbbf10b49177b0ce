"""workload.cache_warm: a benchmark run against a server that already served the same prompts
(an earlier run of the suite): the prompts' KV is in the prefix cache at the start, in LRU
order, as far as the pool holds it."""

from __future__ import annotations

import numpy as np
import pytest

from sim.cli import check_overrides
from sim.kv.manager import KVCacheManager
from sim.run.simulate import simulate
from sim.workload.generate import generate
from sim.workload.request import Request
from tests.conftest import config, run_plain


def prompt(rid: int, ids: list[int], prompt_len: int) -> Request:
    return Request(rid, 0.0, prompt_len, 4, ids, 4)


def test_warming_caches_each_full_prompt_block_most_recent_last():
    """Block size 4, a pool of 6 usable blocks: three prompts of 10 tokens (2 full blocks each,
    the partial third is not cached) fill it exactly; a fourth evicts the first prompt's two
    blocks, the head of the free queue."""
    kv = KVCacheManager(7, 4, True)
    reqs = [prompt(i, [10 * i + k for k in range(4)], 10) for i in range(4)]
    for r in reqs[:3]:
        kv.warm(r)
        kv.check_invariants()
    assert kv.num_used_blocks == 0 and len(kv.pool.cached) == 6
    ids = list(kv.pool.free_queue)
    assert ids == [1, 2, 3, 4, 5, 6]  # in the order warmed
    kv.warm(reqs[3])
    kv.check_invariants()
    cached = set(kv.pool.cached)
    first, fourth = reqs[0].full_block_hashes(2, 4), reqs[3].full_block_hashes(2, 4)
    assert not cached & set(first) and set(fourth) <= cached
    fresh = prompt(9, reqs[1].content_ids, 10)  # the second prompt again: a full hit
    hits, tokens = kv.get_computed_blocks(fresh)
    assert len(hits) == 2 and tokens == 8


def test_warming_again_moves_a_prompt_to_the_tail():
    kv = KVCacheManager(7, 4, True)
    a, b = prompt(0, [1, 2, 3], 8), prompt(1, [4, 5, 6], 8)
    kv.warm(a)
    kv.warm(b)
    kv.warm(prompt(2, [1, 2, 3], 8))  # a again: most recently used now
    order = list(kv.pool.free_queue.values())  # their hashes
    assert order[-2:] == a.full_block_hashes(2, 4)
    kv.check_invariants()


def test_no_caching_no_warming():
    kv = KVCacheManager(7, 4, False)
    kv.warm(prompt(0, [1, 2, 3], 8))
    assert not kv.pool.cached


def _closed(**more):
    w = {"kind": "closed_loop", "concurrency": 8, "num_requests": 40, "input_len": 512,
         "output_len": 16, "rate": None, **more}  # fmt: skip
    return config(workload=w)


def test_a_warm_server_hits_every_full_prompt_block():
    """512-token prompts in 16-token blocks: the lookup leaves the last token to compute, so 31
    of 32 blocks hit (496 tokens); TTFT falls, the prompts are not computed again."""
    cold = simulate(_closed()).summary
    warm = simulate(_closed(cache_warm=True)).summary
    assert cold["sim"]["prefix_cache_hit_rate"] == 0.0
    assert warm["sim"]["prefix_cache_hit_rate"] == pytest.approx(496 / 512)
    assert warm["mean_ttft_ms"] < 0.5 * cold["mean_ttft_ms"]
    assert warm["completed"] == cold["completed"] == 40


def test_the_flag_changes_nothing_else_of_the_workload():
    a = generate(_closed().workload, np.random.default_rng(0))
    b = generate(_closed(cache_warm=True).workload, np.random.default_rng(0))
    for col in ("arrival_s", "prompt_len", "output_len", "content_offsets"):
        assert np.array_equal(getattr(a, col), getattr(b, col))
    assert b.cache_warm and not a.cache_warm
    assert (b.first_private == b.prompt_len // b.content_block_tokens).all()


def test_more_prompts_than_the_pool_holds_find_nothing():
    """LRU over a cyclic pattern larger than the pool: by the time a prompt comes round again
    it has been evicted (as on a real server, an earlier run of a bigger workload leaves only
    its latest prompts, which this run reaches last)."""
    w = _closed(cache_warm=True, num_requests=200, input_len=2048).workload
    cfg = config(
        workload={f: getattr(w, f) for f in ("kind", "concurrency", "num_requests", "input_len",
                                             "output_len", "rate", "cache_warm")},
        engine_args={"num_gpu_blocks_override": 2000, "max_model_len": 4096},
    )  # fmt: skip
    outcome, _, _ = run_plain(cfg, check_every_step=True)
    assert sum(r.num_cached_tokens for r in outcome.requests) == 0


def test_a_warm_disaggregated_deployment():
    cfg = config(
        workload={"kind": "poisson", "rate": 5.0, "num_requests": 20, "input_len": 512,
                  "output_len": 8, "cache_warm": True},
        disagg={"enabled": True},
    )  # fmt: skip
    s = simulate(cfg).summary
    assert s["completed"] == 20 and s["sim"]["prefix_cache_hit_rate"] > 0.9


def test_both_benchmark_knobs_are_command_line_keys():
    """workload.stagger (clients spread) was a config field the command line refused."""
    (cfg,) = check_overrides(["workload=closed_loop", "workload.stagger=true",
                              "workload.cache_warm=true"])  # fmt: skip
    assert cfg.workload.stagger and cfg.workload.cache_warm
