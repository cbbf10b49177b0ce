"""attribute()'s bookkeeping on games whose Shapley values are known by hand.

The simulations are replaced by a synthetic outcome of the subset of changes applied (an
additive effect per change plus one pairwise interaction), so every expected figure is exact.
"""

from __future__ import annotations

import pytest

import sim.scenarios.upgrade_diff.runs as upgrade
from sim.engines.settings import Category
from sim.scenarios.upgrade_diff.attribute import attribute
from sim.scenarios.upgrade_diff.changes import Change
from sim.scenarios.upgrade_diff.outcomes import METRICS
from tests.conftest import config

CATS = [Category.DEFAULTS, Category.KERNELS, Category.SCHEDULING, Category.MEMORY]


def _changes(n: int) -> list[Change]:
    return [
        Change(f"s{i}", CATS[i % 4], i, i + 1, "before rule", "after rule", f"s{i}")
        for i in range(n)
    ]


def _game(weights, pair=(0, 1), interaction=0.0, seed_scale=None):
    """run_tasks stand-in: metric = 100 + sum of weights applied + interaction when both of
    `pair` are applied (times a per-seed factor, to give the seeds a spread)."""
    calls = []

    def fake(tasks, before, after, changes, jobs=None, progress=None, cache=None):
        out = []
        for cfg, chosen in tasks:
            calls.append((cfg.seed, frozenset(chosen)))
            x = 100.0 + sum(weights[i] for i in chosen)
            if set(pair) <= set(chosen):
                x += interaction
            if seed_scale:
                x = 100.0 + (x - 100.0) * seed_scale[cfg.seed]
            values = {m: x for m in METRICS}
            values["sim"] = {"steps": 1, "attention_kernel": "k"}
            out.append(values)
            if progress:
                progress(len(out))
        return out

    return fake, calls


def test_exact_shapley_splits_an_interaction_evenly_and_adds_up(monkeypatch):
    weights = [10.0, -4.0, 0.0, 2.0, 0.0]
    fake, calls = _game(weights, interaction=6.0)
    monkeypatch.setattr(upgrade, "run_tasks", fake)
    r = attribute(config(), None, None, _changes(5), seeds=(0,), budget=64)
    assert r.exact
    phi = r.shapley_pct["output_throughput"]
    assert phi == pytest.approx([13.0, -1.0, 0.0, 2.0, 0.0])  # +6 split between 0 and 1
    assert r.inert == [2, 4]  # no effect either way: out of the game, exactly 0
    assert sum(phi) == pytest.approx(r.change_pct["output_throughput"]) == 14.0
    # categories alone (0,4: defaults; 1: kernels; 2: scheduling; 3: memory) + interaction
    cats = r.by_category_pct
    assert cats["defaults"]["mean_ttft_ms"] == pytest.approx(10.0)
    assert cats["kernels"]["mean_ttft_ms"] == pytest.approx(-4.0)
    assert r.interaction_pct["mean_ttft_ms"] == pytest.approx(6.0)
    total = sum(c["mean_ttft_ms"] for c in cats.values()) + r.interaction_pct["mean_ttft_ms"]
    assert total == pytest.approx(r.change_pct["mean_ttft_ms"])
    assert r.added_pct["p99_tpot_ms"][:2] == pytest.approx([10.0, -4.0])
    assert r.removed_pct["p99_tpot_ms"][:2] == pytest.approx([16.0, 2.0])
    assert len(calls) == len(set(calls)) == r.simulations_run  # each subset simulated once
    # every metric moved +14%: throughput moved beyond the noise, so it leads (headline.py)
    assert (r.headline, r.headline_rule) == ("output_throughput", "throughput")
    # the minimal set reproducing 90% of +14: change 0 alone gives 10 (71%), 0+1 gives 12
    # (86%), 0+1+3 gives 14
    assert r.minimal == [0, 1, 3]


def test_sampled_shapley_is_still_efficient_and_reports_its_error(monkeypatch):
    n = 12
    weights = [float(i % 5) - 1.5 for i in range(n)]
    fake, calls = _game(weights, pair=(2, 7), interaction=8.0, seed_scale={0: 1.0, 1: 1.2})
    monkeypatch.setattr(upgrade, "run_tasks", fake)
    r = attribute(config(), None, None, _changes(n), seeds=(0, 1), budget=40)
    assert not r.exact and r.orders >= 2 and r.inert == []
    for m in METRICS:
        assert sum(r.shapley_pct[m]) == pytest.approx(r.change_pct[m])
        cats = sum(c[m] for c in r.by_category_pct.values())
        assert cats + r.interaction_pct[m] == pytest.approx(r.change_pct[m])
    ci = r.ci_pct["output_throughput"]
    assert all(c > 0 for c in ci)  # two seeds that disagree: every effect has an interval
    assert len(calls) == len(set(calls)) == r.simulations_run
    assert r.simulations_run <= 2 * (2 + 2 * n + 4 + 40 + 2 * n)


def test_identical_versions_give_zero_everywhere(monkeypatch):
    fake, _ = _game([])
    monkeypatch.setattr(upgrade, "run_tasks", fake)
    r = attribute(config(), None, None, [], seeds=(0, 1), budget=16)
    assert r.change_pct == {m: 0.0 for m in METRICS}
    assert r.interaction_pct == {m: 0.0 for m in METRICS}
    assert all(v == 0.0 for c in r.by_category_pct.values() for v in c.values())
    assert r.minimal == [] and r.simulations_run == 2  # the one run per seed
