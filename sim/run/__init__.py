"""One simulation: the replicas built from the config, driven through simulated time, measured.

    setup.py         Setup: hardware, model, settings, memory plan, pricer; the replicas
    engine.py        Engine: one replica (scheduler + KV + cost), stepped by a driver
    fast_forward.py  runs of decode steps simulated in bulk, exactly
    dispatch.py      router, concurrency cap, requests in flight, RunOutcome
    driver.py        the simpy driver (and a plain loop) for colocated replicas
    disagg_driver.py the same for a prefill pool, a decode pool and the KV transfers
    simulate.py      simulate(cfg): colocated.py or disagg.py
    metrics.py       StepLog and the vllm bench serve summary; summary.py RunResult
    audit.py         the physics audit after every run; physics.py the least bytes and FLOPs,
                     findings.py what it finds and how a run reports it
    phases.py        PhaseLog: what each request was doing when (trace=true)
    delivery.py      when a client in the engine's own process sees a token
    outputs.py, overview.py   atomic files and streamed steps.parquet

May import every layer below: sim.cost, sim.schedulers, sim.kv, sim.workload, sim.engines,
sim.specs (and the root).
"""
