"""Attribution math on value functions whose answers are known by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.scenarios.upgrade_diff.attribution import (
    EXACT_LIMIT,
    Memo,
    minimal_set,
    one_at_a_time,
    shapley,
    subsets_needed,
)


def additive(weights):
    return Memo(lambda s: sum(weights[i] for i in s))


def test_additive_changes_get_their_own_effects():
    weights = [5.0, -2.0, 0.0, 1.5]
    value = additive(weights)
    added, removed = one_at_a_time(4, value)
    assert added == removed == weights
    phi = shapley(4, value, np.random.default_rng(0))
    assert phi.exact and phi.values == pytest.approx(weights)


def test_a_pure_interaction_is_split_evenly():
    # only both changes together do anything (e.g. a bigger budget that needs more memory)
    value = Memo(lambda s: 10.0 if {0, 1} <= s else 0.0)
    added, removed = one_at_a_time(3, value)
    assert added == [0.0, 0.0, 0.0] and removed == [10.0, 10.0, 0.0]
    phi = shapley(3, value, np.random.default_rng(0))
    assert phi.values == pytest.approx((5.0, 5.0, 0.0))


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 6),
    seed=st.integers(0, 1000),
)
def test_shapley_values_add_up_to_the_total_change(n, seed):
    rng = np.random.default_rng(seed)
    table = {frozenset(s): float(rng.normal()) for s in subsets_needed(n)}
    value = Memo(lambda s: table[s])
    phi = shapley(n, value, rng)
    assert math.fsum(phi.values) == pytest.approx(table[frozenset(range(n))] - table[frozenset()])


def test_identical_versions_attribute_nothing():
    value = Memo(lambda s: 7.0)
    assert shapley(5, value, np.random.default_rng(0)).values == (0.0,) * 5
    assert one_at_a_time(5, value) == ([0.0] * 5, [0.0] * 5)
    assert minimal_set(5, value) == []


def test_sampled_shapley_agrees_with_the_additive_truth_within_its_error():
    n = EXACT_LIMIT + 2
    rng = np.random.default_rng(1)
    weights = rng.normal(size=n)
    pair = (0, 1)  # plus one interaction worth 3, shared by changes 0 and 1

    def f(s):
        return sum(weights[i] for i in s) + (3.0 if set(pair) <= s else 0.0)

    value = Memo(f)
    phi = shapley(n, value, rng, orders=200)
    truth = weights.copy()
    truth[list(pair)] += 1.5
    assert not phi.exact and phi.orders == 200
    assert math.fsum(phi.values) == pytest.approx(f(set(range(n))) - f(set()))  # every order
    assert np.all(np.abs(np.array(phi.values) - truth) <= 4 * np.array(phi.std_errors) + 1e-9)


def test_minimal_set_finds_the_changes_that_matter():
    weights = [0.0, 8.0, 0.1, 0.0, 1.0, 0.0, 0.05, 0.0]
    value = additive(weights)
    found = minimal_set(8, value, share=0.9)
    assert found == [1, 4]  # 9.0 of 9.15; without change 4 only 87%
    assert value.calls < 2**8  # far fewer simulations than every subset


def test_memo_calls_each_subset_once():
    calls = []
    value = Memo(lambda s: calls.append(s) or len(s))
    one_at_a_time(3, value)
    shapley(3, value, np.random.default_rng(0))
    assert len(calls) == len(set(calls)) == 8
