"""Which engine releases the catalogue knows (sim/engines/published.py), the line a run prints
when another release's rules stand in, and which engine vLLM 0.8-0.10 runs with an FP8 KV cache
(sim/engines/v1_oracle.py)."""

from __future__ import annotations

import re

import pytest

from sim.__main__ import _say_engines
from sim.cli import check_overrides
from sim.engines.published import PUBLISHED, known_releases
from sim.engines.resolve import ENGINES, parse_engine_spec, resolve
from sim.engines.versions import release_key, version_tuple
from sim.errors import UserError
from sim.kv.memory import plan_memory
from sim.scenarios.runner import check
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model
from tests.conftest import config
from tests.test_cli import sim


def test_a_release_never_published_is_refused_with_the_nearest_known():
    """Issue 41, item 2: vllm@0.8.45 ran with 0.8.5's rules and was reported as 0.8.45."""
    with pytest.raises(UserError) as err:
        parse_engine_spec("vllm@0.8.45")
    assert str(err.value) == (
        "engine='vllm@0.8.45': vllm 0.8.45 is not a release vllm has published "
        "(sim/engines/published.py lists the ones known); the nearest known: 0.8.5.post1 and "
        "0.9.0 (did you mean 0.8.4 or 0.8.5?)"
    )
    for spec in ("vllm@0.33.5", "vllm@0.9.1.post2", "sglang@0.5.24", "trtllm@1.3.0rc16"):
        with pytest.raises(UserError, match=r"is not a release \w+ has published"):
            parse_engine_spec(spec)


def test_the_upgrade_study_refuses_an_unknown_release_before_running(tmp_path):
    r = sim(
        "scenario=upgrade_diff",
        "upgrade.before=vllm@0.8.45",
        "upgrade.after=vllm@0.8.5",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "vllm 0.8.45 is not a release vllm has published" in lines[0]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("spec", "release", "rule_set"),
    [
        ("vllm@0.6.3.post1", "0.6.3.post1", "0.6.3"),  # a post release
        ("vllm@0.9.0.1", "0.9.0.1", "0.9.0"),
        ("vllm@0.8.3", "0.8.3", "0.8.2"),
        ("sglang@0.5.3rc0", "0.5.3rc0", "0.5.1.post1"),  # an rc comes before its release
        ("sglang@0.5.10rc0", "0.5.10rc0", "0.5.10rc0"),  # read: the rules of 0.5.10
        ("sglang@0.5.10.post1", "0.5.10.post1", "0.5.10"),
        ("trtllm@1.0", "1.0.0", "1.0.0"),  # spelt as published
        ("trtllm@1.3.0RC10", "1.3.0rc10", "1.0.0"),
        ("trtllm@1.3.0rc18", "1.3.0rc18", "1.0.0"),  # NVIDIA's own index only
        ("trtllm@1.4.0rc4", "1.4.0rc4", "1.0.0"),
        ("trtllm", "1.4.0", "1.4.0"),
        ("orca@1.0", "1", "1"),
    ],
)
def test_published_releases_run_with_the_nearest_earlier_rules(spec, release, rule_set):
    assert parse_engine_spec(spec)[1:] == (release, rule_set)


def test_outside_the_range_names_the_range_and_why():
    with pytest.raises(
        UserError, match=re.escape("outside the known range 0.4.0 .. 0.33.0: it is published")
    ):
        parse_engine_spec("vllm@0.34.0")  # published, but nobody has read its rules
    with pytest.raises(UserError, match=re.escape("0.4.0 .. 0.33.0; the nearest known: 0.4.0")):
        parse_engine_spec("vllm@0.3.3")
    with pytest.raises(UserError, match=re.escape("'0.8.x' is not a release number")):
        parse_engine_spec("vllm@0.8.x")


def test_the_published_lists_are_in_release_order_and_hold_every_rule_set():
    for engine, published in PUBLISHED.items():
        keys = [release_key(r) for r in published]
        assert None not in keys and keys == sorted(set(keys)), engine
        rule_sets = ENGINES[engine].releases(engine)
        known = known_releases(engine, rule_sets)
        assert set(rule_sets) <= set(known)
        for release in known:  # every known release resolves to itself
            assert parse_engine_spec(f"{engine}@{release}")[1] == release
    assert "1.4.0" not in PUBLISHED["trtllm"]  # the rule set's name, not a release (yet)


def test_release_order_puts_pre_releases_first_and_post_releases_after():
    order = ["1.3.0rc5", "1.3.0rc5.post2", "1.3.0rc10", "1.3.0", "1.3.0.post1", "1.3.1"]
    assert sorted(order, key=release_key) == order
    assert release_key("1.0") == release_key("1.0.0") and release_key("0.8") is not None
    assert version_tuple("1.3.0rc5") == (1, 3, 0)  # was (1, 3, 5): the rc number read in


def test_a_stand_in_is_said_on_the_console(capsys):
    _say_engines([config(engine="vllm@0.8.3"), config(engine="vllm@0.8.5")])
    assert capsys.readouterr().err == (
        "sim: vllm@0.8.3 runs with the rules of vllm 0.8.2, the nearest earlier release the "
        "catalogue has rules for\n"
    )
    upgrade = {"before": "vllm@0.6.3.post1", "after": "vllm@0.10.1.1"}
    _say_engines([config(task="upgrade_diff", engine="vllm@0.8.3", upgrade=upgrade)])
    assert capsys.readouterr().err.splitlines() == [
        "sim: vllm@0.10.1.1 runs with the rules of vllm 0.10.1, the nearest earlier release the "
        "catalogue has rules for",
        "sim: vllm@0.6.3.post1 runs with the rules of vllm 0.6.3, the nearest earlier release the "
        "catalogue has rules for",
    ]


def _settings(spec, gpu, model="llama-3.1-8b", **overrides):
    return resolve(spec, load_hardware(gpu), load_model(model), 1, overrides=overrides)


@pytest.mark.parametrize(
    ("spec", "gpu", "model", "overrides", "scheduler"),
    [
        # 0.8.0 and 0.8.1: any kv_cache_dtype but auto falls back
        ("vllm@0.8.1", "h100-sxm", "llama-3.1-8b", {}, "vllm_v0"),
        # 0.8.2: V1 when FlashAttention 3 takes it (compute capability 9.x) ...
        ("vllm@0.8.2", "h100-sxm", "llama-3.1-8b", {}, "vllm_v1"),
        ("vllm@0.8.4", "h200", "llama-3.1-8b", {}, "vllm_v1"),
        ("vllm@0.8.4", "a100-80gb", "llama-3.1-8b", {}, "vllm_v0"),
        # ... and no other attention backend is asked for
        ("vllm@0.8.5", "h100-sxm", "llama-3.1-8b", {"attention_backend": "XFORMERS"}, "vllm_v0"),
        # ROCm from 0.9.0; compute capability 10.0 from 0.10.0; MLA models from 0.10.2
        ("vllm@0.8.5", "mi300x", "llama-3.1-8b", {}, "vllm_v0"),
        ("vllm@0.9.0", "mi300x", "llama-3.1-8b", {}, "vllm_v1"),
        ("vllm@0.9.2", "b200", "llama-3.1-8b", {}, "vllm_v0"),
        ("vllm@0.10.0", "b200", "llama-3.1-8b", {}, "vllm_v1"),
        ("vllm@0.10.0", "b300", "llama-3.1-8b", {}, "vllm_v0"),  # 10.3: not device 100
        ("vllm@0.10.0", "a100-80gb", "deepseek-v3", {}, "vllm_v0"),
        ("vllm@0.10.2", "a100-80gb", "deepseek-v3", {}, "vllm_v1"),
    ],
)
def test_v1_takes_an_fp8_kv_cache_as_each_release_did(spec, gpu, model, overrides, scheduler):
    s = resolve(
        spec,
        load_hardware(gpu),
        load_model(model),
        8,
        overrides={"kv_cache_dtype": "fp8"} | overrides,
    )
    assert s.scheduler == scheduler, s.rules["scheduler"]


def test_fp8_kv_doubles_the_context_llama_4_scout_fits_on_0_8_3():
    """Issue 41, item 5: with FP8 KV, 0.8.3 fell back to V0 (profiled at a budget of the whole
    context) and had no memory left; V1 takes it from 0.8.2, so the pool holds twice the
    tokens."""
    hw, model = load_hardware("h100-sxm"), load_model("llama-4-scout-17b-16e")
    pools = {}
    for kv in ("auto", "fp8"):
        args = {"kv_cache_dtype": kv, "max_model_len": 1_000_000}  # fits either way
        s = resolve("vllm@0.8.3", hw, model, 8, overrides=args)
        assert s.scheduler == "vllm_v1" and s.max_num_batched_tokens == 8192
        pools[kv] = plan_memory(hw, model, s, 8, model.checkpoint_dtype).kv_capacity_tokens
    assert pools["fp8"] == pytest.approx(2 * pools["auto"], rel=0.001)


def test_llama_4_on_a_v0_fallback_of_0_8_3_is_refused():
    """0.8.3's V0 attention backends do not take Llama 4's use_irope: the engine would not
    start; 0.8.4's do (at global attention), so it runs on V0."""
    with pytest.raises(UserError) as err:
        _settings("vllm@0.8.3", "a100-80gb", "llama-4-scout-17b-16e", kv_cache_dtype="fp8")
    assert str(err.value).startswith(
        "vLLM before 0.8.4 cannot serve llama-4-scout-17b-16e here: the run falls back to the "
        "V0 engine (kv_cache_dtype=fp8 (V1 takes FP8 KV only with FlashAttention 3 on Hopper)"
    )
    s = _settings("vllm@0.8.4", "a100-80gb", "llama-4-scout-17b-16e", kv_cache_dtype="fp8")
    assert s.scheduler == "vllm_v0"
    with pytest.raises(UserError, match=re.escape("no V0 attention backend of 0.8.3 takes")):
        swap = {"preemption_mode": "swap"}  # V0-only: a fallback on a Hopper GPU too
        check(config(engine="vllm@0.8.3", model="llama-4-scout-17b-16e", parallel={"tp": 8},
                     engine_args=swap))  # fmt: skip


def test_the_refusal_comes_from_the_checks_before_a_run():
    with pytest.raises(UserError, match=re.escape("vLLM before 0.8.4 cannot serve")):
        for cfg in check_overrides(
            [
                "engine=vllm@0.8.3",
                "model=llama-4-scout-17b-16e",
                "hardware=l40s",
                "parallel.tp=8",
                "engine_args.kv_cache_dtype=fp8",
            ]
        ):
            check(cfg)


def test_eager_v0_runs_without_async_output_processing():
    """vLLM V0 on CUDA turns async output processing off under enforce_eager ("enforce-eager is
    enabled, async output processor cannot be used", ModelConfig.verify_async_output_proc,
    0.6.3's config.py); V1 processes outputs in its frontend process either way."""
    hw, model = load_hardware("h100-sxm"), load_model("llama-3.1-8b")
    v0 = resolve("vllm@0.6.3", hw, model, 1)
    eager = resolve("vllm@0.6.3", hw, model, 1, overrides={"enforce_eager": True})
    assert v0.async_output_proc and not eager.async_output_proc
    assert "async output off when eager" in eager.rules["async_output_proc"]
    v1 = resolve("vllm@0.12.0", hw, model, 1, overrides={"enforce_eager": True})
    assert v1.async_output_proc
