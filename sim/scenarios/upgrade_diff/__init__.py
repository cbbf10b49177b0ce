"""scenario=upgrade_diff: which changed setting made an engine upgrade slower (or faster), and why.

Reading order (each module imports only those above it, sim/scenarios/fanout.py and the
layers below sim/scenarios):

    changes.py      Change, diff() of two resolved settings, mixture() of the two
    outcomes.py     what is kept of one simulated mixture; run_tasks() runs many (fan_out)
    attribution.py  the math on one value function: Shapley values, one at a time, ddmin
    runs.py         Runs: every (seed, subset of changes) simulated so far
    headline.py     the metric the verdict explains, and the rule that chose it
    attribute.py    attribute(): the mixtures to run over seeds and each change's effects
    plan.py         make_plan(): every check before the first simulation, the baseline
    restore.py      the engine flags that set a change back on the new version
    load_sweep.py   before and after at several loads around the before's capacity
    result.py       UpgradeResult and its records; their `summary` is summary.json
    verdict.py      metric names, mechanism() and the verdict sentence
    study.py        run_upgrade_diff(): plan, attribute, sweep, then the result
    text.py         report.md's text;  report.py  every output file and plot
    scenario.py     UpgradeDiff, the Scenario the runner calls
"""
