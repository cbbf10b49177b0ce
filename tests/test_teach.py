"""The teaching scenarios: each runs, and its lesson holds in the numbers it prints."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sim.cli import check_overrides
from sim.scenarios.teach.lessons import LESSONS
from sim.scenarios.teach.measures import makespan, max_itl_ms, prefill_tokens, time_mean_batch
from sim.scenarios.teach.run import run_lesson
from tests.test_timeline import check_html


def lesson(name: str):
    (cfg,) = check_overrides([f"scenario=teach_{name}"])
    out = run_lesson(cfg)
    return list(out.results), out.lesson_sentence


def test_static_vs_continuous():
    (static, cont), sentence = lesson("static_vs_continuous")
    assert makespan(cont) < 0.6 * makespan(static)
    assert time_mean_batch(cont) > 2 * time_mean_batch(static)
    assert (static.phases["phase"] == "held").any() and not (cont.phases["phase"] == "held").any()
    assert f"{makespan(cont):.1f} s against {makespan(static):.1f} s" in sentence


def test_chunked_prefill():
    (whole, chunked), sentence = lesson("chunked_prefill")
    assert max_itl_ms(chunked) < 0.25 * max_itl_ms(whole)
    assert whole.steps["prefill_tokens"].max() >= 12288  # a long prompt in one step
    assert chunked.steps["prefill_tokens"].max() <= 1024
    assert f"{max_itl_ms(whole):,.0f} ms" in sentence


def test_preemption():
    (small, big), _ = lesson("preemption")
    assert small.summary["sim"]["preemptions"] > 0 == big.summary["sim"]["preemptions"]
    prompts = int(small.requests["prompt_tokens"].sum())
    assert prefill_tokens(big) == prompts  # nothing computed twice
    assert prefill_tokens(small) > prompts
    assert (small.phases["phase"] == "preempted").sum() == small.summary["sim"]["preemptions"]
    assert makespan(small) > makespan(big)


def test_prefix_caching():
    (off, on), _ = lesson("prefix_caching")
    assert on.summary["sim"]["prefix_cache_hit_rate"] > 0.8
    assert off.summary["sim"]["prefix_cache_hit_rate"] == 0
    assert prefill_tokens(on) < 0.2 * prefill_tokens(off)
    assert on.summary["mean_ttft_ms"] < off.summary["mean_ttft_ms"]


def test_head_of_line():
    (fcfs, capped), sentence = lesson("head_of_line")
    short = fcfs.requests["prompt_tokens"] < 4096
    a = fcfs.requests.loc[short, "ttft_s"].median()
    b = capped.requests.loc[short, "ttft_s"].median()
    assert b < 0.25 * a
    long_a = fcfs.requests.loc[~short, "ttft_s"].iloc[0]
    long_b = capped.requests.loc[~short, "ttft_s"].iloc[0]
    assert long_b > long_a  # the price: the long prompt waits longer
    assert "long_prefill_token_threshold" in sentence


def test_admission():
    (vllm, trt), _ = lesson("admission")
    assert trt.setup.settings.engine == "trtllm"
    pool = [r.setup.memory.kv_capacity_tokens for r in (vllm, trt)]
    assert abs(pool[0] - pool[1]) <= 32  # the same pool, to a block
    assert vllm.summary["sim"]["preemptions"] > 0 == trt.summary["sim"]["preemptions"]
    assert time_mean_batch(vllm) > time_mean_batch(trt)


@pytest.mark.parametrize("name", ["head_of_line"])
def test_teaching_scenario_end_to_end(tmp_path, name):
    out = tmp_path / name
    cmd = [sys.executable, "-m", "sim", f"scenario=teach_{name}", f"hydra.run.dir={out}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["lesson"] == name and s["lesson_sentence"] in done.stdout
    for f in ("report.md", "report.html", "timeline.png", "timeline.svg", "trace.json"):
        assert (out / f).is_file(), f
    assert check_html(out / "report.html").images == 1


def test_every_lesson_has_a_scenario_and_a_bad_name_fails_clearly():
    from sim.paths import SCENARIO_DIR

    for name in LESSONS:
        assert (SCENARIO_DIR / "scenario" / f"teach_{name}.yaml").is_file()
    done = subprocess.run(
        [sys.executable, "-m", "sim", "scenario=teach_head_of_line", "teach.lesson=nope"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "teach.lesson='nope': choose one of" in done.stderr
