"""Arrival processes, length distributions and content identity (prefix sharing)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.config import WorkloadConfig
from sim.errors import UserError
from sim.workload.generate import CONTENT_BLOCK_TOKENS, generate


def gen(**kw):
    return generate(WorkloadConfig(**kw), np.random.default_rng(7))


def test_poisson_gaps_are_exponential():
    w = gen(kind="poisson", rate=4.0, num_requests=20_000)
    gaps = np.diff(w.arrival_s)
    assert w.arrival_s[0] == 0.0
    assert gaps.mean() == pytest.approx(0.25, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.03)


@pytest.mark.parametrize("burstiness", [0.25, 4.0])
def test_gamma_burstiness_sets_the_spread(burstiness):
    w = gen(kind="gamma", rate=2.0, burstiness=burstiness, num_requests=20_000)
    gaps = np.diff(w.arrival_s)
    assert gaps.mean() == pytest.approx(0.5, rel=0.04)
    # Gamma(shape k): squared coefficient of variation = 1 / k
    assert (gaps.std() / gaps.mean()) ** 2 == pytest.approx(1 / burstiness, rel=0.08)


def test_constant_burst_and_closed_loop():
    assert np.allclose(np.diff(gen(kind="constant", rate=5.0, num_requests=10).arrival_s), 0.2)
    assert not gen(kind="burst", num_requests=10).arrival_s.any()
    w = gen(kind="closed_loop", concurrency=3, num_requests=10)
    assert w.concurrency == 3 and not w.arrival_s.any()
    with pytest.raises(UserError, match="concurrency"):
        gen(kind="closed_loop", num_requests=10)


def test_length_distributions():
    fixed = gen(num_requests=100, input_len=300, output_len=20)
    assert set(fixed.prompt_len) == {300} and set(fixed.output_len) == {20}
    uni = gen(num_requests=5000, length_dist="uniform", input_len=100, range_ratio=0.5)
    assert uni.prompt_len.min() >= 50 and uni.prompt_len.max() <= 150
    logn = gen(num_requests=50_000, length_dist="lognormal", input_len=1000, input_sigma=0.8)
    assert logn.prompt_len.mean() == pytest.approx(1000, rel=0.03)
    assert logn.prompt_len.min() >= 1 and logn.prompt_len.max() <= 16_000


def test_unshared_requests_have_disjoint_content():
    w = gen(num_requests=50, input_len=100, output_len=10)
    ids = [tuple(w.request(i).content_ids) for i in range(50)]
    flat = [x for seq in ids for x in seq]
    assert len(flat) == len(set(flat))
    assert all(len(seq) == -(-110 // CONTENT_BLOCK_TOKENS) for seq in ids)


def test_shared_system_prompts():
    w = gen(
        num_requests=200,
        input_len=100,
        output_len=10,
        shared_prefix_tokens=64,
        num_shared_prefixes=3,
    )
    heads = {tuple(w.request(i).content_ids[:4]) for i in range(200)}
    assert len(heads) == 3  # 64 tokens = 4 blocks, one of 3 prompts
    assert set(w.prompt_len) == {164}


def test_multi_turn_sessions_extend_the_previous_turn():
    w = gen(num_requests=8, input_len=40, output_len=20, turns_per_session=4, concurrent_sessions=2)
    # 2 sessions: requests 0,2,4,6 and 1,3,5,7
    for first, second in ((0, 2), (2, 4), (1, 3)):
        a, b = w.request(first), w.request(second)
        prev_tokens = a.prompt_len + a.max_output_len
        assert b.prompt_len == prev_tokens + 40
        shared = prev_tokens // CONTENT_BLOCK_TOKENS
        assert b.content_ids[:shared] == a.content_ids[:shared]
        assert b.content_ids[shared] != a.content_ids[min(shared, len(a.content_ids) - 1)]


def test_errors_name_the_key():
    with pytest.raises(UserError, match=r"workload\.path"):
        gen(kind="trace")
    with pytest.raises(UserError, match="gamma"):
        gen(kind="poisson", rate=1.0, burstiness=0.5)
