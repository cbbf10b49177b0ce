"""What each request was doing when, recorded as the run goes.

With `trace=true` (and in every teaching scenario) each engine hands every step it runs to a
PhaseLog, which keeps per request the stretches of one kind:

  queued     from arrival to the first step that computes any of its tokens
  prefill    one slice per step that computes prompt tokens (a chunk), or recomputes the
             sequence after a preemption
  decode     consecutive steps that each compute one new token, merged into one slice
  preempted  from the end of the last step it ran in before a preemption (its KV freed) to
             the step that starts recomputing it
  held       done, but kept until its batch ends (static batching)

Fast-forward is off while phases are recorded (its runs of decode steps are not handed over one
by one); the results are the same to the bit (tests/test_fast_forward.py). The timeline figure
and the Perfetto trace are drawn from the frame (sim/report/timeline.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.schedulers.base import StepPlan

PHASES = ("queued", "prefill", "decode", "preempted", "held")


class PhaseLog:
    """Per-request phases, fed each step (Engine.finish_step)."""

    def __init__(self):
        self.rows: list[tuple] = []  # (request_id, replica, phase, start_s, end_s, tokens)
        self.open: dict[int, list] = {}  # request_id -> its open decode run
        self.last: dict[int, tuple[float, int]] = {}  # request_id -> (last end, preemptions)
        self.first: dict[int, float] = {}  # request_id -> first step start
        self.arrival: dict[int, float] = {}
        self.replica: dict[int, int] = {}

    def record(self, replica: int, plan: StepPlan, start_s: float, end_s: float) -> None:
        for req, n, ctx in zip(plan.requests, plan.num_new_tokens, plan.num_context_tokens,
                               strict=True):  # fmt: skip
            rid = req.request_id
            if rid not in self.first:
                self.first[rid] = start_s
                self.arrival[rid] = req.arrival_s
                self.replica[rid] = replica
            elif req.num_preemptions > self.last[rid][1]:  # preempted since it last ran
                self._close(rid)
                self.rows.append((rid, replica, "preempted", self.last[rid][0], start_s, 0))
            decode = n == 1 and ctx >= req.prompt_len
            run = self.open.get(rid)
            if decode and run is not None and run[4] == start_s:
                run[4], run[5] = end_s, run[5] + 1  # the decode run goes on
            else:
                self._close(rid)
                row = [rid, replica, "decode" if decode else "prefill", start_s, end_s, n]
                if decode:
                    self.open[rid] = row
                else:
                    self.rows.append(tuple(row))
            self.last[rid] = (end_s, req.num_preemptions)

    def _close(self, rid: int) -> None:
        run = self.open.pop(rid, None)
        if run is not None:
            self.rows.append(tuple(run))

    def frame(self, finish_s: dict[int, float] | None = None) -> pd.DataFrame:
        """Every phase, one row each, ordered by request then start. `finish_s` (request id:
        finish time) adds the held stretch of a request that finished after its last step."""
        for rid in list(self.open):
            self._close(rid)
        rows = list(self.rows)
        for rid, start in self.first.items():
            if start > self.arrival[rid]:
                rows.append((rid, self.replica[rid], "queued", self.arrival[rid], start, 0))
        for rid, end in (finish_s or {}).items():
            last = self.last.get(rid)
            if last and np.isfinite(end) and end > last[0] + 1e-12:
                rows.append((rid, self.replica[rid], "held", last[0], float(end), 0))
        df = pd.DataFrame(
            rows, columns=["request_id", "replica", "phase", "start_s", "end_s", "tokens"]
        )
        return df.sort_values(["request_id", "start_s", "phase"], kind="stable").reset_index(
            drop=True
        )


def phase_totals(phases: pd.DataFrame) -> dict[str, float]:
    """Seconds spent in each phase, summed over requests."""
    d = (phases["end_s"] - phases["start_s"]).groupby(phases["phase"]).sum()
    return {p: float(d.get(p, 0.0)) for p in PHASES}
