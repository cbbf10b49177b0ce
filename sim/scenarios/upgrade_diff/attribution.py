"""Attributing a change to its parts: one at a time, delta debugging and Shapley values.

upgrade_diff's question is how much of a metric's change each changed setting causes. Given n
changes and `value(subset)`, the metric with those changes applied to the baseline (value of
the empty set: the baseline; of all n: the new version), this module computes

  one at a time   value({i}) - value({})          (the baseline plus one change)
                  value(all) - value(all - {i})   (the new version minus one change)
  Shapley values  each change's average marginal effect over every order of applying the
                  changes; they add up to value(all) - value({}) exactly (efficiency). Exact
                  over all 2^n subsets up to EXACT_LIMIT changes (or as the caller says),
                  else estimated from random orders, with each value's standard error
  delta debugging the smallest set of changes found that reproduces a given share of the
                  total change (Zeller's ddmin over the changes, greedy, each step removing
                  what is not needed)

`value` is called at most once per distinct subset (results are memoised), so callers can run
the simulations behind it in any order, or in parallel beforehand (`subsets_needed`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import combinations

import numpy as np

EXACT_LIMIT = 10  # changes up to which Shapley values are computed over every subset
Subset = frozenset[int]


class Memo:
    """value(subset) computed once per subset."""

    def __init__(self, value: Callable[[Subset], float]):
        self.value = value
        self.known: dict[Subset, float] = {}

    def __call__(self, subset: Iterable[int]) -> float:
        key = frozenset(subset)
        if key not in self.known:
            self.known[key] = float(self.value(key))
        return self.known[key]

    @property
    def calls(self) -> int:
        return len(self.known)


@dataclass(frozen=True, slots=True)
class Shapley:
    values: tuple[float, ...]  # one per change; they sum to the total change
    std_errors: tuple[float, ...]  # 0 when exact
    exact: bool
    orders: int  # random orders sampled (0 when exact)


def one_at_a_time(n: int, value: Memo) -> tuple[list[float], list[float]]:
    """(baseline plus change i, minus the baseline), (all, minus all without change i)."""
    everything = range(n)
    base, full = value(()), value(everything)
    added = [value((i,)) - base for i in everything]
    removed = [full - value(set(everything) - {i}) for i in everything]
    return added, removed


def random_orders(n: int, orders: int, rng: np.random.Generator) -> list[list[int]]:
    """`orders` random orders of n changes (at least 2), in antithetic pairs: each order
    followed by its reverse."""
    out = []
    for _ in range(max(1, orders // 2)):
        order = rng.permutation(n).tolist()
        out += [order, order[::-1]]
    return out


def shapley(
    n: int,
    value: Memo,
    rng: np.random.Generator,
    orders: int = 64,
    exact: bool | None = None,
) -> Shapley:
    """Shapley values of the n changes: over every subset when `exact` (default: up to
    EXACT_LIMIT changes), else from `orders` random orders (antithetic pairs: each order and
    its reverse), with standard errors. Either way they add up to value(all) - value({})."""
    if n == 0:
        return Shapley((), (), True, 0)
    if n <= EXACT_LIMIT if exact is None else exact:
        phi = [0.0] * n
        weight = [
            math.factorial(k) * math.factorial(n - k - 1) / math.factorial(n) for k in range(n)
        ]
        for i in range(n):
            others = [j for j in range(n) if j != i]
            for k in range(n):
                for subset in combinations(others, k):
                    phi[i] += weight[k] * (value((*subset, i)) - value(subset))
        return Shapley(tuple(phi), (0.0,) * n, True, 0)
    samples = []
    for sequence in random_orders(n, orders, rng):
        marginal = [0.0] * n
        applied: list[int] = []
        before = value(applied)
        for i in sequence:
            applied.append(i)
            after = value(applied)
            marginal[i] = after - before
            before = after
        samples.append(marginal)
    pairs = np.asarray(samples).reshape(-1, 2, n).mean(axis=1)  # antithetic pairs averaged
    mean = pairs.mean(axis=0)
    se = pairs.std(axis=0, ddof=1) / math.sqrt(len(pairs)) if len(pairs) > 1 else np.zeros(n)
    return Shapley(tuple(mean.tolist()), tuple(se.tolist()), False, len(samples))


def minimal_set(n: int, value: Memo, share: float = 0.9) -> list[int]:
    """A small set of changes that reproduces at least `share` of the total change: start
    from all of them and drop, in halves then one by one (ddmin), any part whose removal
    keeps the share; what is left cannot lose any single change."""
    base, full = value(()), value(range(n))
    total = full - base

    def enough(subset: list[int]) -> bool:
        if total == 0:
            return not subset
        return (value(subset) - base) / total >= share

    keep = list(range(n))
    if total == 0:
        return []
    chunks = 2
    while len(keep) >= 2:
        size = math.ceil(len(keep) / chunks)
        parts = [keep[k : k + size] for k in range(0, len(keep), size)]
        for part in parts:
            rest = [i for i in keep if i not in part]
            if enough(rest):
                keep = rest
                chunks = max(chunks - 1, 2)
                break
        else:
            if chunks >= len(keep):
                break
            chunks = min(len(keep), chunks * 2)
    return keep


def subsets_needed(n: int, limit: int = EXACT_LIMIT) -> list[Subset]:
    """Every subset exact Shapley values and one-at-a-time effects read (n <= limit), for
    a caller that simulates them all at once, in parallel, before attributing."""
    if n > limit:
        raise ValueError(f"{n} changes: exact Shapley values stop at {limit}")
    return [frozenset(s) for k in range(n + 1) for s in combinations(range(n), k)]
