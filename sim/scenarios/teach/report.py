"""A teaching scenario's outputs: report.md / .html, timeline.png / .svg, trace.json, summary."""

from __future__ import annotations

from pathlib import Path

from sim.report.escape import md_text
from sim.report.figures import md_table
from sim.report.html import write_report
from sim.report.timeline import plot_timeline, trace_events, write_trace
from sim.run.outputs import write_json
from sim.scenarios.teach.costs import WORSE_BY
from sim.scenarios.teach.run import LessonRuns


def write_teach_outputs(out: LessonRuns, out_dir: Path, command: str) -> None:
    """All of a lesson's files."""
    lesson, results = out.definition, out.results
    labels = out.labels
    runs = [
        (label, r.steps, r.phases, r.setup.memory.num_blocks)
        for label, r in zip(labels, results, strict=True)
    ]
    plots = plot_timeline(runs, out_dir / "timeline.png")
    events = []
    for k, (label, r) in enumerate(zip(labels, results, strict=True)):
        events += trace_events(r.steps, r.phases, label, pid_base=k * 100)
    write_trace(out_dir / "trace.json", events, {"lesson": out.lesson})
    r0 = results[0]
    workload = md_text(r0.workload.description)
    # the model and the GPU may be a user's files, by name
    model, gpu = md_text(r0.setup.model.name), md_text(r0.setup.hardware.display_name)
    rows = [(name, *map(str, values)) for name, *values in out.rows]
    text = f"""# {lesson.title}

**{out.lesson_sentence}**

## How it works

{lesson.how}

## The two runs

The same requests ({workload}) on {model}, one
{gpu}, seed {r0.setup.config.seed}; only this differs:
{" / ".join(f"**{label}**" for label in labels)}. Every number below is read from the two runs.

{md_table(rows, ("", *labels))}

The price named above: every figure of this table at least {WORSE_BY:.0%} worse with
{labels[1]} than with {labels[0]}.

## The timeline

Left: {labels[0]}; right: {labels[1]}, on the same time axis. From the top: tokens computed
in each step (prompt tokens blue, decode tokens green), requests in the batch, KV blocks in use
(red dotted: the pool), requests waiting; then one row per request (by arrival): queued (grey),
prefill (blue), decode (green), preempted (red), held (orange: done, waiting for its batch).

{lesson.look}

![timeline]({plots[0]})

`trace.json` has both runs for [ui.perfetto.dev](https://ui.perfetto.dev): a track of steps per
run (click a step to see its batch), counters for KV blocks and the queue, and a track per
request with its phases. The figure is also `{plots[1]}` (scalable).

## Try

```bash
{command}
{chr(10).join(f"python -m sim scenario=teach_{out.lesson} {t}" for t in lesson.try_next)}
```
"""
    write_report(out_dir, text)
    write_json(out_dir / "summary.json", out.summary)
