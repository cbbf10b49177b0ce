"""Whether a side of the study ran overloaded: each seed's judgement as `python -m sim` makes
it (summary.json `sim.overload`, sim/run/summary.py's overload_record), gathered over the seeds.

On an overloaded workload the queue grows through the run, so what a finite run measures of
latency is how far the queue got: an upgrade study there explains the noise of a saturated
queue. The verdict says so first (sim/scenarios/upgrade_diff/caveats.py), and
`workload.rate=auto` (sim/scenarios/upgrade_diff/rate.py) offers a rate below capacity.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from sim.report.console import overload_warning

NOT_KEPT = "no judgement kept with these runs (simulated by an earlier version of upgrade_diff)"


@dataclass(frozen=True, slots=True)
class Overload:
    """One side's overload judgement over the seeds."""

    per_seed: tuple[dict | None, ...]  # each seed's sim.overload (None: not kept with the run)
    seeds: tuple[int, ...]

    @classmethod
    def of(cls, outcomes: Iterable[dict], seeds: Iterable[int]) -> Overload:
        """From the outcomes of one mixture on each seed (outcomes.outcome())."""
        return cls(tuple(o.get("overload") for o in outcomes), tuple(seeds))

    @property
    def judged(self) -> list[dict]:
        """The seeds' records that judge the load (a closed loop, a burst or too few arrivals
        are not judged)."""
        return [o for o in self.per_seed if o and o.get("overloaded") is not None]

    @property
    def hit(self) -> list[dict]:
        """The seeds judged overloaded."""
        return [o for o in self.judged if o["overloaded"]]

    @property
    def overloaded(self) -> bool | None:
        """Overloaded on any seed (its runs measure the queue); None when no seed was judged."""
        return bool(self.hit) if self.judged else None

    def words(self, name: str) -> str:
        """`vllm@0.8.4 served 7.04 of 16.87 req/s offered (3 of 3 seeds)`."""
        hit = self.hit
        served = float(np.mean([o["served_rate"] for o in hit]))
        offered = float(np.mean([o["offered_rate"] for o in hit]))
        return (
            f"{name} served {served:.2f} of {offered:.2f} req/s offered "
            f"({len(hit)} of {len(self.per_seed)} seed{'s' if len(self.per_seed) > 1 else ''})"
        )

    def warning(self, name: str) -> str | None:
        """python -m sim's warning for the first seed judged overloaded, led by the side's
        name and the seed (None: no seed was)."""
        for seed, o in zip(self.seeds, self.per_seed, strict=True):
            if o and o.get("overloaded"):
                return f"{name} (seed {seed}): " + overload_warning({"sim": {"overload": o}})
        return None

    @property
    def summary(self) -> dict:
        judged, hit = self.judged, self.hit
        out: dict = {
            "overloaded": self.overloaded,
            "overloaded_seeds": len(hit),
            "judged_seeds": len(judged),
            "seeds": list(self.seeds),
        }
        if judged:
            out["offered_rate"] = float(np.mean([o["offered_rate"] for o in judged]))
            out["served_rate"] = float(np.mean([o["served_rate"] for o in judged]))
        else:
            reasons = [o["not_judged"] for o in self.per_seed if o and o.get("not_judged")]
            out["not_judged"] = reasons[0] if reasons else NOT_KEPT
        out["per_seed"] = list(self.per_seed)  # in the order of `seeds`
        return out
