"""Shared helpers: small configs and a plain-loop engine run for the tests."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest

from sim.config import SimConfig
from sim.cost.prior import CostProfile
from sim.paths import SHARED_DATA_DIR
from sim.run.audit import PhysicsAudit, audit_record, longest_request
from sim.run.driver import run_loop
from sim.run.findings import STRICT_ENV, enforce
from sim.run.metrics import StepLog
from sim.run.setup import Setup
from sim.workload.generate import generate

# Every simulation of the suite, in this process or a child (python -m sim, joblib and Ray
# workers), raises AuditError on a figure beyond what the hardware allows (sim/run/audit.py);
# a test of the audit's own warning sets SIM_AUDIT otherwise for itself.
os.environ[STRICT_ENV] = "strict"

# Every file a run writes into its run dir (besides .hydra/).
RUN_FILES = (
    "summary.json",
    "requests.parquet",
    "steps.parquet",
    "report.md",
    "latency_cdf.png",
    "throughput_kv.png",
    "batch_composition.png",
)


def shared_data(relpath: str) -> Path:
    """A file under ../shared/data, or skip: a fresh clone has no shared folder (CI has it)."""
    path = SHARED_DATA_DIR / relpath
    if not path.exists():
        pytest.skip(f"needs ../shared/data/{relpath} (absent in a fresh clone; present in CI)")
    return path


def config(workload: dict | None = None, **top) -> SimConfig:
    """A small run. Mechanism tests price steps with the roofline prior (fast and enough for
    scheduling); tests of the calibrated cost model say cost_profile="auto"."""
    data = {
        "cost_profile": "prior",
        "workload": {
            "num_requests": 50,
            "rate": 20.0,
            "input_len": 256,
            "output_len": 32,
            "length_dist": "fixed",
            **(workload or {}),
        },
    }
    data.update(top)
    return SimConfig.from_mapping(data)


def unit_profile(**changes) -> CostProfile:
    """Every efficiency 1 and no launch cost: costs are the bare rooflines."""
    base = CostProfile.load("prior")
    values = {name: getattr(base, name) for name in base.__slots__}
    values.update(
        gemm_flops_efficiency=1.0,
        memory_bandwidth_efficiency=1.0,
        attention_prefill_flops_efficiency=1.0,
        attention_decode_bandwidth_efficiency=1.0,
        allreduce_bandwidth_efficiency=1.0,
        allreduce_latency_s=0.0,
        kernel_launch_s=0.0,
    )
    values.update(changes)
    return CostProfile(**values)


def run_plain(cfg: SimConfig, check_every_step: bool = False):
    """Drive one replica with the plain loop; returns (outcome, engine, workload)."""
    setup = Setup.from_config(cfg)
    workload = generate(cfg.workload, np.random.default_rng(cfg.seed))
    (engine,) = setup.engines(StepLog())
    if check_every_step:  # after every step, or every fast-forwarded run of steps
        advance = engine.advance

        def checked(now, horizon):
            out = advance(now, horizon)
            engine.scheduler.check_invariants()
            return out

        engine.advance = checked
    outcome = run_loop(workload, engine)
    audit = PhysicsAudit(engine.cost, setup.memory, setup.hardware)  # as simulate() audits
    audit.check_steps(engine.steps.frame())
    audit.finish(setup.settings.scheduler, longest_request(workload))
    enforce(audit_record([audit]))
    return outcome, engine, workload


def run_task_into(out: Path, monkeypatch, overrides) -> dict:
    """`python -m sim OVERRIDES hydra.run.dir=OUT` in this process: the runner's run_task on
    the composed config, with what it reads of HydraConfig stubbed to a single run into out."""
    from hydra.types import RunMode

    from sim.cli import compose_config
    from sim.scenarios.runner import run_task

    cfg = compose_config(list(overrides))

    class _Runtime:
        output_dir = str(out)

    class _Overrides:
        task = tuple(overrides)  # the command line (a parallel.tp there is the user's choice)

    class _Hydra:
        runtime = _Runtime()
        mode = RunMode.RUN
        overrides = _Overrides()

    monkeypatch.setattr("sim.scenarios.runner.HydraConfig.get", lambda: _Hydra())
    return run_task(cfg)


def as_terminal_job() -> None:
    """Popen's preexec_fn for a run signalled as a terminal's foreground job is: SIGINT at its
    default (a shell's background job, as this test may be, starts with it ignored) and a
    process group of its own, for os.killpg to reach its workers too."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.setsid()
