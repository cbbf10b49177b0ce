"""What every driver keeps of the requests it sends (sim/run/driver.py for colocated replicas,
sim/run/disagg_driver.py for prefill and decode pools): the router, the concurrency cap, the
requests in flight, one record per request, and the outcome when the clock stops.

Routers (parallel.router, disagg.router):
  least_loaded       vLLM's data-parallel score, 4 x waiting + running, lowest first
  least_outstanding  fewest requests sent and not finished
  round_robin        replicas in turn
  prefix_aware       the replica whose prefix cache holds the longest prefix of the prompt
                     now, then fewest outstanding (an ideal cache-aware router: it sees every
                     replica's cache exactly)
Ties go to the lowest replica number. A decode replica's requests receiving KV, and those
queued for its blocks (`queued`), count as waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sim.config import ROUTERS
from sim.run.engine import Engine
from sim.workload.records import RequestRecords
from sim.workload.request import Request, Status

Progress = Callable[[float, int, int], None]  # (sim time, requests ended, requests total)


@dataclass(slots=True)
class RunOutcome:
    records: RequestRecords  # every request of the workload, one row each, in workload order
    end_s: float  # simulated time when the run stopped
    stopped_early: bool  # the time limit came before every request ended
    num_sent: int = 0  # requests sent to a replica (the rest had not arrived, or were held
    # back by the concurrency cap, when the clock stopped)
    in_flight_ids: frozenset[int] = frozenset()  # sent and not ended when the clock stopped
    finishing_ids: frozenset[int] = frozenset()  # of those, finished by the step that was
    # running at the stop: their replica has let them go (see cut_at)

    @property
    def requests(self) -> list[Request]:
        """The rows as (content-less) Request objects, for tests and small tools."""
        return [self.records.request(i) for i in range(len(self.records))]

    @property
    def replica_of(self) -> dict[int, int]:
        """Request id -> the replica it was sent to."""
        return {i: int(r) for i, r in enumerate(self.records.replica) if r >= 0}


def route(
    engines: list[Engine],
    router: str,
    turn: int,
    req: Request | None = None,
    queued: Callable[[Engine], int] | None = None,
) -> Engine:
    """The router's replica for the `turn`-th request this pool of `engines` gets."""
    if len(engines) == 1:
        return engines[0]

    def waiting(e: Engine) -> int:
        return len(e.scheduler.waiting) + len(e.scheduler.receiving) + (queued(e) if queued else 0)

    def running(e: Engine) -> int:
        return len(e.scheduler.running)

    match router:
        case "round_robin":
            return engines[turn % len(engines)]
        case "least_outstanding":
            return min(engines, key=lambda e: (waiting(e) + running(e), e.replica))
        case "prefix_aware":
            return min(
                engines,
                key=lambda e: (-e.cached_prefix_tokens(req), waiting(e) + running(e), e.replica),
            )
        case _:  # least_loaded: vLLM's score
            return min(engines, key=lambda e: (4 * waiting(e) + running(e), e.replica))


class Dispatch:
    """The requests of one run: sent (to a replica), in flight, ended (finished or rejected),
    each recorded once it ends, and the concurrency cap (`vllm bench serve --max-concurrency`)."""

    def __init__(self, records: RequestRecords, limit: int | None, router: str = "least_loaded"):
        if router not in ROUTERS:
            raise ValueError(f"unknown router {router!r}")
        self.records = records
        self.limit = limit
        self.router = router
        self.num_sent = 0
        self.num_ended = 0
        self.in_flight: dict[int, Request] = {}  # sent and not ended, by request id
        self.in_front_end = 0  # sent by their clients, still in the server's front end

    @property
    def blocked(self) -> bool:
        """Every client busy: `limit` requests sent (to an engine or its front end), not ended."""
        return self.limit is not None and len(self.in_flight) + self.in_front_end >= self.limit

    def sent(self, req: Request, replica: int) -> None:
        """`req` sent to `replica` (it may still be rejected there: see admitted / ended)."""
        self.num_sent += 1
        self.records.replica[req.request_id] = replica

    def admitted(self, req: Request) -> None:
        self.in_flight[req.request_id] = req

    def ended(self, req: Request) -> None:
        """`req` finished, or was rejected (then it may never have been in flight)."""
        self.num_ended += 1
        self.records.record(req)
        self.in_flight.pop(req.request_id, None)

    def outcome(self, end_s: float) -> RunOutcome:
        """The run as of `end_s`: requests still in flight are recorded as they stand then."""
        finishing = set()
        for req in self.in_flight.values():  # stopped by the time limit
            if cut_at(req, end_s):
                finishing.add(req.request_id)
            self.records.record(req)
        return RunOutcome(
            self.records,
            end_s,
            self.num_ended < len(self.records),
            self.num_sent,
            frozenset(self.in_flight),
            frozenset(finishing),
        )


def cut_at(req: Request, end_s: float) -> bool:
    """A request in flight when the clock stopped at end_s, as of end_s. A replica applies a
    step when it starts, so the step running at the stop has already emitted its tokens (at its
    end, after end_s) and may have finished the request: take that token back and say it is
    still running. True when the request had finished in that step (its replica let it go)."""
    if req.last_token_s is None or req.last_token_s <= end_s:
        return False
    req.num_output_tokens -= 1
    req.last_token_s = None  # not needed after the run; before end_s, unknown here
    if req.first_token_s is not None and req.first_token_s > end_s:
        req.first_token_s = None
    finishing = req.status == Status.FINISHED
    if finishing:
        req.status, req.finish_s = Status.RUNNING, None
    return finishing
