"""What a run keeps of its requests and tokens, in memory that does not grow with objects.

RequestRecords: one preallocated row per request of the workload, written when the request
ends (finished or rejected) or when the run stops; the Request object itself lives only while
the request is in flight.

ItlLog: the gaps between consecutive tokens of a request, as (gap, count) pairs. Within a step
every request that also emitted in the previous step has the same gap, so a step adds one or a
few pairs however many requests it decodes, and a run's memory grows with its steps, not with
its tokens. The statistics are those of the expanded list of gaps.
"""

from __future__ import annotations

from array import array

import numpy as np

from sim.workload.request import Request, Status

STATUSES = tuple(Status)  # status code -> Status
STATUS_CODE = {s: i for i, s in enumerate(STATUSES)}


class RequestRecords:
    def __init__(self, arrival_s: np.ndarray, prompt_len: np.ndarray, output_len: np.ndarray):
        n = len(arrival_s)
        self.arrival_s = np.array(arrival_s, dtype=np.float64)  # send time once sent
        self.prompt_len = prompt_len
        self.max_output_len = output_len
        self.replica = np.full(n, -1, dtype=np.int64)
        self.status = np.full(n, STATUS_CODE[Status.WAITING], dtype=np.int8)
        self.first_scheduled_s = np.full(n, np.nan)
        self.first_token_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        self.output_tokens = np.zeros(n, dtype=np.int64)
        self.cached_tokens = np.zeros(n, dtype=np.int64)
        self.num_preemptions = np.zeros(n, dtype=np.int64)
        self.reject_reason: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.arrival_s)

    def record(self, req: Request) -> None:
        """Copy the request's outcome into its row (when it ends, or when the run stops)."""
        i = req.request_id
        self.arrival_s[i] = req.arrival_s
        self.status[i] = STATUS_CODE[req.status]
        if req.first_scheduled_s is not None:
            self.first_scheduled_s[i] = req.first_scheduled_s
        if req.first_token_s is not None:
            self.first_token_s[i] = req.first_token_s
        if req.finish_s is not None:
            self.finish_s[i] = req.finish_s
        self.output_tokens[i] = req.num_output_tokens
        self.cached_tokens[i] = req.num_cached_tokens or 0
        self.num_preemptions[i] = req.num_preemptions
        if req.reject_reason:
            self.reject_reason[i] = req.reject_reason

    def counts(self) -> dict[Status, int]:
        found = np.bincount(self.status, minlength=len(STATUSES))
        return {s: int(found[i]) for i, s in enumerate(STATUSES)}

    def request(self, i: int) -> Request:
        """Row i as a (content-less) Request, for tests and small tools."""

        def opt(x: float) -> float | None:
            return None if np.isnan(x) else float(x)

        return Request(
            request_id=i,
            arrival_s=float(self.arrival_s[i]),
            prompt_len=int(self.prompt_len[i]),
            max_output_len=int(self.max_output_len[i]),
            content_ids=[],
            content_block_tokens=1,
            status=STATUSES[self.status[i]],
            num_output_tokens=int(self.output_tokens[i]),
            num_cached_tokens=int(self.cached_tokens[i]),
            num_preemptions=int(self.num_preemptions[i]),
            first_scheduled_s=opt(self.first_scheduled_s[i]),
            first_token_s=opt(self.first_token_s[i]),
            finish_s=opt(self.finish_s[i]),
            reject_reason=self.reject_reason.get(i),
        )


class ItlLog:
    """Inter-token gaps of the measured requests (id >= measure_from) as (gap, count) pairs."""

    def __init__(self, measure_from: int = 0):
        self.measure_from = measure_from
        self.gaps_s = array("d")
        self.counts = array("q")

    def add(self, gaps_s: list[float]) -> None:
        """One step's gaps."""
        if not gaps_s:
            return
        first = gaps_s[0]
        if gaps_s.count(first) == len(gaps_s):
            self.gaps_s.append(first)
            self.counts.append(len(gaps_s))
            return
        tally: dict[float, int] = {}
        for gap in gaps_s:
            tally[gap] = tally.get(gap, 0) + 1
        self.gaps_s.extend(tally.keys())
        self.counts.extend(tally.values())

    def add_counted(self, gaps_s, counts) -> None:
        """Gaps, gap i occurring counts[i] times (lists, or arrays of "d" and "q")."""
        self.gaps_s.extend(gaps_s)
        self.counts.extend(counts)

    def __len__(self) -> int:
        return int(np.frombuffer(self.counts, dtype=np.int64).sum()) if self.counts else 0


def merged(logs: list[ItlLog]) -> tuple[np.ndarray, np.ndarray]:
    """(distinct gaps ascending, how many times each occurs) over every log."""
    gaps = np.concatenate([np.frombuffer(g.gaps_s, dtype=np.float64) for g in logs] or [[]])
    counts = np.concatenate([np.frombuffer(g.counts, dtype=np.int64) for g in logs] or [[]])
    values, where = np.unique(gaps, return_inverse=True)
    return values, np.bincount(where, weights=counts, minlength=len(values)).astype(np.int64)


def weighted_stats(name: str, values: np.ndarray, counts: np.ndarray, percentiles) -> dict:
    """Mean, median, std (ddof=0) and percentiles in ms of the list in which each of the
    ascending `values` (s) occurs counts times: numpy's linear interpolation of the expanded
    list, without expanding it."""
    ms = np.asarray(values, dtype=np.float64) * 1e3
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        ms, counts, total = np.zeros(1), np.ones(1, dtype=np.int64), 1  # as vllm bench: 0
    mean = float(np.dot(ms, counts) / total)
    std = float(np.sqrt(np.dot((ms - mean) ** 2, counts) / total))
    ends = np.cumsum(counts)  # the expanded list's positions [ends - counts, ends)

    def at(q: float) -> float:
        h = (total - 1) * q / 100
        lo = int(np.floor(h))
        a = ms[np.searchsorted(ends, lo, side="right")]
        b = ms[np.searchsorted(ends, min(lo + 1, total - 1), side="right")]
        t = h - lo
        diff = b - a
        return float(b - diff * (1 - t) if t >= 0.5 else a + diff * t)  # numpy's _lerp

    out = {f"mean_{name}_ms": mean, f"median_{name}_ms": at(50), f"std_{name}_ms": std}
    for p in percentiles:
        out[f"p{p}_{name}_ms"] = at(p)
    return out
