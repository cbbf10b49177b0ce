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
    rate.py         workload.rate=auto: a fraction of the before version's capacity
    overload.py     each side's overload judgement over the seeds (python -m sim's)
    unpriced.py     kernel changes priced with one table on both sides: no evidence
    result.py       UpgradeResult and its records; their `summary` is summary.json
    caveats.py      what the verdict cannot see, in words: overload, borrowed rule sets
    verdict.py      metric names, mechanism() and the verdict sentence
    study.py        run_upgrade_diff(): capacity, plan, attribute, sweep, then the result
    history.py      every headline's verdict asked in one run dir
    advice.py       report.md's unexplained part and restoring flags
    text.py         report.md's text;  report.py  every output file and plot
    scenario.py     UpgradeDiff, the Scenario the runner calls
"""
