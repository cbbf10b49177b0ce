"""Speculative decoding: tokens per verify step, the verify and draft costs, memory, defaults
and refusals."""

from __future__ import annotations

import numpy as np
import pytest

from sim.engines.speculative import accepted
from sim.errors import UserError
from sim.run.setup import Setup
from sim.run.simulate import simulate
from sim.schedulers.base import StepPlan
from tests.conftest import config

PROMPT, OUTPUT, K = 512, 33, 3


def _one(method: str = "eagle", **args):
    """One request (prompt 512, 33 output tokens) alone on the engine."""
    engine_args = {"speculative_method": method, **args}
    if method != "none":
        engine_args.setdefault("num_speculative_tokens", K)
    return config(
        {"num_requests": 1, "input_len": PROMPT, "output_len": OUTPUT}, engine_args=engine_args
    )


def test_acceptance_one_emits_k_plus_one_tokens_every_step():
    r = simulate(_one(spec_acceptance=1.0))
    steps = r.steps
    # the prefill step gives the first token; then 32 tokens, 4 a step: 8 verify steps
    assert len(steps) == 1 + (OUTPUT - 1) // (K + 1)
    assert (steps["decode_tokens"].iloc[1:] == K + 1).all()
    assert r.requests["output_tokens"].iloc[0] == OUTPUT
    _gaps, counts = r.itl
    assert counts.sum() == len(steps) - 1  # one gap per step: its tokens arrive together


def test_acceptance_zero_is_plain_decoding_plus_the_verify_and_draft_cost():
    spec, plain = simulate(_one(spec_acceptance=0.0)), simulate(_one("none"))
    assert len(spec.steps) == len(plain.steps) == OUTPUT  # one token a step, as without it
    np.testing.assert_array_equal(spec.requests["output_tokens"], plain.requests["output_tokens"])
    assert spec.steps["duration_s"].iloc[0] == plain.steps["duration_s"].iloc[0]  # prefill
    # each later step: the verify pass over 1 + k tokens, its LM head over every position,
    # and the proposer's k passes; the drafts near the end shrink to what the answer has left
    setup = Setup.from_config(spec.setup.config)
    cost = setup.cost_model()
    req = spec.workload.request(0)
    rows = spec.steps.iloc[1:]
    for j, (gpu_s, dt) in enumerate(zip(rows["gpu_s"], rows["duration_s"], strict=True)):
        out = j + 1
        drafts = min(K, OUTPUT - out - 1)
        context = PROMPT + out - 1
        plan = StepPlan([req], [1 + drafts], [context], 0, 1 + drafts, 0,
                        spec_drafts=(drafts,))  # fmt: skip
        assert gpu_s == cost.step_cost(plan).gpu_s  # to the bit
        assert dt == pytest.approx(cost.step_cost(plan).total_s, rel=1e-12)  # end - start
        if drafts:
            no_draft = StepPlan([req], [1], [context], 0, 1, 0)
            assert cost.step_cost(plan).draft_s > 0
            assert cost.step_cost(plan).gpu_s > cost.step_cost(no_draft).gpu_s


def test_accepted_drafts_follow_the_profile():
    rng = np.random.default_rng(0)
    probs = np.array([0.8, 0.5, 0.5])
    counts = np.bincount(accepted(rng, probs, [3] * 40_000), minlength=4) / 40_000
    expected = [0.2, 0.8 * 0.5, 0.8 * 0.5 * 0.5, 0.8 * 0.5 * 0.5]
    np.testing.assert_allclose(counts, expected, atol=0.01)
    assert accepted(rng, probs, [0, 1])[0] == 0


def test_speculation_speeds_up_decoding_and_is_deterministic():
    cfg = config({"num_requests": 40, "rate": 5.0, "output_len": 128},
                 engine_args={"speculative_method": "eagle"})  # fmt: skip
    a, b = simulate(cfg), simulate(cfg)
    off = simulate(config({"num_requests": 40, "rate": 5.0, "output_len": 128}))
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps)
    assert a.summary["mean_tpot_ms"] < off.summary["mean_tpot_ms"]
    assert a.summary["sim"]["conservation"]["finished"] == 40
    assert a.summary["engine_settings"]["spec_acceptance"]["value"] == [0.75]


def test_the_proposer_takes_memory():
    blocks = {m: Setup.from_config(_one(m)).memory.num_blocks for m in ("none", "ngram", "eagle")}
    assert blocks["ngram"] == blocks["none"] > blocks["eagle"]
    big = config(
        {"num_requests": 1},
        model="llama-3.1-70b",
        parallel={"tp": 4},
        engine_args={"speculative_method": "draft_model", "speculative_model": "llama-3.1-8b"},
    )
    plain = config({"num_requests": 1}, model="llama-3.1-70b", parallel={"tp": 4})
    assert Setup.from_config(big).memory.num_blocks < Setup.from_config(plain).memory.num_blocks


def test_vllm_turns_it_on_for_mtp_models_from_0_33():
    def method(engine):
        cfg = config(model="deepseek-v3", hardware="h200", parallel={"tp": 8}, engine=engine)
        return Setup.from_config(cfg).settings

    new, old = method("vllm@0.33.0"), method("vllm@0.12.0")
    assert (new.speculative_method, new.num_speculative_tokens) == ("mtp", 1)
    assert new.spec_acceptance == (0.85,)
    assert old.speculative_method == "none"
    assert Setup.from_config(config(engine="vllm@0.33.0")).settings.speculative_method == "none"


@pytest.mark.parametrize(
    ("top", "match"),
    [
        ({"engine": "sglang", "engine_args": {"speculative_method": "eagle"}}, "vLLM's V1"),
        ({"engine_args": {"speculative_method": "mtp"}}, "no multi-token-prediction"),
        ({"engine_args": {"speculative_method": "draft_model"}}, "needs a draft model"),
        ({"engine_args": {"speculative_method": "eagle", "spec_acceptance": 1.5}}, r"\[0, 1\]"),
        ({"engine_args": {"speculative_method": "medusa"}}, "choose one of"),
        ({"engine_args": {"speculative_method": "eagle"}, "parallel": {"pp": 2}}, "pipeline"),
    ],
)
def test_impossible_speculation_is_refused(top, match):
    with pytest.raises(UserError, match=match):
        Setup.from_config(config(**top))
