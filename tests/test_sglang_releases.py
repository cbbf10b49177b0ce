"""SGLang 0.3.0-0.3.5: each release's defaults as read from its wheel (sim/engines/sglang.py
names the files), and the scheduling rules that differ from 0.3.6."""

from __future__ import annotations

import json
import re

import pytest

from sim.engines.resolve import after_memory, parse_engine_spec, resolve
from sim.errors import UserError
from sim.run.simulate import simulate
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model
from sim.workload.request import Request
from tests.conftest import config
from tests.test_cli import sim
from tests.test_scheduler_families import drive, make, req

OLD = ("0.3.0", "0.3.1", "0.3.2", "0.3.3", "0.3.4", "0.3.5")


def settings(spec: str, gpu: str = "a100-80gb", tp: int = 1, model: str = "llama-3.1-8b", **args):
    return resolve(spec, load_hardware(gpu), load_model(model), tp, "server", args)


# What each release sets that 0.3.6 sets otherwise (0.3.6: overlap on, init x 0.14 = 0.098,
# (0.7 - 0.098) / 600 per step, managers/scheduler.py).
EXPECTED = {
    "0.3.0": (False, 0.1, 0.001, "tp_worker.py", "async_scheduling"),
    "0.3.1": (False, 0.1, 0.001, "tp_worker.py", "async_scheduling"),
    "0.3.2": (False, 0.1, 0.001, "tp_worker.py", "async_scheduling"),
    "0.3.3": (False, 0.1, 0.001, "scheduler.py", "async_scheduling"),
    "0.3.4": (False, 0.1, 0.001, "scheduler.py", "enable_overlap_schedule"),
    "0.3.5": (False, 0.098, 0.602 / 600, "scheduler.py", "enable_overlap_schedule"),
    "0.3.6": (True, 0.098, 0.602 / 600, "scheduler.py", "disable_overlap_schedule"),
}


@pytest.mark.parametrize("release", [*OLD, "0.3.6"])
def test_each_release_resolves_with_its_own_rules(release):
    s = settings(f"sglang@{release}")
    overlap, floor, decay, loop, overlap_name = EXPECTED[release]
    assert s.rule_set == release
    assert s.async_scheduling is overlap
    assert s.new_token_ratio == 0.7
    assert s.min_new_token_ratio == pytest.approx(floor)
    assert s.new_token_ratio_decay == pytest.approx(decay)
    assert s.rules["scheduler"].endswith(f"(managers/{loop})")
    assert s.display_name("async_scheduling") == overlap_name
    # the same in every 0.3 release: chunk 8192, 16384 prefill tokens, lpm, flashinfer,
    # decode graphs up to 160, no compile, 0.88 of memory at TP 1, retraction to 20 steps
    assert (s.max_num_batched_tokens, s.max_prefill_tokens, s.policy) == (8192, 16384, "lpm")
    assert (s.attention_backend, s.cudagraph_mode, s.compile) == (
        "FLASHINFER",
        "FULL_DECODE_ONLY",
        False,
    )
    assert s.cudagraph_capture_sizes == (1, 2, 4, *range(8, 161, 8))
    assert s.gpu_memory_utilization == 0.88 and s.block_size == 1
    assert (s.retract_decode_steps, s.retract_ratio_offset) == (20, 0)
    for record in s.records():
        assert record["rule"], record


@pytest.mark.parametrize(("release", "fraction"), [*((r, 0.83) for r in OLD), ("0.3.6", 0.82)])
def test_mem_fraction_static_at_tp8(release, fraction):
    """server_args.py: 0.83 at TP 8 until 0.3.5, 0.82 in 0.3.6; the other TP sizes agree."""
    s = settings(f"sglang@{release}", "h100-sxm", 8, "llama-3.1-70b")
    assert s.gpu_memory_utilization == fraction
    assert (
        settings(f"sglang@{release}", "h100-sxm", 4, "llama-3.1-70b").gpu_memory_utilization == 0.85
    )


def test_no_gpu_memory_tiers_before_0_3_5_post2():
    """0.3.5.post2 (its wheel's server_args.py) cuts the chunk to 2048 and the graphs to 4 below
    25,000 MiB, as 0.3.6 does; 0.3.5 and 0.3.5.post1 do not."""
    old, post1 = settings("sglang@0.3.5", "rtx-4090"), settings("sglang@0.3.5.post1", "rtx-4090")
    for s in (old, post1):
        assert (s.max_num_batched_tokens, max(s.cudagraph_capture_sizes)) == (8192, 160)
    for release in ("0.3.5.post2", "0.3.6"):
        new = settings(f"sglang@{release}", "rtx-4090")
        assert (new.max_num_batched_tokens, new.cudagraph_capture_sizes) == (2048, (1, 2, 4))
    assert "memory tiers arrive in 0.3.5.post2" in old.rules["max_num_batched_tokens"]


def test_request_pool_of_0_3_0_keeps_one_slot_free():
    """model_runner.py: 0.3.0's pool clips at 5120 requests and tp_worker.py leaves one free;
    from 0.3.1, 4096 and all of it. A 450,064-token pool at a 131,072 context gives 2048."""
    first = after_memory(settings("sglang@0.3.0"), 450_064)
    later = after_memory(settings("sglang@0.3.1"), 450_064)
    assert (first.max_num_seqs, later.max_num_seqs) == (2047, 2048)
    assert "request pool 2048 - 1" in first.rules["max_num_seqs"]
    short = after_memory(settings("sglang@0.3.0", max_model_len=4096), 450_064)
    assert short.max_num_seqs == 5119  # 0.3.1+: 4096


def test_schedule_conservativeness_scales_only_the_floor_before_0_3_5():
    old = settings("sglang@0.3.4", schedule_conservativeness=0.5)
    assert (old.new_token_ratio, old.min_new_token_ratio, old.new_token_ratio_decay) == (
        0.7,
        0.05,
        0.001,
    )
    new = settings("sglang@0.3.5", schedule_conservativeness=0.5)
    assert new.new_token_ratio == pytest.approx(0.35)
    assert new.min_new_token_ratio == pytest.approx(0.049)


def test_overlap_switch_by_the_release_own_name():
    s = settings("sglang@0.3.4", enable_overlap_schedule=True)
    assert s.async_scheduling is True
    assert s.as_mapping()["enable_overlap_schedule"]["value"] is True
    with pytest.raises(UserError, match="disable_overlap_schedule is not a sglang argument"):
        settings("sglang@0.3.0", disable_overlap_schedule=True)


def test_an_architecture_0_3_0_lacks_is_refused():
    with pytest.raises(UserError) as err:
        settings("sglang@0.3.0", model="qwen3-8b")
    assert str(err.value) == (
        "SGLang 0.3.0 cannot serve qwen3-8b: Qwen3ForCausalLM is not in SGLang 0.3.0's "
        "srt/models/ (nor in any release read up to 0.3.6); use a later release"
    )
    assert settings("sglang@0.3.0", model="mixtral-8x7b-v0.1", tp=2).engine == "sglang"


@pytest.mark.parametrize("spec", ["sglang@0.2.15", "sglang@0.2.9"])
def test_releases_before_0_3_0_name_the_known_range(spec):
    with pytest.raises(UserError, match=re.escape("outside the known range 0.3.0 .. 0.5.23")):
        parse_engine_spec(spec)


def test_a_release_between_read_ones_is_its_own_rule_set():
    assert parse_engine_spec("sglang@0.3.4.post1") == ("sglang", "0.3.4.post1", "0.3.4")


def test_short_run_without_the_overlap_scheduler_is_slower_per_token():
    """A short run completes on 0.3.0; with no overlap scheduler every step pays its CPU time,
    so decode is slower than 0.3.6's on the same traffic."""
    workload = {"num_requests": 40, "rate": 8.0, "input_len": 256, "output_len": 32}
    out = {}
    for release in ("0.3.0", "0.3.6"):
        cfg = config(workload, engine=f"sglang@{release}", hardware="a100-80gb")
        out[release] = simulate(cfg).summary
    assert out["0.3.0"]["completed"] == out["0.3.6"]["completed"] == 40
    assert out["0.3.0"]["median_tpot_ms"] > out["0.3.6"]["median_tpot_ms"]


def _first_start(steps, name: str) -> int | None:
    return next((k for k, step in enumerate(steps, 1) if any(n == name for n, _ in step)), None)


@pytest.mark.parametrize(("release", "retries"), [("0.3.2", True), ("0.3.3", False)])
def test_admission_retried_every_step_before_0_3_3(release, retries):
    """100 blocks of 16 tokens. A (16 + 1000 output) runs; B (16 + 934) does not fit beside
    A's 1000 x 0.7 reservation. As the ratio decays by 0.001 a step, 0.3.2 admits B about
    100 steps later; 0.3.3 marks the batch full and waits for A to leave."""
    sched = make(f"sglang@{release}", 100)
    a, b = req("A", 16, 1000), req("B", 16, 934)
    steps = drive(sched, {1: [a], 2: [b]}, 200)
    start = _first_start(steps, "B")
    if retries:
        assert start is not None and 100 < start < 200 and a.finish_s is None
    else:
        assert start is None and sched.batch_is_full


def _sharer(prefix_of: Request, name: str) -> Request:
    return Request(
        request_id=ord(name),
        arrival_s=0.0,
        prompt_len=prefix_of.prompt_len,
        max_output_len=2,
        content_ids=list(prefix_of.content_ids),
        content_block_tokens=16,
    )


@pytest.mark.parametrize(("release", "sorted_queue"), [("0.3.4", True), ("0.3.5", False)])
def test_lpm_sorts_any_queue_before_0_3_5(release, sorted_queue):
    """X's blocks are cached; then 129 new prompts and one repeating X's arrive together.
    With more than 128 waiting, 0.3.5 takes arrival order; 0.3.4 puts the cached one first."""
    sched = make(f"sglang@{release}", 400)
    x = req("X", 32, 2)
    others = [req(chr(0x100 + i), 32, 2) for i in range(129)]
    again = _sharer(x, "Y")
    steps = drive(sched, {1: [x], 5: [*others, again]}, 5)
    assert steps[4][0][0] == ("Y" if sorted_queue else chr(0x100))


def test_show_engine_for_0_3_0(tmp_path):
    out = tmp_path / "show"
    r = sim(
        "scenario=show_engine",
        "engine=sglang@0.3.0",
        "hardware=a100-80gb",
        f"hydra.run.dir={out}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    shown = json.loads((out / "summary.json").read_text())["engine_settings"]
    assert shown["async_scheduling"]["value"] is False
    assert "no overlap scheduler" in shown["async_scheduling"]["rule"]
    assert shown["max_running_requests"]["value"] == 2047
    assert shown["min_new_token_ratio"]["value"] == 0.1
    assert all(e["rule"] for e in shown.values())
    assert (out / "settings.md").read_text().startswith("# sglang@0.3.0")
    r = sim("scenario=show_engine", "engine=sglang@0.3.0", "model=qwen3-8b", cwd=tmp_path)
    assert r.returncode == 2 and "Qwen3ForCausalLM is not in SGLang 0.3.0's" in r.stderr
