"""One simulation from a SimConfig to its results: on colocated replicas
(sim/run/colocated.py) or, with disagg.enabled, on a prefill and a decode pool
(sim/run/disagg.py)."""

from __future__ import annotations

from pathlib import Path

from sim.config import SimConfig
from sim.errors import UserError
from sim.run.colocated import simulate_colocated
from sim.run.disagg import simulate_disagg
from sim.run.driver import Progress
from sim.run.setup import Setup
from sim.run.summary import RunResult
from sim.workload.generate import Workload


def simulate(
    cfg: SimConfig,
    progress: Progress | None = None,
    setup: Setup | None = None,
    workload: Workload | None = None,
    run_dir: Path | None = None,
) -> RunResult:
    """Run `cfg` (with `setup` and `workload`, when given, in place of the ones its config
    resolves to and generates). With `run_dir`, a long run writes its steps.parquet there a
    chunk at a time as it goes (sim/run/colocated.py, streams())."""
    if cfg.disagg.enabled:  # separate prefill and decode pools
        if setup is not None:
            raise UserError(
                "disagg.enabled=true: this task builds one engine setup; disaggregated pools "
                "run under task=simulate (and its sweeps) and scenario=disagg"
            )
        return simulate_disagg(cfg, progress, workload)
    return simulate_colocated(cfg, progress, setup, workload, run_dir)
