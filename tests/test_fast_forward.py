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
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config import SimConfig
from sim.run.driver import check_conservation, run_loop, run_simpy
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
    # no prefix cache: runs admit the waiting requests themselves (Scheduler.admits_in_runs)
    "vllm-v1-no-prefix-caching": ["engine_args.enable_prefix_caching=false"],
    "vllm-v1-no-prefix-caching-short-of-blocks": [
        "engine_args.enable_prefix_caching=false",
        "engine_args.num_gpu_blocks_override=600",
        "engine_args.max_model_len=8192",
        "workload.rate=40",
    ],
    "vllm-v1-no-prefix-caching-small-budget": [
        "engine_args.enable_prefix_caching=false",
        "engine_args.scheduler_reserve_full_isl=false",
        "engine_args.max_num_batched_tokens=256",
        "engine_args.max_num_seqs=16",
        "engine_args.long_prefill_token_threshold=96",
        "workload.rate=30",
    ],
    "vllm-v1-no-prefix-caching-time-limit": [
        "engine_args.enable_prefix_caching=false",
        "max_sim_time_s=4",
    ],
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


def _simulated(ff_on: bool, workload: dict, engine_args: dict | None = None, simpy=False):
    """One replica priced by the prior, step by step or fast-forwarded, driven by the plain
    loop or by simpy: (the run's outcome, its step log, the engine); nothing lost."""
    cfg = SimConfig.from_mapping(
        {
            "cost_profile": "prior",
            "fast_forward": ff_on,
            "engine_args": engine_args or {},
            "workload": workload,
        }
    )
    log = StepLog()
    engines = Setup.from_config(cfg).engines(log)
    work = generate(cfg.workload, np.random.default_rng(0))
    outcome = run_simpy(work, engines) if simpy else run_loop(work, engines[0])
    check_conservation(outcome, engines)
    return outcome, log.frame(), engines[0]


def _lone_replica(ff_on: bool, engine_args: dict, counter: list[int], **workload):
    """_simulated through simpy (a lone replica takes its own arrivals when fast-forwarded),
    lognormal lengths around 300 tokens in: (outcome, step log, engine, counter[0] as the
    run left it, from 0)."""
    counter[0] = 0
    work = {"input_len": 300, "length_dist": "lognormal"} | workload
    outcome, frame, engine = _simulated(ff_on, work, engine_args, simpy=True)
    return outcome, frame, engine, counter[0]


# a lone replica's request records, as a client sees them
SENT_FIELDS = (
    "arrival_s",
    "first_scheduled_s",
    "first_token_s",
    "finish_s",
    "output_tokens",
    "status",
)


def _same_records(a, b, *fields: str) -> None:
    """Two runs' request records hold the same bytes in each of `fields`."""
    for field in fields:
        assert getattr(a, field).tobytes() == getattr(b, field).tobytes(), field


@pytest.fixture
def single_steps(monkeypatch) -> list[int]:
    """A counter (its one item) of the steps simulated alone (Engine.step calls)."""
    import sim.run.engine as engine_module

    count = [0]
    step = engine_module.Engine.step

    def stepped(self, now):
        count[0] += 1
        return step(self, now)

    monkeypatch.setattr(engine_module.Engine, "step", stepped)
    return count


def test_plain_loop_fast_forwards_the_same():
    """The plain-loop driver (no simpy) gives the same requests and steps both ways."""
    frames = []
    for ff in (False, True):
        outcome, frame, engine = _simulated(
            ff, {"num_requests": 80, "rate": 10.0, "input_len": 300}
        )
        frames.append((outcome.records, frame, engine.num_fast_forwarded_steps))
    (ra, sa, na), (rb, sb, nb) = frames
    assert na == 0 and nb > 0
    assert sa.equals(sb)
    _same_records(ra, rb, "finish_s", "first_token_s", "output_tokens", "status")


@pytest.mark.parametrize("small", [0, 10**9])
def test_both_ways_of_pricing_a_run_agree(small, tmp_path, monkeypatch):
    """Runs priced in one numpy call (small=0) or step by step in Python (all runs small)."""
    monkeypatch.setattr("sim.run.run_rows.PYTHON_ROWS", small)
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
    finish = ff.Run.finish
    monkeypatch.setattr(
        ff.Run, "finish", lambda run, done: (finishes.append(len(done)), finish(run, done))[1]
    )

    def run(ff_on: bool, **workload):
        base = {"num_requests": 80, "rate": 10.0, "input_len": 300}
        outcome, frame, engine = _simulated(ff_on, base | workload)
        return outcome.records, frame, engine

    (ra, sa, _), (rb, sb, engine) = run(False), run(True)
    assert engine.finish_inside_runs and sum(finishes) > 20
    assert sa.equals(sb)
    _same_records(ra, rb, "finish_s", "first_token_s", "output_tokens", "status")
    finishes.clear()
    _, _, capped = run(True, kind="closed_loop", concurrency=8)
    assert not capped.finish_inside_runs and not finishes


@pytest.mark.parametrize(
    ("reserve", "blocks", "preempts"),
    [(True, 2000, False), (False, 2000, False), (True, 260, True)],
)
def test_runs_admit_the_waiting_requests_without_a_prefix_cache(
    monkeypatch, single_steps, reserve, blocks, preempts
):
    """Without a prefix cache a fast-forwarded run admits the waiting requests itself (vLLM
    V1's FCFS admission: each a chunk of min(threshold, budget), while sequence slots and
    blocks allow): the same requests and steps as step by step, with few steps stepped alone
    where blocks suffice, and with a pool short enough to preempt (preempted requests are
    admitted again, in runs where the blocks allow)."""
    import sim.run.fast_forward as ff

    admitted, single = [], single_steps
    plan = ff._admissions

    def counted(*args):
        got = plan(*args)
        admitted.append(len(got or ()))
        return got

    monkeypatch.setattr(ff, "_admissions", counted)

    def run(ff_on: bool):
        engine_args = {
            "enable_prefix_caching": False,
            "scheduler_reserve_full_isl": reserve,
            "num_gpu_blocks_override": blocks,
            "max_model_len": 4096,
            "max_num_batched_tokens": 256,
            "max_num_seqs": 24,
            "long_prefill_token_threshold": 100,
        }
        workload = {"num_requests": 160, "rate": 20.0, "input_len": 300}
        outcome, frame, engine = _simulated(ff_on, workload, engine_args)
        return outcome.records, frame, engine

    (ra, sa, a), steps_alone = run(False), single[0]
    single[0] = 0
    rb, sb, b = run(True)
    # the same blocks taken and freed in the same order (runs hand out a stretch's at once)
    assert list(a.kv.pool.free_queue) == list(b.kv.pool.free_queue)
    assert (a.scheduler.num_preemptions > 0) == preempts
    assert sum(admitted) > 40, admitted
    if not preempts:
        assert single[0] < steps_alone / 5, (single[0], steps_alone)
    assert sa.equals(sb)
    _same_records(
        ra, rb, "finish_s", "first_token_s", "first_scheduled_s", "output_tokens", "status"
    )


@pytest.mark.parametrize(("blocks", "max_steps"), [(None, 2048), (260, 2048), (None, 7)])
def test_a_lone_replica_sends_its_own_arrivals_inside_runs(monkeypatch, blocks, max_steps):
    """One replica without a prefix cache, a concurrency cap or a time limit: run_simpy hands
    it its arrivals (Engine.takes_arrivals), so runs go on past them, admitting them as they
    come, and a few calls cover the whole workload (with blocks to spare); requests rejected
    on arrival inside runs are counted; with a pool short enough to preempt, the steps after
    runs (and after runs cut at MAX_RUN_STEPS) see the requests that arrived by then. The
    requests, steps and gaps between tokens are those of step by step."""
    import sim.run.engine as engine_module
    from sim.workload.records import merged

    calls = [0]
    advance = engine_module.Engine.advance

    def counted(self, now, horizon, feed=None):
        calls[0] += 1
        return advance(self, now, horizon, feed)

    monkeypatch.setattr(engine_module.Engine, "advance", counted)
    monkeypatch.setattr("sim.run.fast_forward.MAX_RUN_STEPS", max_steps)

    def run(ff_on: bool):
        engine_args = {
            "enable_prefix_caching": False,
            "max_model_len": 900,
            "num_gpu_blocks_override": blocks,
        }
        return _lone_replica(ff_on, engine_args, calls, num_requests=300, rate=20.0, output_len=120)

    (a, sa, ea, step_calls), (b, sb, eb, run_calls) = run(False), run(True)
    assert not ea.takes_arrivals and eb.takes_arrivals
    assert (eb.scheduler.num_preemptions > 0) == (blocks is not None)
    if blocks is None and max_steps > 100:
        assert run_calls * 20 < step_calls, (run_calls, step_calls)
    rejected = [r for r in b.requests if r.status.value == "rejected"]
    assert rejected and a.end_s == b.end_s
    assert sa.equals(sb)
    _same_records(a.records, b.records, *SENT_FIELDS)
    for x, y in zip(merged([ea.scheduler.itl]), merged([eb.scheduler.itl]), strict=True):
        assert x.tobytes() == y.tobytes()


def test_admitting_runs_go_on_past_finishes_while_requests_wait(monkeypatch, single_steps):
    """A run that admits plans the waiting queue's use of the sequence slot and blocks a
    finish frees: with the batch full and requests waiting, runs go on past finishes (the
    next step admits into the freed slots), few steps are stepped alone, and the requests,
    steps and pool are those of step by step."""
    import sim.run.fast_forward as ff

    waiting, single = [], single_steps
    finish = ff.Run.finish
    monkeypatch.setattr(
        ff.Run, "finish", lambda run, done: (waiting.append(run.waiting_left), finish(run, done))[1]
    )

    def run(ff_on: bool):
        engine_args = {"enable_prefix_caching": False, "max_num_seqs": 8}
        return _lone_replica(ff_on, engine_args, single, num_requests=200, rate=40.0, output_len=60)

    (a, sa, ea, alone), (b, sb, eb, stepped_alone) = run(False), run(True)
    assert sum(waiting) > 50, sum(waiting)  # finishes planned while requests waited
    assert max(sb["num_waiting"]) > 20 and alone > 1000
    assert stepped_alone <= 2, stepped_alone  # the whole workload in one run (or two)
    assert list(ea.kv.pool.free_queue) == list(eb.kv.pool.free_queue)
    assert sa.equals(sb)
    _same_records(a.records, b.records, *SENT_FIELDS)


def test_runs_leave_big_batches_to_the_lane(monkeypatch):
    """A run plans admissions (in Python, request by request) only below LANE_MIN running
    requests: from there on vLLM V1's lane schedules the steps, a lone replica's runs stopping
    at arrivals again; the same bytes as step by step."""
    import sim.run.fast_forward as ff
    from sim.schedulers import vllm_v1

    monkeypatch.setattr(vllm_v1, "LANE_MIN", 8)
    batches = []
    plan = ff._admissions

    def counted(sched, run, *args):
        batches.append(len(run.alive))
        return plan(sched, run, *args)

    monkeypatch.setattr(ff, "_admissions", counted)

    def run(ff_on: bool):
        engine_args = {"enable_prefix_caching": False, "max_num_seqs": 24}
        workload = {"num_requests": 200, "rate": 40.0, "input_len": 300}
        return _simulated(ff_on, workload, engine_args, simpy=True)

    (a, sa, _), (b, sb, eb) = run(False), run(True)
    assert batches and max(batches) < 8, max(batches)
    assert max(sb["num_running"]) > 16 and eb.num_fast_forwarded_steps > 0
    assert sa.equals(sb)
    _same_records(a.records, b.records, "arrival_s", "first_token_s", "finish_s", "output_tokens")


@settings(max_examples=300, deadline=None)
@given(
    now=st.floats(0, 1e7, allow_nan=False),
    ahead=st.floats(0, 1e7, allow_nan=False),
)
def test_a_wait_until_lands_on_the_time_itself(now, ahead):
    """delay_until: a process waiting from `now` wakes at `t` exactly (simpy adds the delay)."""
    from sim.run.driver import delay_until

    t = now + ahead
    d = delay_until(now, t)
    assert d >= 0 and now + d == t
