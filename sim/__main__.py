"""`python -m sim [scenario=NAME] [KEY=VALUE ...]`: one run (or a -m sweep), its outputs in the
run dir.

Hydra composes scenarios/; `hydra.run.dir=DIR` chooses where everything goes; `-m` sweeps.
Every run's config is checked before Hydra starts (sim/cli.py, then the scenario's own check):
a wrong key, a bad value or a model that does not fit prints one line and exits 2; --debug
(or SIM_DEBUG=1) shows the traceback instead. sim/scenarios/runner.py runs the task. A run dir
holds a file INCOMPLETE while its task runs, and keeps it if the task did not finish (Ctrl-C
exits 130).
"""

from __future__ import annotations

import os
import sys

import hydra
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig

from sim.cli import MAX_SWEEP_CHECKS, check_overrides, split_argv
from sim.errors import UserError
from sim.paths import SCENARIO_DIR
from sim.scenarios.runner import check, run_task

INFORMATIONAL = {"-h", "--help", "--hydra-help", "--info", "--cfg", "-c", "--shell-completion"}


def fail(message: str) -> None:
    print(f"sim: error: {message}", file=sys.stderr)
    sys.exit(2)


@hydra.main(config_path=str(SCENARIO_DIR), config_name="config", version_base="1.3")
def _hydra_entry(cfg: DictConfig) -> None:
    try:
        run_task(cfg)
    except UserError as exc:
        if _debug():
            raise
        fail(str(exc))
    except KeyboardInterrupt:
        if _debug():
            raise
        sys.exit(130)


def _debug() -> bool:
    return bool(os.environ.get("SIM_DEBUG"))


def main() -> None:
    if "--debug" in sys.argv[1:]:  # tracebacks instead of one-line errors (= SIM_DEBUG=1)
        sys.argv.remove("--debug")
        os.environ["SIM_DEBUG"] = "1"
        os.environ["HYDRA_FULL_ERROR"] = "1"
    overrides, multirun = split_argv(sys.argv[1:])
    if not INFORMATIONAL & set(sys.argv[1:]):
        try:
            configs = check_overrides(overrides, multirun)
            for cfg in configs:
                check(cfg)
        except UserError as exc:
            if _debug():
                raise
            fail(str(exc))
        if multirun and len(configs) < MAX_SWEEP_CHECKS:  # every point checked here:
            # on the base class: Hydra re-executes its plugins' modules (the basic sweeper's
            # among them) when it scans for plugins, which would undo a patch of the subclass
            Sweeper.validate_batch_is_legal = _checked_already
    _hydra_entry()


_hydra_validate = Sweeper.validate_batch_is_legal


def _checked_already(self, batch) -> None:
    """Hydra's basic sweeper composes every point's config once more before it launches them
    (validate_batch_is_legal), one after another in this process, to catch composition errors
    early. check_overrides has composed and checked every point of the sweep already, so that
    pass, a third of a short point's cost, is skipped; another sweeper's points (an optimiser's,
    chosen as it goes) were not checked here, and keep Hydra's pass."""
    if type(self).__name__ != "BasicSweeper":
        _hydra_validate(self, batch)


if __name__ == "__main__":
    main()
