"""What a run's outputs look like to a person: report.md / report.html with plots, the console
block, the timeline figure and the Perfetto trace.

    run_report.py    report.md of one simulation (its figures: run_plots.py, drawn beside the
                     run by plot_workers.py); disagg_run.py of a disaggregated one
    timeline.py      timeline.png / .svg and trace.json from a traced run's phases
    console.py       the progress bar and vllm bench serve's result block
    figures.py       matplotlib set-up, deterministic PNGs, markdown tables; html.py report.html
    escape.py        a user's strings (ids, names, paths, values, reasons) as Markdown text
    placement.py     point labels that overlap nothing, legends and titles that fit the figure

May import sim.run and everything below it (and the root).
"""
