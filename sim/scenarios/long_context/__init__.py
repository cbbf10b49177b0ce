"""scenario=long_context: what one very long request does to a serving engine, alone and
among traffic, and what each attention design and remedy changes.

Reading order (each module imports only those above it):
    arithmetic.py    the memory and time of one long sequence, by hand (no simulation)
    decode.py        one decode step at its context: the weights and the KV it reads
    runs.py          the long request through the engine: Context, the runs, their figures
    context_limit.py the longest context a study accepts (the model's, or an extension)
    tp_choice.py     the tensor-parallel degree: the given one, or a valid one for the model
    traffic.py       the engine runs with and without the long request, per chunk budget
    architectures.py the same questions for other attention designs
    sparse_prefill.py  the vertical + slash pattern remedy: its density and its TTFT
    remedies.py      what a user can turn, each priced with the same cost model
    study.py         Study: the whole study as typed data; its summary is summary.json
    text.py, sections.py, remedy_text.py, caveats.py, report.py   report.md, its sentences,
                     what the numbers leave out, and the plots
    scenario.py      the Scenario the runner calls

May import everything below sim/scenarios.
"""
