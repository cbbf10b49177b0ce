"""scenario=capacity: the most load a configuration serves within latency SLOs, and its cost.

    search.py    the rate (or replica) search: Search runs the probes, search_rate /
                 search_replicas choose them, run_capacity returns the CapacityResult
    result.py    the answer as frozen records (Probe, RateAnswer, ReplicaAnswer, Cost,
                 CapacityResult, whose `summary` is summary.json)
    report.py    summary.json, probes.csv, report.md, capacity.png
    scenario.py  the Scenario the runner calls

May import sim/scenarios' shared modules (probes.py, fanout.py) and every layer below
sim/scenarios; not other scenarios (scenario=disagg imports this package's replica search).
"""
