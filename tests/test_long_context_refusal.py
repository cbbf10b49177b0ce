"""scenario=long_context refuses a length beyond the model's maximum context (issue 41, item 7:
`long_context.prompt_tokens=20000000` ran silently for over 5 minutes): one line, exit 2,
before anything runs, saying how to study a longer context."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace

import pytest

from sim.cli import compose_config, to_sim_config
from sim.config import SimConfig
from sim.errors import UserError
from sim.scenarios.long_context.runs import Context
from sim.scenarios.long_context.scenario import LongContext
from sim.scenarios.long_context.traffic import traffic_variants


def config(model: str, prompt: int, extend: int | None = None) -> SimConfig:
    lc = {"prompt_tokens": prompt, "extend_context_to": extend, "background": False,
          "architectures": [], "adapt_tp": True}  # fmt: skip
    return SimConfig.from_mapping({"task": "long_context", "model": model, "parallel": {"tp": 8},
                                   "long_context": lc})  # fmt: skip


def test_twenty_million_tokens_are_refused_at_once(tmp_path):
    cmd = [sys.executable, "-m", "sim", "scenario=long_context", f"hydra.run.dir={tmp_path}",
           "long_context.prompt_tokens=20000000"]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert time.monotonic() - started < 30
    line = done.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "20,000,256 tokens exceed llama-3.1-8b's maximum context, 131,072 tokens" in line
    assert "long_context.extend_context_to=20000256" in line  # how to study it anyway
    assert "none in the catalogue is: the longest, llama-4-scout-17b-16e, 10,485,760" in line
    assert not (tmp_path / "summary.json").exists()


def test_the_models_own_maximum_without_an_extension():
    check = LongContext().check
    with pytest.raises(UserError) as exc:  # 1,048,576 + 256 > Qwen2.5-1M's 1,010,000
        check(config("qwen2.5-7b-instruct-1m", 1_048_576))
    text = str(exc.value)
    assert "qwen2.5-7b-instruct-1m's maximum context, 1,010,000 tokens" in text
    assert "long_context.extend_context_to=1048832" in text
    assert "(llama-4-scout-17b-16e: 10,485,760)" in text  # a catalogue model trained for it
    check(config("qwen2.5-7b-instruct-1m", 1_000_000))  # within its own: accepted
    check(config("qwen2.5-7b-instruct-1m", 1_048_576, extend=1_048_832))  # extended: accepted


def test_an_extension_never_shortens_a_models_own_context():
    check = LongContext().check
    check(config("llama-4-scout-17b-16e", 4_000_000, extend=2_097_152))  # its own: 10,485,760
    with pytest.raises(UserError, match=r"and the 2,097,152 that long_context\.extend_context_to"):
        check(config("llama-3.1-8b", 4_000_000, extend=2_097_152))


def test_the_scenarios_default_is_accepted():
    """The scenario file's default (1,048,576 tokens on Llama-3.1-8B, trained to 131,072) is
    within its extend_context_to: the committed reports' commands still run."""
    overrides = ["scenario=long_context"]
    cfg = to_sim_config(compose_config(overrides), overrides)
    assert cfg.long_context.extend_context_to == 2_097_152
    LongContext().check(cfg)


def test_a_budget_whose_plan_cannot_hold_the_request_is_not_run():
    """Qwen2.5-7B-Instruct-1M at 1,010,000 tokens (its limit) on one H100: the engine's
    8,192-token budget leaves room for it, a 32,768-token budget's profile run does not (at
    1,000,000 tokens it does, since vLLM's forward peak is the larger of a layer's two phases).
    That traffic run is left out, with why, instead of the whole study failing after its other
    runs."""
    cfg = config("qwen2.5-7b-instruct-1m", 1_010_000)
    cfg = replace(cfg, parallel=replace(cfg.parallel, tp=1))
    ctx = Context.of(cfg)
    fit = ctx.fit(1)
    assert fit.fits
    run, not_run = traffic_variants(ctx, fit)
    assert [v.budget for v in run] == [2048, 8192, 8192]  # the last: with a cap per request
    assert len(not_run) == 1 and not_run[0].startswith("a budget of 32,768: one 1,010,256-token")
