"""`python -m sim.importers`: case files from real results
(sim/scenarios/validate/importers/command.py)."""

import sys

from sim.scenarios.validate.importers.command import main

if __name__ == "__main__":
    sys.exit(main())
