"""sim/scenarios/validate/importers: case files (sim/scenarios/validate/cases.py) from real
results, one module per source:

    silicon.py        AIConfigurator silicon CSV rows (closed loops at a fixed concurrency)
    bench_json.py     `vllm bench serve --save-result` files
    llmservingsim.py  LLMServingSim bench_examples runs (per-request timestamps)
    guidellm.py       GuideLLM benchmark JSON
    fields.py         reading the sources' fields (numbers, counts, JSON files, relative paths)
    catalogue.py      catalogue names of the sources' GPUs and models
    command.py        `python -m sim.importers`: the command line, and writing a case file

It imports only from sim/specs, sim/workload and the root modules (sim/errors.py,
sim/paths.py): nothing here simulates.
"""
