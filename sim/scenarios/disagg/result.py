"""scenario=disagg's answer as records: each split probed, the fewest decode replicas per
prefill count, the colocated comparison, and DisaggResult, whose `summary` is summary.json."""

from __future__ import annotations

from dataclasses import dataclass

from sim.run.disagg_driver import TTFT_PARTS
from sim.scenarios.capacity.result import Probe as CapacityProbe
from sim.scenarios.capacity.result import ReplicaAnswer
from sim.scenarios.probes import Seeded, Verdict, probes_audit
from sim.specs.links import Link

KEYS = (  # the mean over the seeds of each, in probes.csv
    "p99_ttft_ms",
    "p99_tpot_ms",
    "mean_ttft_ms",
    "mean_tpot_ms",
    "request_throughput",
    "prefill_busy",
    "decode_busy",
    "transfer_mean_ms",
)


@dataclass(frozen=True, slots=True)
class Probe:
    """One split tried at the rate: its seeds' figures and the verdict over them."""

    prefill_replicas: int
    decode_replicas: int
    gpus: int  # prefill_replicas x the prefill TP + decode_replicas x the decode TP
    seeded: Seeded

    @property
    def verdict(self) -> Verdict:
        return self.seeded.verdict

    @property
    def margin(self) -> float:
        return self.seeded.margin

    @property
    def ttft_parts_ms(self) -> dict[str, float]:
        """The mean TTFT in parts (queue, prefill, decode wait, transfer, first decode)."""
        return {p: self.seeded.mean(f"ttft_{p}_ms") for p in TTFT_PARTS}

    def record(self) -> dict:
        return {
            "prefill_replicas": self.prefill_replicas,
            "decode_replicas": self.decode_replicas,
            "gpus": self.gpus,
            **self.seeded.record(),
            **{k: self.seeded.mean(k) for k in KEYS},
            **{f"ttft_{p}_ms": ms for p, ms in self.ttft_parts_ms.items()},
        }


@dataclass(frozen=True, slots=True)
class FewestDecode:
    """The fewest decode replicas found to meet the SLOs beside a number of prefill ones."""

    prefill_replicas: int
    probe: Probe | None  # None: none up to disagg.max_replicas

    @property
    def decode_replicas(self) -> int | None:
        return self.probe.decode_replicas if self.probe is not None else None

    @property
    def gpus(self) -> int | None:
        return self.probe.gpus if self.probe is not None else None

    def record(self) -> dict:
        return {
            "prefill_replicas": self.prefill_replicas,
            "decode_replicas": self.decode_replicas,
            "gpus": self.gpus,
        }


@dataclass(frozen=True, slots=True)
class Pool:
    hardware: str
    tp: int


@dataclass(frozen=True, slots=True)
class Colocated:
    """scenario=capacity's fewest replicas for the rate, prefill and decode on the same GPUs
    (the top-level hardware, parallel.tp and engine_args)."""

    hardware: str
    tp: int
    pp: int
    answer: ReplicaAnswer | None  # None: not within the search (`why` says what missed)
    why: str | None
    probes: tuple[CapacityProbe, ...]
    simulations_run: int

    @property
    def replicas(self) -> int | None:
        return self.answer.replicas if self.answer is not None else None

    @property
    def gpus(self) -> int | None:
        return self.answer.replicas * self.tp * self.pp if self.answer is not None else None

    def record(self) -> dict:
        if self.answer is None:
            return {"replicas": None, "gpus": None, "why": self.why,
                    "simulations_run": self.simulations_run}  # fmt: skip
        return {
            "hardware": self.hardware,
            "tp": self.tp,
            "replicas": self.replicas,
            "gpus": self.gpus,
            "p99_ttft_ms": self.answer.at_capacity.p99_ttft_ms,
            "p99_tpot_ms": self.answer.at_capacity.p99_tpot_ms,
            "probes": [p.record() for p in self.probes],
            "simulations_run": self.simulations_run,
        }


@dataclass(frozen=True, slots=True)
class DisaggResult:
    """scenario=disagg's answer; `summary` is summary.json."""

    best: Probe | None  # the split meeting the SLOs at the fewest GPUs (ties: the lower margin)
    per_prefill: tuple[FewestDecode, ...]  # for each prefill count searched
    rate: float  # req/s
    targets_ms: dict[str, float]  # the p99 SLOs by metric: ttft, tpot, e2el
    model: str
    engine: str  # engine@version
    prefill_pool: Pool
    decode_pool: Pool
    link: Link
    kv_transfer_layerwise: bool
    num_requests: int  # per simulation
    max_replicas: int  # per pool
    probes: tuple[Probe, ...]  # in the order tried
    simulations_run: int  # of the split search (the colocated one counts its own)
    colocated: Colocated | None  # None: not searched (disagg.colocated=false)
    wall_time_s: float

    @property
    def summary(self) -> dict:
        return {
            "best": self.best.record() if self.best is not None else None,
            "per_prefill": [f.record() for f in self.per_prefill],
            "rate": self.rate,
            "slo": {f"{m}_ms": t for m, t in self.targets_ms.items()},
            "model": self.model,
            "engine": self.engine,
            "prefill_pool": {"hardware": self.prefill_pool.hardware, "tp": self.prefill_pool.tp},
            "decode_pool": {"hardware": self.decode_pool.hardware, "tp": self.decode_pool.tp},
            "link": self.link.record(),
            "kv_transfer_layerwise": self.kv_transfer_layerwise,
            "num_requests": self.num_requests,
            "max_replicas": self.max_replicas,
            "probes": [p.record() for p in self.probes],
            "simulations_run": self.simulations_run,
            "colocated": self.colocated.record() if self.colocated is not None else None,
            "wall_time_s": self.wall_time_s,
            "audit": probes_audit(
                [p.seeded for p in self.probes]
                + ([p.seeded for p in self.colocated.probes] if self.colocated else [])
            ),
        }
