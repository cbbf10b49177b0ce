"""vLLM V1's running set as arrays (struct of arrays): a step's scheduling and its outcome as a
few vector operations over every running request instead of a Python loop over them.

    lane row i  =  scheduler.running[i]
    c      num_computed_tokens          t      prompt_len + num_output_tokens (known tokens)
    out    num_output_tokens            limit  max_output_len
    held   blocks held                  last   last_token_s (NaN: none yet)
    npre   num_preemptions              measured  request_id >= the ItlLog's measure_from

The Request objects stay the truth every other part reads: each step writes their counters
back (a store per request, far cheaper than the scheduling logic per request). The lane is
built from them when the running list is not the one it mirrors, or after anything but the
lane changed them (the scheduler drops it: a step scheduled through objects, a preemption, a
fast-forwarded run). A step goes through the lane only when it cannot preempt: the blocks its
rows need are all free (otherwise VllmV1Scheduler schedules it through objects, as before).
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


class Lane:
    __slots__ = ("c", "held", "last", "limit", "measured", "npre", "out", "requests", "t")

    def __init__(self, running: list[Request], req_blocks: dict, measure_from: int):
        reqs = list(running)
        m = len(reqs)
        self.requests = reqs
        self.c = np.fromiter((r.num_computed_tokens for r in reqs), np.int64, m)
        self.out = np.fromiter((r.num_output_tokens for r in reqs), np.int64, m)
        self.t = self.out + np.fromiter((r.prompt_len for r in reqs), np.int64, m)
        self.limit = np.fromiter((r.max_output_len for r in reqs), np.int64, m)
        self.held = np.fromiter((len(req_blocks[r.request_id]) for r in reqs), np.int64, m)
        self.last = np.fromiter(
            (math.nan if r.last_token_s is None else r.last_token_s for r in reqs), np.float64, m
        )
        self.npre = np.fromiter((r.num_preemptions for r in reqs), np.int64, m)
        self.measured = np.fromiter((r.request_id >= measure_from for r in reqs), np.bool_, m)

    def append(self, reqs: list[Request], req_blocks: dict, measure_from: int) -> None:
        """Admitted requests join the lane's end, as they join the running list's."""
        self.requests.extend(reqs)
        c = [r.num_computed_tokens for r in reqs]
        out = [r.num_output_tokens for r in reqs]
        cat = np.concatenate
        self.c = cat((self.c, c))
        self.out = cat((self.out, out))
        self.t = cat((self.t, [r.prompt_len + o for r, o in zip(reqs, out, strict=True)]))
        self.limit = cat((self.limit, [r.max_output_len for r in reqs]))
        self.held = cat((self.held, [len(req_blocks[r.request_id]) for r in reqs]))
        last = [math.nan if r.last_token_s is None else r.last_token_s for r in reqs]
        self.last = cat((self.last, last))
        self.npre = cat((self.npre, [r.num_preemptions for r in reqs]))
        self.measured = cat((self.measured, [r.request_id >= measure_from for r in reqs]))

    def remove(self, rows: list[int]) -> None:
        """Rows (ascending) leave the lane."""
        for i in reversed(rows):
            del self.requests[i]
        keep = np.ones(len(self.c), dtype=np.bool_)
        keep[rows] = False
        self.c, self.t, self.out = self.c[keep], self.t[keep], self.out[keep]
        self.limit, self.held, self.last = self.limit[keep], self.held[keep], self.last[keep]
        self.npre, self.measured = self.npre[keep], self.measured[keep]

    def check(self, running: list[Request], req_blocks: dict) -> None:
        """The lane mirrors the running requests (check_invariants)."""
        assert self.requests == running, "the lane's rows are not the running list"
        fresh = Lane(running, req_blocks, 0)
        for name in ("c", "t", "out", "limit", "held", "npre"):
            assert np.array_equal(getattr(self, name), getattr(fresh, name)), name
        assert np.array_equal(self.last, fresh.last, equal_nan=True), "last"
