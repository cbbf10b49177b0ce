"""vLLM V1's running set as arrays (struct of arrays): a step's scheduling and its outcome as a
few vector operations over every running request instead of a Python loop over them.

    lane row i  =  scheduler.running[i]
    c      num_computed_tokens          t      prompt_len + num_output_tokens (known tokens)
    out    num_output_tokens            limit  max_output_len
    held   blocks held                  last   last_token_s (NaN: none yet)
    npre   num_preemptions              measured  request_id >= the ItlLog's measure_from

While the lane runs, it holds the truth of three counters of its requests (c, out, last:
num_computed_tokens, num_output_tokens, last_token_s); the Request objects' own are written
back only where something else reads them: a request that finishes (before it is let go),
one whose blocks grow one request at a time (the pool reads them), every row when the lane
is dropped or replaced (sync()), and at the end of a run (the driver syncs its engines). A
step thus stores nothing per running request. Fast-forward reads the counters from the lane
(VllmV1Scheduler.running_lane) and writes every request back itself. The lane is built from
the objects when the running list is not the one it mirrors, or after anything but the lane
changed them (the scheduler syncs and drops it: a step scheduled through objects, a
preemption; a fast-forwarded run drops it without a sync, having written every request).
A step goes through the lane only when it cannot preempt: the blocks its rows need are all
free (otherwise VllmV1Scheduler schedules it through objects, as before).
Every figure is the one the object path computes (tests/test_lane.py runs both).
"""

from __future__ import annotations

import math

import numpy as np

from sim.workload.request import Request

LANE_MIN = 128  # running requests from which steps are scheduled through the lane. A step
# through it costs some forty numpy calls whatever the batch: here (steps of a saturated
# vLLM V1 replica, copied mid-run and stepped 300 times each way) 191-242 µs against 125-145
# through objects with 31 running, 203-249 against 167-191 with 64, even with 128, 375-469
# against 531-707 with 247


FIELDS = ("c", "t", "out", "limit", "held", "last", "npre", "measured")
DTYPES = (np.int64,) * 5 + (np.float64, np.int64, np.bool_)


def _rows(reqs: list[Request], req_blocks: dict, measure_from: int) -> tuple[list, ...]:
    """Each field of FIELDS for each request, as lists."""
    out = [r.num_output_tokens for r in reqs]
    return (
        [r.num_computed_tokens for r in reqs],
        [r.prompt_len + o for r, o in zip(reqs, out, strict=True)],
        out,
        [r.max_output_len for r in reqs],
        [len(req_blocks[r.request_id]) for r in reqs],
        [math.nan if r.last_token_s is None else r.last_token_s for r in reqs],
        [r.num_preemptions for r in reqs],
        [r.request_id >= measure_from for r in reqs],
    )


class Lane:
    __slots__ = ("c", "held", "last", "limit", "measured", "npre", "out", "requests", "t")

    def __init__(self, running: list[Request], req_blocks: dict, measure_from: int):
        self.requests = list(running)
        columns = _rows(self.requests, req_blocks, measure_from)
        for name, dtype, values in zip(FIELDS, DTYPES, columns, strict=True):
            setattr(self, name, np.array(values, dtype=dtype))

    def append(self, reqs: list[Request], req_blocks: dict, measure_from: int) -> None:
        """Admitted requests join the lane's end, as they join the running list's."""
        self.requests.extend(reqs)
        for name, values in zip(FIELDS, _rows(reqs, req_blocks, measure_from), strict=True):
            setattr(self, name, np.concatenate((getattr(self, name), values)))

    def remove(self, rows: list[int]) -> None:
        """Rows (ascending) leave the lane."""
        for i in reversed(rows):
            del self.requests[i]
        keep = np.ones(len(self.c), dtype=np.bool_)
        keep[rows] = False
        for name in FIELDS:
            setattr(self, name, getattr(self, name)[keep])

    def last_token_s(self) -> list[float | None]:
        """Each row's last_token_s as the objects hold it (None for none yet: NaN here)."""
        return [None if x != x else x for x in self.last.tolist()]

    def sync(self) -> None:
        """Write the lane's counters back to its requests (by identity, whatever the running
        list holds now)."""
        for req, c, out, last in zip(
            self.requests, self.c.tolist(), self.out.tolist(), self.last_token_s(), strict=True
        ):
            req.num_computed_tokens = c
            req.num_output_tokens = out
            req.last_token_s = last

    def check(self, running: list[Request], req_blocks: dict) -> None:
        """The lane mirrors the running requests (check_invariants)."""
        assert self.requests == running, "the lane's rows are not the running list"
        fresh = Lane(running, req_blocks, 0)
        for name in FIELDS[:-1]:  # (measured depends on the log's measure_from only)
            assert np.array_equal(getattr(self, name), getattr(fresh, name), equal_nan=True), name
