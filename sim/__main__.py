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
from omegaconf import DictConfig

from sim.cli import check_overrides, split_argv
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
            for cfg in check_overrides(overrides, multirun):
                check(cfg)
        except UserError as exc:
            if _debug():
                raise
            fail(str(exc))
    _hydra_entry()


if __name__ == "__main__":
    main()
