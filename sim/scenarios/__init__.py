"""What users run: one Scenario (protocol.py) per `task=`, dispatched by runner.py.

    runner.py        run_task: the run dir, resume in sweeps, scenario.run / write / brief
    protocol.py      the Scenario protocol; fanout.py many simulations at once (and resume)
    simulate.py      task=simulate (the default run, every sweep point)
    show_engine.py, kernel_check.py   small scenarios
    upgrade_diff/, long_context/, capacity/, disagg/, teach/, validate/   one package each
    hydra_files.py   a run dir's .hydra/ files, written by libyaml (installed for every run)
    sweep/           a -m sweep's table and report (the Hydra callback)
    probes.py        what capacity and disagg share: seeded probes and their verdict
    listing.py       `python -m sim --list`: every catalogue (models, GPUs, engines, scenarios,
                     workloads), one line per entry

Scenario packages may import everything below sim/scenarios, the shared modules here, and
each other only where named in their own docstring (disagg uses capacity's replica search,
teach uses long_context's long request); never the other way round.
"""
