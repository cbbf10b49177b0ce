"""What fast-forwarded runs ask of the cost model gives the bits of pricing each step alone
(sim/cost/run_pricing.py, AttentionCost.decode_rows, Surface.fixing), and a decode stretch's
pool calls are those of its steps one by one (block_calls)."""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config import SimConfig
from sim.cost.context_table import DENSE_TOKENS
from sim.cost.surface import Surface
from sim.run.driver import YOUNG_GC_THRESHOLD, rarer_young_collections
from sim.run.run_rows import block_calls
from sim.run.setup import Setup

MODELS = (
    {"model": "llama-2-7b-hf"},  # full attention
    # no CUDA graphs: a decode-only step pays its kernel launches (launch_s > 0)
    {"model": "llama-2-7b-hf", "engine_args": {"cudagraph_mode": "NONE"}},
    {"model": "gemma-3-27b-it", "parallel": {"tp": 2}},  # sliding windows beside full layers
    {"model": "qwen3-next-80b-a3b", "hardware": "h200", "parallel": {"tp": 4}},  # linear
    {"model": "deepseek-v3", "hardware": "h200", "parallel": {"tp": 8}},  # MLA
)


@pytest.fixture(scope="module")
def models():
    return [
        Setup.from_config(
            SimConfig.from_mapping(
                m | {"engine_args": {"max_model_len": 4096} | m.get("engine_args", {})}
            )
        ).cost_model()
        for m in MODELS
    ]


def _bits(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).view(np.int64)


contexts_st = st.lists(st.integers(0, 9000), min_size=1, max_size=40)


@settings(max_examples=40, deadline=None)
@given(contexts=contexts_st, steps=st.integers(1, 30), mixed=st.booleans())
def test_decode_rows_are_decode_one_step_by_step(models, contexts, steps, mixed):
    for cost in models:
        rows = cost.attention.decode_rows(contexts, steps, mixed)
        alone = [cost.attention.decode_one([c + k for c in contexts], mixed) for k in range(steps)]
        matrix = np.array(contexts)[None, :] + np.arange(steps)[:, None]
        assert np.array_equal(_bits(rows), _bits(alone)), cost.model.name
        assert np.array_equal(_bits(rows), _bits(cost.attention.decode(matrix, mixed)))


def test_decode_rows_beyond_the_dense_pages_leave_it_to_numpy(models):
    cost = models[0]  # (MLA's table is per sequence alone, the others' dense up to 64K)
    assert cost.attention.decode_rows([DENSE_TOKENS - 3, 10], 5, False) is None
    assert cost.attention.decode_rows([DENSE_TOKENS - 5, 10], 5, False) is not None
    # decode_one still prices such contexts (from the sparse pages), with decode()'s bits
    big = [DENSE_TOKENS + 100, 10, 3 * DENSE_TOKENS]
    assert _bits(cost.attention.decode_one(big, False)) == _bits(
        cost.attention.decode(np.array([big]), False)[0]
    )


@settings(max_examples=30, deadline=None)
@given(contexts=contexts_st, steps=st.integers(1, 20))
def test_a_stretchs_rows_are_its_steps_priced_alone(models, contexts, steps):
    for cost in models:
        gpus, cpu, totals = cost.decode_rows(contexts, steps)
        floor = cost.decode_floor_s(contexts)
        for k in range(steps):  # each step priced alone, as Engine.step prices it
            step = cost.cost([], [], [c + k for c in contexts])
            assert (_bits(gpus[k]), _bits(cpu), _bits(totals[k])) == (
                _bits(step.gpu_s),
                _bits(step.cpu_s),
                _bits(step.total_s),
            )
            assert floor <= step.total_s  # (the horizon's estimate of a stretch's steps)
        run = cost.decode_run(np.array(contexts)[None, :] + np.arange(steps)[:, None])
        assert np.array_equal(_bits(run[2]), _bits(totals))


def test_a_lone_chunks_prefill_is_the_same_whatever_was_asked_before():
    """prefill() of one chunk is remembered by the chunk (new tokens and cached ones): two
    cost models asked the same chunks in opposite orders give the same bits for each."""
    chunks = [(q, c) for q in (1, 37, 512) for c in (0, 5, 2048, 3000)]
    answers = []
    for order in (chunks, chunks[::-1]):
        cfg = SimConfig.from_mapping(MODELS[2] | {"engine_args": {"max_model_len": 4096}})
        attention = Setup.from_config(cfg).cost_model().attention
        answers.append({(q, c): attention.prefill([q], [c]) for q, c in order})
    assert {k: int(_bits(v)) for k, v in answers[0].items()} == {
        k: int(_bits(v)) for k, v in answers[1].items()
    }
    assert len({answers[0][(512, c)] for c in (0, 5, 2048, 3000)}) == 4


def test_the_decode_floor_is_each_batch_sizes_own(models):
    """decode_floor_s, kept per batch size, is each batch's own: its step's total without
    the decode attention, whichever batch sizes were asked before."""
    for cost in models:
        for size in (96, 1, 24, 1, 96):
            contexts = [50] * size
            step = cost.cost([], [], contexts)
            gpu = step.gpu_s - step.attention_decode_s
            floor = max(gpu, step.cpu_hidden_s) + step.cpu_serial_s + step.swap_s
            assert cost.decode_floor_s(contexts) == pytest.approx(floor, rel=1e-12)
            assert cost.decode_floor_s(contexts) <= step.total_s


@settings(max_examples=40, deadline=None)
@given(
    chunks=st.lists(st.tuples(st.integers(2, 600), st.integers(0, 5000)), max_size=3),
    decodes=st.lists(st.integers(0, 6000), max_size=30),
    extra=st.integers(0, 5),
)
def test_a_chunked_steps_times_are_its_step_cost(models, chunks, decodes, extra):
    if not chunks and not decodes:
        return
    pre_q, pre_c = [q for q, _ in chunks], [c for _, c in chunks]
    batch = len(chunks) + len(decodes) + extra
    for cost in models:
        step = cost.cost(pre_q, pre_c, decodes, cpu_batch=batch)
        for _ in range(2):  # priced, then from step_times' memo of the batch's shape
            times = cost.step_times(pre_q, pre_c, decodes, batch)
            assert _bits(times).tolist() == _bits([step.gpu_s, step.cpu_s, step.total_s]).tolist()


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    shape=st.lists(st.integers(1, 5), min_size=2, max_size=5),
    fixed=st.integers(1, 3),
    spread=st.floats(0.5, 30),
)
def test_a_surface_with_fixed_tail_features_has_the_bits_of_the_whole(seed, shape, fixed, spread):
    """Surface.fixing folds the last features on the grid once (prefill_chunk_s fixes a
    shape's head features): at() of the rest gives at()'s bits of the whole row, whether a
    value lies between knots, on one, or beyond the data's bounds (clamped), and whether a
    feature has one knot or several."""
    rng = np.random.default_rng(seed)
    knots = tuple(np.sort(rng.uniform(-5, 15, n)) if n > 1 else np.zeros(1) for n in shape)
    bounds = tuple((float(k[0]) + 0.1, float(k[-1]) - 0.1) for k in knots)
    coef = rng.normal(size=tuple(shape))
    surface = Surface(tuple(f"f{d}" for d in range(len(shape))), knots, coef, bounds)
    fixed = min(fixed, len(shape) - 1)
    for _ in range(20):
        row = rng.uniform(-spread, spread, len(shape)) + 5
        if rng.random() < 0.2:  # on a knot
            d = int(rng.integers(len(shape)))
            row[d] = knots[d][int(rng.integers(len(knots[d])))]
        lead, tail = row[:-fixed].tolist(), row[-fixed:].tolist()
        folded = surface.fixing(tail)
        assert _bits(folded.at(lead)) == _bits(surface.at(row.tolist()))
        assert _bits(folded.at(lead)) == _bits(folded(np.array([lead]))[0])  # (at's unrolled 3D)


def test_the_prefill_surfaces_fixed_heads_price_as_before(models):
    """prefill_chunk_s folds each shape's head features once: the calibrated prefill surfaces
    give at()'s bits of all five features (tests/test_cost_tables.py holds prefill_chunk_s to
    the vector prefill_s)."""
    from sim.cost.roofline import log2_scalar

    rng = np.random.default_rng(1)
    checked = 0
    for cost in models:
        for name, surface in cost.pricer.surfaces.items():
            if not name.startswith("attention_prefill") or len(surface.features) != 5:
                continue
            for shape in cost.shapes.values():
                head = [log2_scalar(shape.head_dim), log2_scalar(shape.heads / shape.kv_heads)]
                fixed = surface.fixing(head)
                for row in rng.uniform(-2, 18, size=(30, 3)).tolist():
                    assert _bits(fixed.at(row)) == _bits(surface.at([*row, *head]))
                    checked += 1
    assert checked > 100


def _calls_one_by_one(computed, held, block_size, steps, caching):
    """The oracle: each step of the stretch in turn, each request's token computed, a new
    block where its tokens need one more, a cached hash where its token fills one."""
    codes, new = [], [0] * (steps + 1)
    held = list(held)
    batch = len(computed)
    for k in range(1, steps + 1):
        for i, c in enumerate(computed):
            tokens = c + k
            need = math.ceil(tokens / block_size)
            touched = False
            if need > held[i]:
                new[k] += need - held[i]
                held[i] = need
                touched = True
            if caching and tokens % block_size == 0:
                touched = True
            if touched:
                codes.append(k * batch + i)
    return codes, new


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    block_size=st.sampled_from([1, 4, 16]),
    steps=st.integers(1, 40),
    caching=st.booleans(),
)
def test_a_stretchs_pool_calls_are_those_of_its_steps(data, block_size, steps, caching):
    computed = data.draw(st.lists(st.integers(1, 200), min_size=1, max_size=12))
    # a request holds the blocks of its tokens, or (windows, admission) one more
    held = [math.ceil(c / block_size) + data.draw(st.integers(0, 1)) for c in computed]
    got = block_calls(computed, held, block_size, steps, caching)
    assert got == _calls_one_by_one(computed, held, block_size, steps, caching)


def test_young_collections_are_rarer_while_a_run_simulates():
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with rarer_young_collections():
            assert gc.get_threshold() == (YOUNG_GC_THRESHOLD, 10, 10)
        assert gc.get_threshold() == (700, 10, 10)
        gc.set_threshold(0, 10, 10)  # collection turned off: left off
        with rarer_young_collections():
            assert gc.get_threshold() == (0, 10, 10)
        gc.set_threshold(700, 10, 10)
        with pytest.raises(RuntimeError), rarer_young_collections():
            raise RuntimeError  # restored on the way out too
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*before)
