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


def test_surface_at_equals_the_surface(models):
    rng = np.random.default_rng(0)
    for cost in models:
        for surface in cost.pricer.surfaces.values():
            x = rng.uniform(-2, 18, size=(50, len(surface.features)))
            assert [surface.at(row) for row in x] == pytest.approx(surface(x), rel=1e-12)


def test_context_table_is_the_function_it_tabulates():
    calls = []

    def per_sequence(c):
        calls.append(len(c))
        return np.sqrt(c + 1.0) * 1e-6

    table = ContextTable(per_sequence)
    contexts = np.array([[0, 5, PAGE_TOKENS + 3], [DENSE_TOKENS + 7, 3 * DENSE_TOKENS, 17]])
    assert np.array_equal(table(contexts), np.sqrt(contexts + 1.0) * 1e-6)
    assert set(calls) == {PAGE_TOKENS}  # every value computed in a page of fixed size
    before = len(calls)
    table(contexts)
    assert len(calls) == before  # and only once
    assert table(np.zeros((0, 3), dtype=np.int64)).shape == (0, 3)
