"""One simulation on colocated replicas (prefill and decode on the same GPUs): the workload
generated, the replicas driven through simulated time (sim/run/driver.py), conservation
checked, and the run measured."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd

from sim.config import SimConfig
from sim.cost.first_use import first_use_record
from sim.errors import UserError
from sim.run.audit import PhysicsAudit, audit_record, longest_request
from sim.run.calibration import run_record, with_terms
from sim.run.delivery import in_process_view
from sim.run.driver import Progress, check_conservation, run_simpy
from sim.run.engine import warm_prefix_caches
from sim.run.findings import enforce
from sim.run.metrics import StepLog, requests_frame, sim_figures
from sim.run.outputs import ParquetChunks
from sim.run.overview import of_file
from sim.run.phases import PhaseLog
from sim.run.setup import Setup
from sim.run.summary import (
    RunResult,
    bench_header,
    clock,
    elapsed,
    headline,
    offload_record,
    requests_record,
)
from sim.schedulers.base import StepPlan
from sim.workload.generate import Workload, generate
from sim.workload.records import merged
from sim.workload.request import Request


def request_lifetime_s(setup: Setup, prompt: int, output: int, batch: int) -> float:
    """The cost model's estimate of one request's lifetime in a steady closed loop of `batch`
    requests per replica: its prompt prefilled in one step beside the others' decodes, then
    `output - 1` decode steps at the mean context."""
    cost = setup.cost_model()
    req = Request(0, 0.0, prompt, output, [], 1)
    others = batch - 1
    ctx = prompt + output // 2
    first = StepPlan(
        [req] * batch, [prompt] + [1] * others, [0] + [ctx] * others, prompt, others, 0
    )
    decode = StepPlan([req] * batch, [1] * batch, [ctx] * batch, 0, batch, 0)
    return cost.step_time_s(first) + (output - 1) * cost.step_time_s(decode)


def stagger_first_wave(workload: Workload, setup: Setup) -> Workload:
    """A closed loop whose first `concurrency` requests start evenly over one request lifetime
    (workload.stagger): the steady state a long benchmark drifts into, where prompts arrive
    one at a time, reached without simulating the drift."""
    c = workload.concurrency
    if not c:
        raise UserError("workload.stagger=true needs a closed loop (workload.concurrency)")
    c = min(c, len(workload))
    per_replica = max(1, -(-c // setup.config.parallel.dp))
    prompt = int(np.mean(workload.prompt_len[:c]))
    output = int(np.mean(workload.output_len[:c]))
    life = request_lifetime_s(setup, prompt, output, per_replica)
    gap = life / c
    arrival = np.maximum(workload.arrival_s, np.minimum(np.arange(len(workload)), c - 1) * gap)
    what = f"{workload.description}; first {c} spread over {life:.3g} s (one request lifetime)"
    return replace(workload, arrival_s=arrival, description=what)


STEP_COLUMNS = ["replica", "start_s", "duration_s"]  # what in_process_view reads
STREAM_FROM_REQUESTS = 100_000  # output.stream=null streams the steps of runs this long


def streams(cfg: SimConfig, num_requests: int) -> bool:
    """Whether a run writing into a run dir streams its steps there (output.stream)."""
    if cfg.output.stream is None:
        return num_requests >= STREAM_FROM_REQUESTS and not cfg.trace
    if cfg.output.stream and cfg.trace:
        raise UserError(
            "output.stream=true and trace=true: the timeline needs every step in memory; "
            "trace a shorter run, or leave output.stream unset"
        )
    return cfg.output.stream


def simulate_colocated(
    cfg: SimConfig,
    progress: Progress | None = None,
    setup: Setup | None = None,
    workload: Workload | None = None,
    run_dir: Path | None = None,
) -> RunResult:
    """Run `cfg` (with `setup` and `workload`, when given, in place of the ones its config
    resolves to and generates). With `run_dir`, a long run (see streams()) writes its
    steps.parquet there a chunk at a time as it goes."""
    started = clock()
    setup = setup or Setup.from_config(cfg)
    if workload is None:
        workload = generate(cfg.workload, np.random.default_rng(cfg.seed))
    if cfg.workload.stagger:
        workload = stagger_first_wave(workload, setup)
    if setup.terms is not None:  # a calibrated deployment's front end (sim/run/calibration.py)
        workload = with_terms(workload, setup.terms)
    g, b = workload.content_block_tokens, setup.memory.block_size
    if g % b and b % g:
        raise UserError(
            f"the workload's {g}-token content blocks do not align with KV blocks "
            f"of {b} tokens; use a block_size that divides or is a multiple of {g}"
        )
    stream = run_dir is not None and streams(cfg, len(workload))
    log = StepLog(ParquetChunks(run_dir / "steps.parquet")) if stream else StepLog()
    try:
        return _run(cfg, progress, setup, workload, log, started)
    except BaseException:
        if stream:  # no half-written steps.parquet
            log.sink.abort()
        raise


def _run(cfg, progress, setup: Setup, workload: Workload, log: StepLog, started) -> RunResult:
    phase_log = PhaseLog() if cfg.trace else None
    engines = setup.engines(log, phases=phase_log, measure_from=workload.warmup)
    log.audit = audit = PhysicsAudit(engines[0].cost, setup.memory, setup.hardware)
    if workload.cache_warm:
        warm_prefix_caches(engines, workload)
    outcome = run_simpy(
        workload,
        engines,
        until_s=cfg.max_sim_time_s,
        progress=progress,
        router=cfg.parallel.router,
        lockstep=setup.dp_lockstep,
    )
    tally = check_conservation(outcome, engines)
    requests = requests_frame(outcome.records, workload.priority)
    streamed = None
    if log.sink is not None:
        log.close()
        figures = log.figures(setup.memory.num_blocks)
        streamed = of_file(log.sink.path, figures["steps"], figures["sim_time_s"])
        steps = streamed.sample
    else:
        steps = log.frame()
        audit.check_steps(steps)
    if cfg.workload.client_in_process:  # the sampled steps of a streamed run will not do
        every = steps if log.sink is None else pd.read_parquet(log.sink.path, columns=STEP_COLUMNS)
        requests = in_process_view(requests, every, setup.settings)
    itl = merged([e.scheduler.itl for e in engines])  # warm-up requests' gaps left out
    summary, _, window = headline(cfg, workload, requests, itl)
    summary["sim"] = sim_figures(log, requests, setup.memory.num_blocks) | {
        **requests_record(requests, workload, window, outcome, tally),
        **setup.pricing.record(),
        "workload": workload.description,
        "fast_forwarded_steps": sum(e.num_fast_forwarded_steps for e in engines),
        "steps_streamed": log.sink is not None,
        "kv_offload": offload_record(engines),
        "first_use": first_use_record(
            [e.first_use for e in engines], _window_start(requests, workload.warmup)
        ),
        **elapsed(started),
    }
    summary |= bench_header(cfg, setup, workload)
    summary["config"] = asdict(cfg)
    summary["engine_settings"] = setup.settings.as_mapping()
    summary["memory_plan"] = setup.memory.record()
    if setup.calibration is not None:
        batch = summary["sim"].get("mean_batch_size")
        summary["calibration"] = run_record(setup.calibration, workload, batch)
    # after the pricing record above: the audit prices the run's shapes afresh
    audit.finish(setup.settings.scheduler, longest_request(workload))
    summary["audit"] = audit_record([audit])
    enforce(summary["audit"])
    phases = None
    if cfg.trace:
        finish = dict(zip(requests["request_id"].tolist(), requests["finish_s"].tolist(),
                          strict=True))  # fmt: skip
        phases = phase_log.frame(finish)
    return RunResult(setup, workload, requests, steps, summary, itl, phases, streamed)


def _window_start(requests: pd.DataFrame, warmup: int) -> float:
    """The measured window's start: its first measured request's arrival (warm-up left out)."""
    measured = requests[requests["request_id"] >= warmup]
    return float(measured["arrival_s"].min()) if len(measured) else float("inf")
