"""SGLang's enable_mixed_chunk and its overlap scheduler's one-step planning lag (issue 43):
a closed loop's clients, all sent at once, drift apart when decodes ride in the prefill steps,
and a request that reaches the engine while a step runs waits for the step after the next."""

from __future__ import annotations

import numpy as np
import pytest

from sim.run.driver import check_conservation, run_simpy
from sim.run.metrics import StepLog
from sim.run.setup import Setup
from sim.scenarios.validate.importers.silicon import launch_args
from sim.workload.generate import generate
from tests.conftest import config

LOOP = {"kind": "closed_loop", "concurrency": 16, "num_requests": 64, "input_len": 2000}
LAUNCH = {"max_prefill_tokens": 3500}  # AIConfigurator's generator: ISL + 1500


def _run(engine_args: dict, workload: dict | None = None):
    cfg = config(
        LOOP | {"output_len": 64} | (workload or {}),
        engine="sglang@0.5.9",
        hardware="h200",
        model="llama-3.1-8b",
        engine_args=engine_args,
    )
    setup = Setup.from_config(cfg)
    work = generate(cfg.workload, np.random.default_rng(cfg.seed))
    log = StepLog()
    engines = setup.engines(log)
    outcome = run_simpy(work, engines)
    check_conservation(outcome, engines)
    reqs = sorted(outcome.requests, key=lambda r: r.request_id)
    return setup.settings, reqs, log.frame()


def test_mixed_chunk_is_off_by_default_and_named_as_sglang_names_it():
    settings, _, _ = _run({})
    assert settings.enable_mixed_chunk is False
    assert "enable_mixed_chunk" in settings.applicable
    on, _, _ = _run({"enable_mixed_chunk": True})
    assert on.enable_mixed_chunk is True
    assert on.rules["enable_mixed_chunk"] == "user override (engine_args.enable_mixed_chunk)"


@pytest.mark.parametrize("mixed", [False, True])
def test_decodes_ride_in_prefill_steps_only_when_mixed(mixed):
    _, _, steps = _run({"enable_mixed_chunk": mixed, "chunked_prefill_size": 4096})
    both = steps[(steps.prefill_tokens > 0) & (steps.decode_tokens > 0)]
    assert (len(both) > 0) == mixed
    if mixed:  # each running request's decode takes a token of the step's chunk
        assert (both.prefill_tokens + both.decode_tokens <= 4096).all()
        assert (both.prefill_tokens + both.decode_tokens == 4096).any()


def test_mixed_steps_let_a_closed_loop_drift_apart():
    """Without mixing, decodes wait for the whole burst of prompts, the clients finish
    together and every wave queues behind the others' prompts; mixed, each finishes a step
    after the one before, and a later request waits for about three steps (overlap), not
    for the burst."""
    _, apart, _ = _run(LAUNCH)
    _, mixed, steps = _run(LAUNCH | {"enable_mixed_chunk": True})
    ttft = lambda reqs: np.array([r.first_token_s - r.arrival_s for r in reqs])  # noqa: E731
    later_apart, later_mixed = ttft(apart[16:]), ttft(mixed[16:])
    assert later_mixed.mean() < 0.7 * later_apart.mean()
    assert len({round(r.finish_s, 9) for r in apart[:16]}) <= 2  # the wave leaves at once
    finishes = {round(r.finish_s, 9) for r in mixed[:16]}
    assert len(finishes) >= 8  # mixed, it leaves a step or two at a time
    prefill_step = steps[steps.prefill_tokens >= 2000].duration_s.max()
    assert later_mixed.max() <= 4 * prefill_step


def test_the_overlap_scheduler_plans_a_step_ahead():
    """A client's next request, sent as its last token leaves while others run, is first
    prefilled two steps later under the overlap scheduler (its first token three steps after
    the send), in the next step without it; an idle engine plans it at once."""
    four = {"concurrency": 4, "num_requests": 16, "output_len": 16}
    for overlap, lag in ((True, 2), (False, 0)):
        args = LAUNCH | {"disable_overlap_schedule": not overlap}
        args["enable_mixed_chunk"] = True  # mixed, the clients drift apart at once
        _, reqs, steps = _run(args, four)
        starts = list(np.round(steps.start_s.to_numpy(), 12))
        running = steps.num_running.to_numpy()
        lags = []
        for r in reqs[4:]:  # each sent when its client's request before it finished
            sent = starts.index(round(r.arrival_s, 12))
            if running[sent] > 0:  # others still run after that step: the engine is busy
                lags.append(starts.index(round(r.first_scheduled_s, 12)) - sent)
        assert lags and lags == [lag] * len(lags)
    _, reqs, _ = _run({}, {"concurrency": 1, "num_requests": 2, "output_len": 4})
    assert reqs[1].first_scheduled_s == reqs[1].arrival_s  # nothing else runs: at once


def test_silicon_rows_launch_sglang_as_the_generator_does_from_0_5_6():
    launch = launch_args("sglang", 8, 1024, 128, "0.5.9")
    assert launch == {
        "max_num_seqs": 8,
        "max_prefill_tokens": 1024 + 1500,
        "enable_mixed_chunk": True,
    }
    assert launch_args("sglang", 8, 1024, 128, "0.5.6.post2") == launch
    # a release out before the generator ran SGLang keeps SGLang's defaults
    assert launch_args("sglang", 8, 1024, 128, "0.5.1.post1") == {}


def test_a_burst_larger_than_a_step_is_planned_step_after_step():
    """The requests of a burst that woke an idle engine were all waiting when it planned its
    first step, so the overlap scheduler's plan for the second (made as the first starts)
    sees the rest of them: each step prefills the next ones, none skipped (they waited a
    step more when the second plan saw only what was sent before that moment)."""
    _, reqs, steps = _run(LAUNCH, {"concurrency": 8, "num_requests": 8})
    starts = list(np.round(steps.start_s.to_numpy(), 12))
    firsts = sorted({starts.index(round(r.first_scheduled_s, 12)) for r in reqs})
    assert len(firsts) > 2 and firsts == list(range(len(firsts)))
    assert (steps.prefill_tokens.to_numpy()[: len(firsts)] > 0).all()
