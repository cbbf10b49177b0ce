"""sim/scenarios/validate: scenario=validate, the simulator against real benchmark runs, and
the validation suite built on it. A reading guide, bottom to top:

    cases.py       the case file's schema; loading it into cases (a bad case: an error row)
    runs.py        each case simulated (through sim/scenarios/fanout.py): `CaseResult`
    validation.py  cases and results compared: the table of errors and its accuracy, summary.json
    causes.py      the likely causes of a case's large error
    report.py      validation.csv, summary.json, report.md and its plots
    scenario.py    `Validate`, the Scenario the runner imports
    importers/     case files from real results (`python -m sim.importers`)
    targets.py     the accuracy targets the suite checks
    settings.py    the plausible benchmark settings a source does not state: a band
    preamble.py    the suite's text above the report
    suite.py       `python -m sim.validation_suite`: the committed report from ../shared/data

It may import from every layer below sim/scenarios and from sim/scenarios/fanout.py; only
the runner (sim/scenarios/runner.py) and the entry modules sim/importers.py and
sim/validation_suite.py import it.
"""
