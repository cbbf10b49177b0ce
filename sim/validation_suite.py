"""`python -m sim.validation_suite`: the committed validation report, rebuilt from the real runs
(sim/scenarios/validate/suite.py)."""

import sys

from sim.scenarios.validate.suite import main

if __name__ == "__main__":
    sys.exit(main())
