"""The cost model's fast paths price exactly what its vector paths price."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config import SimConfig
from sim.cost.context_table import DENSE_TOKENS, PAGE_TOKENS, ContextTable
from sim.run.setup import Setup


@pytest.fixture(scope="module")
def models():
    out = []
    for model, tp in (("llama-2-7b-hf", 1), ("gemma-3-27b-it", 2), ("qwen3-32b", 2)):
        cfg = SimConfig.from_mapping(
            {"model": model, "parallel": {"tp": tp}, "engine_args": {"max_model_len": 4096}}
        )
        out.append(Setup.from_config(cfg).cost_model())
    return out


@settings(max_examples=60, deadline=None)
@given(
    q=st.integers(1, 20_000),
    c=st.one_of(st.just(0), st.integers(1, 200_000)),
    n=st.integers(1, 8),
)
def test_one_chunk_in_plain_python_equals_the_vector_price(models, q, c, n):
    for cost in models:  # sliding-window layers (gemma) included
        for shape in cost.shapes.values():
            vector = cost.pricer.prefill_s(np.array([q]), np.array([c]), n, shape)[0]
            scalar = cost.pricer.prefill_chunk_s(q, c, n, shape)
            assert scalar == pytest.approx(vector, rel=1e-12)


def test_surface_at_has_the_bits_of_the_surface(models):
    rng = np.random.default_rng(0)
    for cost in models:
        for surface in cost.pricer.surfaces.values():
            x = rng.uniform(-2, 18, size=(50, len(surface.features)))
            assert np.array_equal(_bits([surface.at(row) for row in x]), _bits(surface(x)))
            # the interpolation through the fitting's design matrix: the same values
            index, weight = surface._index_weights(x)
            expected = np.einsum("nc,nc->n", surface.coef.ravel()[index], weight)
            assert surface(x) == pytest.approx(expected, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    constant=st.lists(st.booleans(), min_size=4, max_size=4),
    seed=st.integers(0, 2**31),
    rows=st.integers(1, 5),
)
def test_a_rows_value_does_not_depend_on_the_rows_beside_it(models, constant, seed, rows):
    """Each row of a surface's call gets the bits it gets alone, whether its columns are
    constant down the call (folded once) or vary (folded per row)."""
    rng = np.random.default_rng(seed)
    for cost in models:
        for surface in cost.pricer.surfaces.values():
            width = len(surface.features)
            x = rng.uniform(-2, 18, size=(rows, width))
            for d in range(width):
                if constant[d % 4]:
                    x[:, d] = x[0, d]
            together = surface(x)
            alone = [surface(x[r : r + 1])[0] for r in range(rows)]
            assert np.array_equal(_bits(together), _bits(alone))


def test_context_table_is_the_function_it_tabulates():
    calls = []

    def per_sequence(c):
        calls.append(len(c))
        return np.sqrt(c + 1.0) * 1e-6

    table = ContextTable(per_sequence)
    contexts = np.array([[0, 5, PAGE_TOKENS + 3], [DENSE_TOKENS + 7, 3 * DENSE_TOKENS, 17]])
    assert np.array_equal(table(contexts), np.sqrt(contexts + 1.0) * 1e-6)
    assert all(n % PAGE_TOKENS == 0 for n in calls)  # every value computed in whole pages
    assert calls[0] == 2 * PAGE_TOKENS  # the dense part's two pages in one call
    before = len(calls)
    table(contexts)
    assert len(calls) == before  # and only once
    assert table(np.zeros((0, 3), dtype=np.int64)).shape == (0, 3)


def _bits(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).view(np.int64)


def test_pages_priced_together_have_the_bits_of_pages_alone(models):
    """ContextTable prices as many pages as it grows by in one call: each context's value must
    be what a call of its page alone gives (sliding windows included: gemma-3's keys stop
    growing at its window, where a page's keys column becomes constant)."""
    for cost in models:
        for index in range(len(cost.attention.layers)):
            for num_seqs, mixed in ((1, False), (37, False), (200, True)):
                table = cost.attention._table(index, num_seqs, mixed)
                for start, count in ((0, 3), (1, 6), (4, 2)):
                    together = table._page(start, count)
                    alone = np.concatenate([table._page(p) for p in range(start, start + count)])
                    assert np.array_equal(_bits(together), _bits(alone))


@pytest.fixture(scope="module")
def token_models():
    out = []
    for mapping in (
        {"model": "llama-3.1-8b"},
        {"model": "llama-3.1-70b", "parallel": {"tp": 4}},
        {"model": "qwen3-30b-a3b", "parallel": {"tp": 2, "ep": 2}},
        {"model": "qwen3-30b-a3b", "parallel": {"tp": 2, "dp": 2, "ep": 4}},
        {"model": "gpt-oss-20b"},
    ):
        out.append(Setup.from_config(SimConfig.from_mapping(mapping)).cost_model())
    return out


def test_token_counts_priced_a_page_at_a_time_have_the_bits_of_one_count(token_models):
    """The GEMM, MoE, elementwise and all-reduce costs of a step are memoised a page of token
    counts at a time (CostModel._price_token_page): each count's costs must be those of
    pricing that count alone, bit for bit (dense, TP, MoE with expert parallelism over TP and
    over data-parallel ranks, windowed layers)."""
    counts = np.array([1, 2, 7, 255, 256, 257, 1000, 4095, 8192, 20_000, 131_072])
    for cost in token_models:
        together = cost._per_token_count(counts)
        for i, t in enumerate(counts.tolist()):
            alone = cost._per_token_count(np.array([t]))
            for column, single in zip(together, alone, strict=True):
                assert _bits(column[i]) == _bits(single[0]), (cost.model.name, t)


def test_token_cost_memo_fills_whole_pages():
    """A count's page is priced whole, after the pages below it (a page's floor is the most of
    every count below it); a page from 0 leaves out 0, not asked."""
    cost = Setup.from_config(SimConfig.from_mapping({"model": "llama-3.1-8b"})).cost_model()
    cost._memo.clear()
    cost._page_floors.clear()
    cost._token_costs(300, 4)
    assert set(cost._memo) == set(range(1, 512))
    cost._token_costs(900, 4)
    assert set(cost._memo) == set(range(1, 1024))


@pytest.mark.parametrize("engine", ["vllm@0.6.3", "vllm@0.33.0", "sglang@0.5.23", "trtllm"])
def test_a_step_of_more_tokens_is_never_cheaper(engine):
    """The token-count costs are held at their most over the counts below (the fitted GEMM
    surfaces alone price a 28,672 x 4,096 GEMM faster at m = 16 than at 1): each component is
    non-decreasing in the token count, whichever count was asked first, and never under the
    raw price."""
    mapping = {"model": "llama-3.1-8b", "engine": engine}
    first = Setup.from_config(SimConfig.from_mapping(mapping)).cost_model()
    first._memo.clear()
    first._page_floors.clear()
    counts = list(range(1, 3000, 3))
    for t in reversed(counts):  # highest first: the pages below are priced on the way
        first._token_costs(t, 1)
    held = np.array([first._memo[t] for t in counts])
    assert np.all(np.diff(held, axis=0) >= 0)
    raw = np.stack(first._per_token_count(np.array(counts)), 1)
    assert np.all(held >= raw) and np.any(held > raw)
    fresh = Setup.from_config(SimConfig.from_mapping(mapping)).cost_model()
    fresh._memo.clear()
    fresh._page_floors.clear()
    assert [fresh._token_costs(t, 1) for t in counts][5] == first._token_costs(counts[5], 1)
