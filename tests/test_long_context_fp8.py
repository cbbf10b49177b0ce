"""scenario=long_context's FP8 KV figure (issue 41, item 5): FP8 KV halves the KV bytes, so
where the engine's memory plan is the same it roughly doubles the context that fits, and the
report says so; "none with FP8 KV" appears only with its real reason (the engine refuses FP8
KV here, or its memory plan with it leaves no room), and a refusal of FP8 KV never stops the
study of a run that did not ask for it."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from sim.config import SimConfig
from sim.errors import UserError
from sim.report.escape import md_inline
from sim.scenarios.long_context.report import report_text
from sim.scenarios.long_context.runs import Context
from sim.scenarios.long_context.study import run_long_context
from sim.scenarios.long_context.text import fp8_phrase, memory_sentence


def study_of(engine: str, hardware: str = "h100-sxm", prompt: int = 1_000_000):
    lc = {"background": False, "architectures": [], "jobs": 1, "prompt_tokens": prompt}
    cfg = SimConfig.from_mapping(
        {"engine": engine, "model": "llama-4-scout-17b-16e", "hardware": hardware,
         "parallel": {"tp": 8}, "long_context": lc}
    )  # fmt: skip
    return run_long_context(cfg)


@pytest.mark.parametrize("engine", ["vllm@0.8.3", "vllm@0.8.5"])
def test_fp8_kv_doubles_the_context_that_fits_and_says_so(engine):
    """The issue's command (vLLM 0.8.3, Llama-4-Scout, 8 x H100, 1M tokens): V1 takes FP8 KV
    on Hopper from 0.8.2, so the plan is the bf16 one and the longest context doubles."""
    study = study_of(engine)
    m = study.memory
    assert m.fits_fp8_kv and not m.why_not_fp8_kv and not m.fp8_kv_refused
    assert m.kv_pool_bytes_per_gpu_fp8_kv == m.kv_pool_bytes_per_gpu
    assert m.max_context_tokens_fp8_kv == pytest.approx(2 * m.max_context_tokens, abs=2)
    sentence = memory_sentence(study)
    assert f"({m.max_context_tokens_fp8_kv:,} with FP8 KV, 2.0× as many)" in sentence
    assert "none with FP8 KV" not in report_text(study, {})
    fp8 = study.remedies.fp8_kv
    assert fp8.max_context_tokens == m.max_context_tokens_fp8_kv and fp8.why_not == ""


def test_an_engine_refusing_fp8_kv_is_said_and_the_study_goes_on():
    """vLLM 0.8.3 on an A100 falls back to V0 with FP8 KV, and 0.8.3's V0 cannot build Llama
    4: the study of the bf16 run still answers, and says why FP8 KV holds none."""
    study = study_of("vllm@0.8.3", hardware="a100-80gb")
    m = study.memory
    assert m.fits and m.fp8_kv_refused and not m.fits_fp8_kv
    assert m.max_context_tokens_fp8_kv == 0 and "cannot serve" in m.why_not_fp8_kv
    assert "none with FP8 KV, which vllm@0.8.3 refuses here" in memory_sentence(study)
    report = report_text(study, {})
    # the reason quotes file names (`_is_v1_...`, `*.py`): escaped, so they read as text
    assert f"| why not with FP8 KV | {md_inline(m.why_not_fp8_kv)} |" in report
    assert "**FP8 KV** (kv_cache_dtype=fp8): the engine refuses it here." in report
    assert study.remedies.fp8_kv.ttft_s is None


def test_any_refusal_of_fp8_kv_is_reported_not_raised(monkeypatch):
    """Whatever the rule that refuses it: the reason is the engine's own line."""
    fit = Context.fit

    def refusing(self, tp, pp=1, cp=1, **changes):
        if changes.get("kv_cache_dtype") == "fp8":
            raise UserError("kv_cache_dtype=fp8: not on this engine (a test's refusal)")
        return fit(self, tp, pp, cp, **changes)

    monkeypatch.setattr(Context, "fit", refusing)
    study = study_of("vllm@0.8.5", prompt=131_072)
    assert (
        study.memory.why_not_fp8_kv == "kv_cache_dtype=fp8: not on this engine (a test's refusal)"
    )
    assert "which vllm@0.8.5 refuses here" in fp8_phrase(study)


def test_none_with_fp8_kv_names_the_real_reason():
    study = study_of("vllm@0.8.5", prompt=131_072)
    m = study.memory
    no_room = replace(
        m,
        max_context_tokens_fp8_kv=0,
        kv_pool_bytes_per_gpu_fp8_kv=0,
        fits_fp8_kv=False,
        why_not_fp8_kv="no memory left for the KV cache ...",
    )
    text = fp8_phrase(replace(study, memory=no_room))
    assert text.startswith("none with FP8 KV: with it the memory plan leaves no room")
    tiny = replace(no_room, kv_pool_bytes_per_gpu_fp8_kv=1000, why_not_fp8_kv="one sequence needs")
    assert fp8_phrase(replace(study, memory=tiny)) == "none with FP8 KV: one sequence needs"
    assert re.fullmatch(r"[\d,]+ with FP8 KV, 2\.0× as many", fp8_phrase(study))
