"""scenario=capacity's answer as records: each probe, the rate (or replica) answer, the cost at
it, and CapacityResult, whose `summary` is summary.json."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

from sim.config import SimConfig
from sim.scenarios.probes import Seeded, Verdict, probes_audit
from sim.specs.hardware import Hardware


@dataclass(frozen=True, slots=True)
class Probe:
    """One rate (or replica count) tried: its seeds' figures and the verdict over them (no
    seeds when overloaded: not simulated)."""

    rate: float  # req/s offered to all the replicas
    replicas: int
    seeded: Seeded

    @property
    def verdict(self) -> Verdict:
        return self.seeded.verdict

    @property
    def p99_ttft_ms(self) -> float:
        return self.seeded.mean("p99_ttft_ms")

    @property
    def p99_tpot_ms(self) -> float:
        return self.seeded.mean("p99_tpot_ms")

    @property
    def request_throughput(self) -> float:
        return self.seeded.mean("request_throughput")

    @property
    def output_throughput(self) -> float:
        return self.seeded.mean("output_throughput")

    @property
    def output_tokens_per_request(self) -> float:
        runs = self.seeded.runs
        return sum(r["total_output_tokens"] for r in runs) / max(
            sum(r["completed"] for r in runs), 1
        )

    @property
    def output_throughput_at_rate(self) -> float:
        """Served steadily at the rate r, output tokens leave at r x the mean answer length (the
        run's own output_throughput counts its whole duration, the drain at the end included)."""
        return self.rate * self.output_tokens_per_request

    def record(self) -> dict:
        return {
            "rate": self.rate,
            "replicas": self.replicas,
            **self.seeded.record(),
            "p99_ttft_ms": self.p99_ttft_ms,
            "p99_tpot_ms": self.p99_tpot_ms,
            "request_throughput": self.request_throughput,
            "output_throughput": self.output_throughput,
        }

    def at_capacity_record(self) -> dict:
        """The figures at the capacity, this probe being the one there."""
        return {
            "output_tokens_per_request": self.output_tokens_per_request,
            "output_throughput_at_capacity": self.output_throughput_at_rate,
            "measured_output_throughput_at_capacity": self.output_throughput,
            "request_throughput_at_capacity": self.request_throughput,
            "p99_ttft_ms_at_capacity": self.p99_ttft_ms,
            "p99_tpot_ms_at_capacity": self.p99_tpot_ms,
        }


@dataclass(frozen=True, slots=True)
class RateAnswer:
    """capacity.rate unset: the capacity as a bracket, from the highest rate shown to meet the
    SLOs to the lowest shown to miss them."""

    mode: ClassVar[str] = "rate"
    saturated_rate_per_replica: float  # every request queued at t=0, on one replica
    replicas: int  # parallel.dp
    at_capacity: Probe | None  # the highest rate shown to meet; None when no rate tried does
    capacity_rate_upper: float | None  # the lowest rate above it shown to fail (or overloaded)
    lowest_rate_not_shown_to_meet: float | None
    unclear_rates: tuple[float, ...]  # too close to call at capacity.max_seeds, ascending
    stopped_by: str  # "tolerance" | "noise" | "max_probes" | "no rate meets the SLOs"

    @property
    def saturated_rate(self) -> float:
        return self.saturated_rate_per_replica * self.replicas

    @property
    def capacity_rate(self) -> float:
        return self.at_capacity.rate if self.at_capacity is not None else 0.0

    @property
    def noise_limited(self) -> bool:
        return bool(self.unclear_rates)

    def record(self) -> dict:
        out = {
            "mode": self.mode,
            "saturated_rate": self.saturated_rate,
            "saturated_rate_per_replica": self.saturated_rate_per_replica,
            "capacity_rate": self.capacity_rate,
            "capacity_rate_upper": self.capacity_rate_upper,
            "lowest_rate_not_shown_to_meet": self.lowest_rate_not_shown_to_meet,
            "unclear_rates": list(self.unclear_rates),
            "noise_limited": self.noise_limited,
            "replicas": self.replicas,
        }
        if self.at_capacity is not None:
            out |= self.at_capacity.at_capacity_record()
        return out | {"stopped_by": self.stopped_by}


@dataclass(frozen=True, slots=True)
class ReplicaAnswer:
    """capacity.rate=R: the fewest replicas serving R req/s within the SLOs."""

    mode: ClassVar[str] = "replicas"
    stopped_by: ClassVar[str] = "bisection"
    rate: float  # req/s
    saturated_rate_per_replica: float
    at_capacity: Probe  # the probe of the fewest replicas that meet the SLOs
    unclear_replicas: tuple[int, ...]  # counts too close to call (counted as not enough)

    @property
    def replicas(self) -> int:
        return self.at_capacity.replicas

    @property
    def capacity_rate(self) -> float:
        return self.rate

    @property
    def noise_limited(self) -> bool:
        return bool(self.unclear_replicas)

    def record(self) -> dict:
        return {
            "mode": self.mode,
            "rate": self.rate,
            "saturated_rate_per_replica": self.saturated_rate_per_replica,
            "replicas": self.replicas,
            "capacity_rate": self.capacity_rate,
            "unclear_replicas": list(self.unclear_replicas),
            "noise_limited": self.noise_limited,
            "stopped_by": self.stopped_by,
        } | self.at_capacity.at_capacity_record()


@dataclass(frozen=True, slots=True)
class Cost:
    """GPUs, requests per GPU and, with a price, dollars per million output tokens."""

    gpus: int
    capacity_rate_per_gpu: float
    gpu_hour_usd: float | None
    price_source: str | None  # where gpu_hour_usd came from
    cost_per_million_output_tokens: float | None  # None without a price or output tokens


def cost_figures(
    cfg: SimConfig,
    hardware: Hardware,
    replicas: int,
    capacity_rate: float,
    output_tokens_per_s: float | None,
) -> Cost:
    """GPUs (tp x pp x replicas) x the price of a GPU-hour (capacity.gpu_hour_usd, else the
    hardware catalogue's) over the output tokens per hour produced at the capacity."""
    par = cfg.parallel
    gpus = par.tp * par.pp * replicas
    price = cfg.capacity.gpu_hour_usd or hardware.gpu_hour_usd
    if cfg.capacity.gpu_hour_usd:
        source = "capacity.gpu_hour_usd"
    else:
        source = f"hardware/{hardware.name}.yaml" if price else None
    cost = None
    if price and output_tokens_per_s:
        cost = gpus * price / 3600.0 / output_tokens_per_s * 1e6
    return Cost(gpus, capacity_rate / gpus, price, source, cost)


@dataclass(frozen=True, slots=True)
class CapacityResult:
    """scenario=capacity's answer; `summary` is summary.json."""

    answer: RateAnswer | ReplicaAnswer
    cost: Cost
    targets_ms: dict[str, float]  # the p99 SLOs by metric: ttft, tpot, e2el
    confidence: float
    tolerance: float
    probes: tuple[Probe, ...]  # in the order tried
    simulations_run: int
    model: str
    hardware: str
    engine: str  # engine@version
    tp: int
    pp: int
    workload: str  # workload.kind
    num_requests: int  # per simulation
    wall_time_s: float

    @property
    def summary(self) -> dict:
        return (
            self.answer.record()
            | asdict(self.cost)
            | {
                "slo": {f"{m}_ms": t for m, t in self.targets_ms.items()},
                "confidence": self.confidence,
                "tolerance": self.tolerance,
                "probes": [p.record() for p in self.probes],
                "simulations_run": self.simulations_run,
                "model": self.model,
                "hardware": self.hardware,
                "engine": self.engine,
                "parallel": {"tp": self.tp, "pp": self.pp},
                "workload": self.workload,
                "num_requests": self.num_requests,
                "wall_time_s": self.wall_time_s,
                "audit": probes_audit([p.seeded for p in self.probes]),
            }
        )
