"""Issue 25, long context for every attention design: windowed layers sized as the simulated
release's allocator sizes them (the same in the memory plan, the longest context, the run's
blocks per request and the report's sentences), chunk-timing sentences that never say 0x,
and a tensor-parallel degree the model's heads allow (chosen, or named in the error)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from sim.cli import check_overrides
from sim.config import SimConfig
from sim.engines.windows import window_rule
from sim.errors import UserError
from sim.kv.manager import KVCacheManager
from sim.kv.memory import plan_memory
from sim.run.setup import Setup
from sim.scenarios.long_context.arithmetic import Prefill
from sim.scenarios.long_context.runs import Context, fit_for_simulation, sim_config
from sim.scenarios.long_context.study import memory_of
from sim.scenarios.long_context.text import chunk_sentence, memory_sentence, ratio_text
from sim.scenarios.long_context.tp_choice import choose_tp
from sim.scenarios.runner import check
from sim.specs.model_config import load_model
from sim.workload.request import Request

GIB = 2**30
M = 1_048_576
SCOUT = "llama-4-scout-17b-16e"


def config(engine: str, model: str = SCOUT, **kw) -> SimConfig:
    lc = {"background": False, "architectures": [], "jobs": 1} | kw.pop("long_context", {})
    return SimConfig.from_mapping(
        {"engine": engine, "model": model, "hardware": "h100-sxm", "parallel": {"tp": 8}}
        | {"long_context": lc}
        | kw
    )


# ---- which releases bound windowed layers ----------------------------------------------------
@pytest.mark.parametrize(
    ("model", "spec", "bounded"),
    [
        (SCOUT, "vllm@0.8.3", False),  # before the hybrid KV cache manager
        (SCOUT, "vllm@0.10.0", True),  # PR #19351
        (SCOUT, "vllm@0.10.2", False),  # PR #21761: off by default for chunked-local
        (SCOUT, "vllm@0.14.0", True),  # PR #29627: on again
        ("gemma-3-27b-it", "vllm@0.9.0", False),
        ("gemma-3-27b-it", "vllm@0.9.1", True),  # PR #17996
        ("gpt-oss-120b", "vllm@0.10.1", True),
        ("mistral-7b-v0.1", "vllm@0.8.3", True),  # every layer slides: PR #14097
        ("gemma-3-27b-it", "sglang@0.5.9", False),  # conservative, documented
    ],
)
def test_window_rule_by_release(model, spec, bounded):
    engine, _, version = spec.partition("@")
    scheduler = "vllm_v1" if engine == "vllm" else engine
    rule = window_rule(engine, version, scheduler, load_model(model))
    assert rule.bounded is bounded and rule.why


def test_full_attention_models_have_no_window_rule():
    assert window_rule("vllm", "0.14.0", "vllm_v1", load_model("llama-3.1-8b")).why == ""


# ---- the memory plan, the longest context and the run's blocks agree --------------------------
def plan_at(engine: str, max_model_len: int = 4096):
    ctx = Context.of(config(engine))
    s = ctx.settings(8, max_model_len=max_model_len)
    return plan_memory(ctx.hardware, ctx.model, s, 8, "auto")


def test_before_the_hybrid_allocator_every_layer_holds_every_token():
    plan = plan_at("vllm@0.8.3")
    assert plan.windows == ()
    assert plan.blocks_for(M) == M // plan.block_size
    assert plan.longest_sequence_tokens() == plan.kv_capacity_tokens


def test_after_the_hybrid_allocator_chunked_layers_hold_their_window():
    plan = plan_at("vllm@0.14.0")
    ((window, window_bytes),) = plan.windows
    assert window == 8192 and 0 < window_bytes < plan.kv_bytes_per_token
    # up to the window: one block per block_size tokens, as for any model
    assert plan.blocks_for(window) == window // plan.block_size
    # beyond it, the bytes of the layers that keep every token plus the window's
    need = M * (plan.kv_bytes_per_token - window_bytes) + window * window_bytes
    assert plan.blocks_for(M) == -(-need // plan.bytes_per_block) < M // plan.block_size
    assert plan.longest_sequence_tokens() > plan.kv_capacity_tokens
    record = plan.record()
    assert record["windows"] == [[8192, window_bytes]] and "PR #19351" in record["window_rule"]


@pytest.mark.parametrize("engine", ["vllm@0.8.3", "vllm@0.14.0"])
def test_the_array_count_of_blocks_is_the_scalar_one(engine):
    """MemoryPlan.blocks_for_each (fast-forward's decode runs) agrees with blocks_for (the
    block pool's) token by token, about the window and far beyond it, and never decreases."""
    plan = plan_at(engine)
    tokens = np.concatenate([np.arange(1, 20_000), np.arange(M - 5_000, M + 5_000)])
    each = plan.blocks_for_each(tokens)
    assert each.tolist() == [plan.blocks_for(int(n)) for n in tokens]
    assert (np.diff(each[: 20_000 - 1]) >= 0).all() and (np.diff(each[20_000 - 1 :]) >= 0).all()


def test_full_attention_plans_record_no_window_keys():
    ctx = Context.of(config("vllm@0.14.0", "llama-3.1-8b"))
    plan = plan_memory(ctx.hardware, ctx.model, ctx.settings(8, max_model_len=4096), 8, "auto")
    assert "windows" not in plan.record() and "window_rule" not in plan.record()


@pytest.mark.parametrize(("engine", "bounded"), [("vllm@0.8.3", False), ("vllm@0.14.0", True)])
def test_one_rule_in_the_plan_the_fit_and_the_sentence(engine, bounded):
    ctx = Context.of(config(engine))
    given, fit = fit_for_simulation(ctx)
    memory = memory_of(ctx, given, fit)
    m = ctx.model
    per = m.kv_bytes_per_token()
    chunked = m.kv_bytes_per_token_by_kind()["chunked"]
    held = M * per if not bounded else M * (per - chunked) + 8192 * chunked
    assert memory.windows_bounded is bounded and memory.kv_bytes_sequence == held
    sentence = memory_sentence(SimpleNamespace(memory=memory, prompt_tokens=M, hardware="h100"))
    assert f"holds {held / GIB:,.1f} GiB" in sentence
    if bounded:
        assert f"{per - chunked:,} bytes per token in the layers that keep every token" in sentence
        assert f"{chunked:,} in its chunked layers for their last 8,192 only" in sentence
    else:
        assert (
            f"({per:,} bytes per token at the model's dtype, windowed layers included" in sentence
        )
    assert "(0 with FP8 KV)" not in sentence
    if not memory.max_context_tokens_fp8_kv:  # FP8 KV's real reason: its plan has no room
        assert memory.why_not_fp8_kv and not memory.kv_pool_bytes_per_gpu_fp8_kv
        assert "none with FP8 KV: with it the memory plan leaves no room" in sentence
    # the run's pool is the plan the fit was checked against: no enlarged pool
    run_cfg = sim_config(ctx, given)
    assert not run_cfg.engine_args.get("num_gpu_blocks_override")
    plan = Setup.from_config(run_cfg, ctx.model).memory
    assert plan.blocks_for(ctx.total_tokens) <= plan.num_blocks - 1
    assert bool(plan.windows) is bounded
    # the longest context: the fit's bytes and the plan's whole blocks (less the null block)
    # agree within two blocks' worth of tokens
    grow = plan.kv_bytes_per_token - sum(b for _, b in plan.windows)
    slack = -(-2 * plan.bytes_per_block // grow)
    assert abs(plan.longest_sequence_tokens() - given.max_context_tokens) <= slack


def test_the_run_holds_fewer_blocks_for_a_long_request_only_where_windows_are_bounded():
    plan = plan_at("vllm@0.14.0")
    kv = KVCacheManager(100_000, plan.block_size, True, None, plan)
    short = Request(1, 0.0, 4000, 4, list(range(1, 252)), 16)
    long = Request(2, 0.0, 200_000, 4, list(range(1000, 1000 + 12_501)), 16)
    for req in (short, long):
        done = 0
        while done < req.prompt_len:
            n = min(8192, req.prompt_len - done)
            assert kv.allocate_slots(req, n) is not None
            req.num_computed_tokens = done = done + n
            kv.check_invariants()
    assert kv.num_blocks_of(short) == -(-4000 // plan.block_size)
    assert kv.num_blocks_of(long) == plan.blocks_for(200_000) < 200_000 // plan.block_size
    kv.free(long, finished=True)
    kv.free(short, finished=True)
    kv.check_invariants()


# ---- chunk timing sentences -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.38, "62% less than the first"),
        (4.06, "4.1× as long as the first"),
        (1.0, "about the same as the first"),
        (23.4, "23× as long as the first"),
    ],
)
def test_ratio_text_is_never_zero_times(value, text):
    assert ratio_text(value, "the first") == text


def test_a_last_chunk_faster_than_the_first_is_said_so():
    p = Prefill(M, 8192, 128, 1.0, 1.0, 0.1, 0.1, first_chunk_s=0.173, last_chunk_s=0.066)
    memory = SimpleNamespace(windows={"chunked": 8192})
    text = chunk_sentence(SimpleNamespace(prefill=p, memory=memory))
    assert "0×" not in text and "62% less than the first for the same token budget" in text
    assert "full-attention layers read the whole prefix" in text
    assert "chunked layers only their 8,192-token window" in text


def test_a_short_last_chunk_is_not_compared_as_the_same_budget():
    p = Prefill(M - 100, 8192, 128, 1.0, 1.0, 0.1, 0.1, first_chunk_s=0.17, last_chunk_s=0.7)
    text = chunk_sentence(SimpleNamespace(prefill=p, memory=SimpleNamespace(windows={})))
    assert "the last chunk (8,092 tokens)" in text and "same token budget" not in text


# ---- tensor parallelism the heads allow -------------------------------------------------------
def test_valid_degrees_follow_both_head_counts():
    qwen = load_model("qwen2.5-7b-instruct-1m")  # 28 attention heads, 4 KV heads
    assert qwen.tp_degrees(8) == [1, 2, 4]
    assert qwen.tp_degrees() == [1, 2, 4, 28]  # 7 and 14 divide 28 but split 4 KV heads unevenly
    assert "valid degrees: 1, 2, 4, 28" in qwen.tp_error(8)
    assert "4 KV heads" in qwen.tp_error(7)
    assert qwen.tp_error(4) is None


def test_the_scenarios_default_tp_becomes_a_valid_one_and_says_why():
    (cfg,) = check_overrides(["scenario=long_context", "model=qwen2.5-7b-instruct-1m"])
    assert cfg.long_context.adapt_tp and cfg.parallel.tp == 8
    check(cfg)  # no longer refused
    chosen, choice = choose_tp(cfg)
    assert choice.chosen == chosen.parallel.tp in (1, 2, 4)
    assert Context.of(chosen).fit(choice.chosen).fits
    assert not any(Context.of(chosen).fit(t).fits for t in (1, 2, 4) if t < choice.chosen)
    assert "the scenario's default parallel.tp=8 does not suit" in choice.why
    assert "valid degrees: 1, 2, 4, 28" in choice.why and f"tp={choice.chosen}" in choice.why


def test_an_explicit_invalid_tp_is_refused_naming_the_valid_degrees():
    (cfg,) = check_overrides(
        ["scenario=long_context", "model=qwen2.5-7b-instruct-1m", "parallel.tp=8"]
    )
    assert not cfg.long_context.adapt_tp
    with pytest.raises(UserError, match="valid degrees: 1, 2, 4, 28"):
        check(cfg)


@pytest.mark.parametrize("scenario", ["default", "upgrade_diff", "capacity", "show_engine"])
def test_every_scenario_names_the_valid_degrees(scenario):
    args = [f"scenario={scenario}", "model=qwen2.5-7b-instruct-1m", "parallel.tp=8"]
    with pytest.raises(UserError, match="valid degrees: 1, 2, 4, 28"):
        for cfg in check_overrides(args):
            check(cfg)
