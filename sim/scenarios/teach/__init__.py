"""scenario=teach_*: one mechanism of a serving engine per lesson, shown by two runs one
setting apart.

    lessons.py       the six lessons (LESSONS): what each varies, explains and shows
    measures.py      what a lesson reads off a run; verdicts.py each lesson's sentence and table
    costs.py         what a lesson's change costs: the figures its second run made worse
    run.py           run_lesson -> LessonRuns: both variants, traced
    report.py        report.md / .html, timeline.png / .svg, trace.json, summary.json
    scenario.py      the Scenario the runner calls

May import everything below sim/scenarios, and sim/scenarios/long_context/runs.py (a lesson's
long prompts are built as long_context builds its long request).
"""
