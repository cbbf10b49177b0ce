"""Fast-forward changes nothing: step-by-step and fast-forwarded runs write the same bytes.

Each case runs the whole command path twice, with fast_forward=false and true, and compares
every output file; summary.json may differ only in the wall time, the config's fast_forward
flag and the count of fast-forwarded steps. Each case must also really fast-forward, or the
comparison would prove nothing.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from sim.config import SimConfig
from sim.run.driver import run_loop
from sim.run.metrics import StepLog
from sim.run.setup import Setup
from sim.workload.generate import generate
from tests.conftest import RUN_FILES
from tests.test_determinism import _run

CASES = {
    "vllm-v1-poisson": [],
    "vllm-v1-prefix-sharing": ["scenario=prefix_sharing"],
    "vllm-v1-closed-loop-warmup": [
        "workload=closed_loop",
        "workload.concurrency=24",
        "workload.warmup_requests=20",
    ],
    "vllm-v1-time-limit": ["max_sim_time_s=4"],
    "vllm-v1-short-of-blocks": [
        "engine_args.num_gpu_blocks_override=600",
        "engine_args.max_model_len=8192",
        "workload.rate=40",
    ],
    "vllm-v1-two-replicas": ["parallel.dp=2"],
    "vllm-v1-priority": ["engine_args.scheduling_policy=priority", "workload.priority_levels=3"],
    "vllm-v0": ["engine=vllm@0.6.6"],
    "vllm-v0-multi-step": ["engine=vllm@0.6.6", "engine_args.num_scheduler_steps=8"],
    "sglang": ["engine=sglang"],
    "sglang-batch-full": ["engine=sglang", "engine_args.max_running_requests=8"],
    "trtllm": ["engine=trtllm"],
    "trtllm-chunked-context": [
        "engine=trtllm",
        "engine_args.enable_chunked_prefill=true",
        "engine_args.max_num_batched_tokens=512",
    ],
    "trtllm-chunked-max-utilization": [
        "engine=trtllm",
        "engine_args.enable_chunked_prefill=true",
        "engine_args.max_num_batched_tokens=512",
        "engine_args.capacity_scheduler_policy=MAX_UTILIZATION",
        "engine_args.num_gpu_blocks_override=600",
        "engine_args.max_model_len=8192",
        "workload.rate=40",
    ],
    "orca": ["engine=orca"],
    # bounded windows (gpt-oss: 128-token sliding layers beside full ones, vLLM >= 0.9.1): a
    # request holds MemoryPlan.blocks_for(tokens) blocks, not one per block_size tokens
    "vllm-v1-sliding-window": ["model=gpt-oss-20b"],
    "vllm-v1-sliding-window-short-of-blocks": [
        "model=gpt-oss-20b",
        "engine_args.num_gpu_blocks_override=400",
        "engine_args.max_model_len=8192",
        "workload.rate=40",
    ],
    "vllm-v1-sliding-window-prefix-sharing": ["model=gpt-oss-20b", "scenario=prefix_sharing"],
    # disaggregated: the decode replicas fast-forward, admitting KV transfers between steps
    "vllm-v1-disagg-short-of-blocks": [
        "scenario=disagg",
        "task=simulate",
        "disagg.enabled=true",
        "disagg.prefill.replicas=2",
        "engine_args.num_gpu_blocks_override=700",
        "engine_args.max_model_len=8192",
        "workload.rate=30",
    ],
}


@pytest.mark.parametrize("name", list(CASES))
def test_fast_forward_gives_the_same_bytes(name, tmp_path, monkeypatch):
    common = ["output.report=true", "workload.num_requests=120", *CASES[name]]
    step = _run(tmp_path, "step", monkeypatch, *common, "fast_forward=false")
    jump = _run(tmp_path, "jump", monkeypatch, *common, "fast_forward=true")
    files = sorted(p.name for p in step.iterdir() if p.is_file() and p.name != "summary.json")
    assert set(RUN_FILES[1:]) <= set(files) or "disagg" in name
    assert files == sorted(
        p.name for p in jump.iterdir() if p.is_file() and p.name != "summary.json"
    )
    for file in files:
        assert (step / file).read_bytes() == (jump / file).read_bytes(), file
    a, b = (json.loads((d / "summary.json").read_text()) for d in (step, jump))
    assert a["sim"]["fast_forwarded_steps"] == 0
    assert b["sim"]["fast_forwarded_steps"] > 0, "nothing was fast-forwarded"
    for s in (a, b):
        for key in ("wall_time_s", "cpu_time_s", "fast_forwarded_steps"):
            s["sim"].pop(key)
        s["config"].pop("fast_forward")
    assert a == b


def test_plain_loop_fast_forwards_the_same():
    """The plain-loop driver (no simpy) gives the same requests and steps both ways."""
    frames = []
    for ff in (False, True):
        cfg = SimConfig.from_mapping(
            {
                "cost_profile": "prior",
                "fast_forward": ff,
                "workload": {"num_requests": 80, "rate": 10.0, "input_len": 300},
            }
        )
        setup = Setup.from_config(cfg)
        log = StepLog()
        engine = setup.engines(log)[0]
        outcome = run_loop(generate(cfg.workload, np.random.default_rng(0)), engine)
        frames.append((outcome.records, log.frame(), engine.num_fast_forwarded_steps))
    (ra, sa, na), (rb, sb, nb) = frames
    assert na == 0 and nb > 0
    assert sa.equals(sb)
    for field in ("finish_s", "first_token_s", "output_tokens", "status"):
        assert (getattr(ra, field).tobytes()) == getattr(rb, field).tobytes(), field


@pytest.mark.parametrize("small", [0, 10**9])
def test_both_ways_of_pricing_a_run_agree(small, tmp_path, monkeypatch):
    """Runs priced in one numpy call (small=0) or step by step in Python (all runs small)."""
    monkeypatch.setattr("sim.run.fast_forward.PYTHON_ROWS", small)
    common = ["output.report=false", "workload.num_requests=120", "scenario=multi_turn"]
    step = _run(tmp_path, "step", monkeypatch, *common, "fast_forward=false")
    jump = _run(tmp_path, "jump", monkeypatch, *common, "fast_forward=true")
    for file in ("requests.parquet", "steps.parquet"):
        assert (step / file).read_bytes() == (jump / file).read_bytes(), file


def test_runs_go_on_past_finishes_where_nothing_waits(monkeypatch):
    """Open-loop traffic without a time limit: fast-forwarded runs carry on past the steps that
    finish requests (fewer steps stepped alone), and the result is the same as step by step.
    With a concurrency cap or a time limit a finish is an event, and runs stop before it."""
    import sim.run.fast_forward as ff

    finishes = []
    finish = ff._Run.finish
    monkeypatch.setattr(
        ff._Run, "finish", lambda run, done: (finishes.append(len(done)), finish(run, done))[1]
    )

    def run(ff_on: bool, **workload):
        cfg = SimConfig.from_mapping(
            {
                "cost_profile": "prior",
                "fast_forward": ff_on,
                "workload": {"num_requests": 80, "rate": 10.0, "input_len": 300} | workload,
            }
        )
        setup = Setup.from_config(cfg)
        log = StepLog()
        engine = setup.engines(log)[0]
        outcome = run_loop(generate(cfg.workload, np.random.default_rng(0)), engine)
        return outcome.records, log.frame(), engine

    (ra, sa, _), (rb, sb, engine) = run(False), run(True)
    assert engine.finish_inside_runs and sum(finishes) > 20
    assert sa.equals(sb)
    for field in ("finish_s", "first_token_s", "output_tokens", "status"):
        assert getattr(ra, field).tobytes() == getattr(rb, field).tobytes(), field
    finishes.clear()
    _, _, capped = run(True, kind="closed_loop", concurrency=8)
    assert not capped.finish_inside_runs and not finishes
