"""The configuration difference between two versions, and its mixtures (upgrade_diff's core)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.engines.settings import SETTING_NAMES, Category
from sim.run.setup import Setup
from sim.run.simulate import simulate
from sim.scenarios.upgrade_diff.attribute import attribute
from sim.scenarios.upgrade_diff.attribution import Memo, one_at_a_time, shapley
from sim.scenarios.upgrade_diff.changes import KERNELS, diff, mixture_setup, resolved
from sim.scenarios.upgrade_diff.outcomes import run_mixtures
from tests.conftest import config

PAIRS = [
    ("vllm@0.6.3", "vllm@0.10.2"),  # V0 -> V1: scheduler, budgets, graphs, kernels
    ("sglang@0.4.6", "sglang@0.5.23"),  # the retraction rule among the changes
]


def _small(engine: str):
    return config(
        {"num_requests": 60, "rate": 12.0, "input_len": 400, "output_len": 48},
        engine=engine,
        cost_profile="auto",
    )


@pytest.mark.parametrize(("before", "after"), PAIRS)
def test_no_changes_and_all_changes_are_the_two_versions(before, after):
    cfg = _small(after)
    a = resolved(cfg, before, cfg.engine_args)
    b = resolved(cfg, after, cfg.engine_args)
    changes = diff(cfg, a, b)
    assert changes and all(isinstance(c.category, Category) for c in changes)
    for chosen, version in (((), before), (range(len(changes)), after)):
        mixed = simulate(cfg, setup=mixture_setup(cfg, a, b, changes, chosen))
        alone = simulate(_small(version))
        assert mixed.requests.equals(alone.requests), version
        assert mixed.steps.equals(alone.steps), version
        # every setting, and what is derived from them, not only what moved this workload:
        # a behaviour read from the release's number rather than its settings (the profile
        # run's sampler bytes, once) left the mixture of every change with the before
        # version's memory plan (28,275 KV blocks where vllm@0.10.2 plans 26,751)
        for name in SETTING_NAMES:
            assert getattr(mixed.setup.settings, name) == getattr(alone.setup.settings, name), name
        assert mixed.setup.memory == alone.setup.memory, version


def test_the_v0_to_v1_upgrade_changes_what_the_release_notes_say():
    cfg = _small("vllm@0.10.2")
    changes = {c.name: c for c in diff(cfg, *(resolved(cfg, v, {}) for v in PAIRS[0]))}
    assert (changes["scheduler"].before, changes["scheduler"].after) == ("vllm_v0", "vllm_v1")
    assert changes["max_num_batched_tokens"].category is Category.DEFAULTS
    assert changes["enable_prefix_caching"].after is True
    backend = changes["attention_backend"]
    assert (backend.before, backend.after) == ("FLASH_ATTN_FA2", "FLASH_ATTN_FA3")
    assert backend.category is Category.KERNELS
    if KERNELS in changes:  # priced from the measurements nearest each release
        assert changes[KERNELS].before != changes[KERNELS].after


def test_one_version_against_itself_changes_nothing():
    cfg = _small("vllm@0.10.2")
    a = resolved(cfg, "vllm@0.10.2", {})
    assert diff(cfg, a, a) == []
    setup = Setup.from_settings(cfg, a, kernel_version=None)
    assert setup.settings == Setup.from_config(cfg).settings


def _known_pair(num_requests: int, output_len: int):
    """A pair differing in two known ways: half the KV blocks under memory pressure (slower)
    and a chunk cap no prompt reaches (no effect)."""
    common = {"max_model_len": 8192}
    cfg = config(
        {"num_requests": num_requests, "rate": 60.0, "input_len": 1500, "output_len": output_len},
        engine="vllm@0.10.2",
        cost_profile="auto",
        engine_args=common | {"num_gpu_blocks_override": 1200},
    )
    a = resolved(cfg, "vllm@0.10.2", cfg.engine_args)
    after_args = common | {"num_gpu_blocks_override": 600, "long_prefill_token_threshold": 99999}
    b = resolved(cfg, "vllm@0.10.2", after_args)
    return cfg, a, b, diff(cfg, a, b)


def test_known_effects_are_attributed_to_their_settings():
    """Shapley values put the whole change on the KV blocks, exactly nothing on the cap, and
    add up to the change."""
    cfg, a, b, changes = _known_pair(120, 200)
    names = [c.name for c in changes]
    assert sorted(names) == ["long_prefill_token_threshold", "num_gpu_blocks_override"]
    subsets = [frozenset(s) for s in ((), (0,), (1,), (0, 1))]
    values = run_mixtures(cfg, a, b, changes, subsets, jobs=1)
    memory, noop = (
        names.index("num_gpu_blocks_override"),
        names.index("long_prefill_token_threshold"),
    )
    for metric in ("mean_ttft_ms", "output_throughput"):
        value = Memo(lambda s, m=metric: values[s][m])
        total = value((0, 1)) - value(())
        phi = shapley(2, value, np.random.default_rng(0))
        added, removed = one_at_a_time(2, value)
        assert phi.values[noop] == added[noop] == removed[noop] == 0.0
        assert phi.values[memory] == pytest.approx(total)
        assert sum(phi.values) == pytest.approx(total)
    assert values[frozenset({memory})]["mean_ttft_ms"] > 1.1 * values[frozenset()]["mean_ttft_ms"]


def test_attribute_over_seeds_puts_the_change_on_the_memory_setting():
    cfg, a, b, changes = _known_pair(80, 150)
    result = attribute(cfg, a, b, changes, seeds=(0, 1), jobs=1)
    noop = [c.name for c in changes].index("long_prefill_token_threshold")
    assert result.exact and result.simulations_run == 2 * 4
    for metric in ("mean_ttft_ms", "output_throughput"):
        assert result.shapley_pct[metric][noop] == 0.0 and result.ci_pct[metric][noop] == 0.0
        assert sum(result.shapley_pct[metric]) == pytest.approx(result.change_pct[metric])
        assert result.interaction_pct[metric] == pytest.approx(0.0, abs=1e-9)
    assert result.change_pct["mean_ttft_ms"] > 10
    assert [changes[i].name for i in result.minimal] == ["num_gpu_blocks_override"]
