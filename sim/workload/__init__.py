"""Requests: how a run's traffic is generated or read, what a request is while the engine runs
it, and what a run keeps of each once it ends.

    generate.py      Workload (numpy columns) from the config and a seeded Generator
    traces.py        trace files (Azure, Vidur, Mooncake, LLMServingSim, bench JSON) -> a table
    bench_results.py real `vllm bench serve --save-result` results: metrics and per-request data
    request.py       Request: num_computed_tokens catching up with num_tokens, its timestamps
    records.py       RequestRecords (one flat row per request), ItlLog (token gaps)

May import sim.specs and sim.engines (and the root).
"""
