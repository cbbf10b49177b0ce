"""scenario=disagg: the prefill:decode split that meets the SLOs at the fewest GPUs.

    search.py    the split search: Search runs the probes, fewest_decode / search_split choose
                 them, colocated() runs scenario=capacity's replica search beside it,
                 run_disagg_search returns the DisaggResult
    result.py    the answer as frozen records (Probe, FewestDecode, Pool, Colocated,
                 DisaggResult, whose `summary` is summary.json)
    report.py    summary.json, probes.csv, report.md, splits.png, ttft_split.png
    scenario.py  the Scenario the runner calls (task=simulate with disagg.enabled runs one
                 deployment through sim/scenarios/simulate.py instead)

May import sim/scenarios' shared modules (probes.py, fanout.py), sim/scenarios/capacity (its
replica search and its records) and every layer below sim/scenarios.
"""
