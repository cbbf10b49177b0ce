"""SimConfig: the run's configuration as frozen data, converted once at the edge.

Hydra composes scenarios/ into a plain mapping; `SimConfig.from_mapping` checks every key and
value against the dataclasses below (type, range, choices) and says exactly what is wrong.
The core never sees Hydra.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sim.config_schema import build
from sim.errors import UserError

WORKLOAD_KINDS = ("poisson", "gamma", "constant", "burst", "closed_loop", "trace", "bench_json")
LENGTH_DISTS = ("fixed", "uniform", "lognormal")
AUTO = "auto"  # workload.rate=auto: upgrade_diff chooses it (sim/scenarios/upgrade_diff/rate.py)
TASKS = (
    "simulate",
    "kernel_check",
    "show_engine",
    "validate",
    "upgrade_diff",
    "long_context",
    "capacity",
    "teach",
    "disagg",
)


def _opt(default=None, **checks):
    return field(default=default, metadata=checks)


# Upper bounds on sizes that the simulator materialises (a record per request, content ids per
# token block, an engine per replica, a simulation per seed): an absurd value fails here, with
# its reason, instead of exhausting memory or running for days.
MAX_REQUESTS = 10_000_000
MAX_TOKENS = 2**24  # 16,777,216: more than any model's context window
MAX_GPUS = 4096
MAX_RUNS = 10_000
MAX_SPAN_S = 10**9  # about 30 years: the longest a run's clock, or a trace, may span
_REQUESTS_WHY = "every request is simulated and kept in memory"
_TOKENS_WHY = "more tokens than any model's context window"
_GPUS_WHY = "the largest deployments use a few thousand GPUs"
_RUNS_WHY = "each is a whole simulation"
# Beyond MAX_SPAN_S, float64 seconds lose the step times latencies are made of (at 1e301 s,
# 1e301 + 0.01 == 1e301: every latency would read 0); past it, a time is a unit mix-up anyway.
_SPAN_WHY = "about 30 years, the longest a run may span"


def _requests(default, **checks):
    return _opt(default, max=MAX_REQUESTS, why=_REQUESTS_WHY, **checks)


def _tokens(default, **checks):
    return _opt(default, max=MAX_TOKENS, why=_TOKENS_WHY, **checks)


def _gpus(default, **checks):
    return _opt(default, max=MAX_GPUS, why=_GPUS_WHY, **checks)


def _runs(default, **checks):
    return _opt(default, max=MAX_RUNS, why=_RUNS_WHY, **checks)


def _seconds(default, why=_SPAN_WHY, **checks):
    return _opt(default, max=MAX_SPAN_S, why=why, **checks)


ROUTERS = ("least_loaded", "least_outstanding", "round_robin", "prefix_aware")


@dataclass(frozen=True, slots=True)
class Parallel:
    tp: int = _gpus(1, min=1)  # tensor parallel GPUs per replica
    pp: int = _gpus(1, min=1)  # pipeline stages per replica (micro-batches in flight)
    dp: int = _gpus(1, min=1)  # replicas behind the router
    ep: int = _gpus(1, min=1)  # expert parallel GPUs (MoE): 1, or tp (experts split over TP)
    router: str = _opt("least_loaded", choices=ROUTERS)  # how requests pick a replica
    # The GPU-to-GPU link of this server when it is not the catalogue GPU's (PCIe without
    # peer-to-peer, a slower fabric): bytes/s per direction and the fixed cost of one
    # collective. Collectives without a measured table are priced with them.
    # Replicas step together, each step as long as the slowest replica's. None: as the engine
    # does (vLLM steps the data-parallel ranks of an MoE model together: its expert layers span
    # every rank, and an idle rank runs a dummy batch).
    dp_lockstep: bool | None = None
    link_bytes_per_s: float | None = _opt(None, gt=0)
    link_latency_s: float | None = _opt(None, min=0)
    # Pipeline stages beyond one server: GPUs per server, and the link between servers
    # (hardware/links.yaml) that a stage boundary crossing servers sends its activations over.
    gpus_per_node: int = _gpus(8, min=1)
    node_link: str = "infiniband"


_BURST_WHY = "below it float64 draws of the gaps round to 0: every request arrives at once"
_SIGMA_WHY = "beyond it nearly every length drawn is 1 token or the max_len_factor clip"


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    kind: str = _opt("poisson", choices=WORKLOAD_KINDS)
    num_requests: int | None = _requests(1000, min=1)
    rate: float | str | None = _opt(10.0, gt=0, words=(AUTO,))  # requests per second; a trace
    # (kind=trace) is replayed at this mean rate, its arrival times scaled (None: the trace's own
    # times); auto (scenario=upgrade_diff only): upgrade.auto_rate_fraction x the before
    # version's capacity on this workload
    burstiness: float | None = _opt(None, min=1e-3, low_why=_BURST_WHY)  # gamma shape
    # (--burstiness); None: 1 or the file's
    concurrency: int | None = _opt(None, min=1)  # cap on requests in flight (--max-concurrency)
    input_len: int = _tokens(1024, min=1)  # mean prompt length (fixed / uniform / lognormal)
    output_len: int = _tokens(256, min=1)
    length_dist: str = _opt("fixed", choices=LENGTH_DISTS)
    range_ratio: float = _opt(0.0, min=0, lt=1)  # uniform: len x [1 - r, 1 + r]
    input_sigma: float = _opt(1.0, gt=0, max=10, why=_SIGMA_WHY)  # lognormal: sigma of log(length)
    output_sigma: float = _opt(1.0, gt=0, max=10, why=_SIGMA_WHY)
    max_len_factor: float = _opt(16.0, gt=1)  # lognormal draws clipped at factor x mean
    lengths: str | None = None  # a file to draw (prompt, output) pairs from
    path: str | None = None  # the trace or bench JSON to replay
    shared_prefix_tokens: int = _tokens(0, min=0)  # a system prompt before each request's input
    num_shared_prefixes: int = _requests(1, min=1)  # distinct system prompts, picked uniformly
    turns_per_session: int = _requests(1, min=1)  # >1: each turn's prompt extends the previous turn
    stagger: bool = False  # closed loop: start the first `concurrency` requests evenly spread
    # over one request lifetime (the cost model's estimate) instead of all at t=0, as the
    # clients of a long benchmark drift apart; their first wave then prefills one at a time
    cache_warm: bool = False  # the server already served these very prompts (an earlier run of
    # the same benchmark against it): each prompt's full KV blocks are in the prefix cache at the
    # start, the latest sent last in the pool's LRU order, as far as the pool holds them
    frontend_ms: float = _opt(0.0, min=0, max=60_000)  # the server's front end (HTTP, chat
    # template, hand-off to the engine) per request, one request at a time, between the
    # client's send and the engine's queue: counted in TTFT; 0: the engine sees it at once
    frontend_us_per_token: float = _opt(0.0, min=0, max=1e6)  # and per prompt token
    # (tokenisation), added to frontend_ms
    client_in_process: bool = False  # the benchmark's client runs in the engine's own process
    # (vLLM's AsyncLLMEngine in the benchmark's event loop, as AccelMark's runners): under vLLM
    # V0's async output processing it sees each first token a step late (sim/run/delivery.py)
    warmup_requests: int = _requests(0, min=0)  # the first N requests sent are warm-up: they run,
    # but the bench metrics leave them out (as a benchmark harness's warm-up)
    priority_levels: int = _requests(1, min=1)  # >1: each request draws a priority 0..k-1 (lower
    # first), for engines run with policy=priority
    concurrent_sessions: int = _requests(32, min=1)  # sessions interleaved; a turn follows its
    # previous turn this many arrivals later (open loop: choose it so that gap exceeds E2E)


@dataclass(frozen=True, slots=True)
class OutputConfig:
    report: bool | None = None  # report.md with plots; None: for a single run, not for each
    # point of a sweep (the sweep's own report covers them)
    progress: bool = True  # a progress bar once a run takes more than a few seconds
    stream: bool | None = None  # write steps.parquet a chunk at a time as the run goes, so a
    # run of any length holds one chunk of steps in memory (the report then plots every
    # k-th step); None: when the workload has 100,000 requests or more (and trace is off)


@dataclass(frozen=True, slots=True)
class KernelCheckConfig:
    timings: str | None = None  # a measured kernel table (file or folder) to price
    family: str | None = None  # price with this kernel family of the profile (default: the
    # table's own family when the profile has it)


@dataclass(frozen=True, slots=True)
class ValidateConfig:
    cases: tuple[str, ...] | None = None  # case files (scenario=validate)
    jobs: int | None = _opt(None, min=1)  # cases simulated at once (default: every core)


_AUTO_WHY = "above the capacity the queue grows without end; give workload.rate=R for that"
_LOAD_WHY = "x the before version's capacity: 0.001 is an idle server, 1000 every request at once"
UPGRADE_METRICS = (
    "request_throughput",
    "output_throughput",
    "mean_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "p99_tpot_ms",
)


@dataclass(frozen=True, slots=True)
class UpgradeConfig:
    """scenario=upgrade_diff: which change of engine version (or arguments) to explain."""

    before: str | None = None  # the version upgraded from, name@version
    after: str | None = None  # ... and to
    before_args: Mapping[str, object] = field(default_factory=dict)  # engine_args for one side
    after_args: Mapping[str, object] = field(default_factory=dict)
    baseline: str | None = "simulated"  # simulated | a run dir | a vllm bench serve JSON
    measured_before: str | None = None  # real results of each version (run dir or bench
    measured_after: str | None = None  # JSON): what configuration does not explain
    seeds: int = _runs(3, min=1)  # workload draws; each effect gets a 95% interval over them
    budget: int = _runs(48, min=8)  # simulations per seed for the Shapley values: exact when
    # every subset of the changes that matter fits, else random orders that fit
    headline: str = _opt("auto", choices=("auto", *UPGRADE_METRICS))  # the metric the verdict
    # and the minimal set explain; auto: the one that regressed in measured results, else
    # throughput when it moved beyond the noise, else the largest adverse change (headline.py)
    loads: tuple[float, ...] | None = _opt(
        (0.5, 0.7, 0.85, 1.0, 1.15), min=1e-3, low_why=_LOAD_WHY, max=1e3, why=_LOAD_WHY
    )  # x the before version's
    # capacity (open loop) or x the concurrency (closed loop); empty: no load sweep
    jobs: int | None = _opt(None, min=1)  # simulations at once (default: every core)
    auto_rate_fraction: float = _opt(0.7, min=1e-3, low_why=_LOAD_WHY, max=1.0, why=_AUTO_WHY)
    # workload.rate=auto: this fraction of the before version's capacity (its throughput with
    # every request queued)


ARCHITECTURES = (
    "llama-3.1-8b",  # GQA, 8 KV heads
    "llama-2-7b-hf",  # MHA: every head keeps its KV
    "qwen2.5-7b-instruct-1m",  # GQA, trained to 1M
    "deepseek-v3",  # MLA: a latent per token
    "deepseek-v3.2",  # MLA + sparse attention (top-k with an indexer)
    "gemma-3-27b-it",  # 5 sliding-window layers per full one
    "gpt-oss-120b",  # alternating 128-token sliding windows
    "llama-4-scout-17b-16e",  # chunked-local attention, 3 of 4 layers
    "qwen3-next-80b-a3b",  # hybrid: 3 Gated DeltaNet layers per full one
    "kimi-linear-48b-a3b",  # hybrid: linear (KDA) + MLA
    "minimax-text-01",  # hybrid: 7 lightning (linear) layers per full one
)


@dataclass(frozen=True, slots=True)
class LongContextConfig:
    """scenario=long_context: one very long request among ordinary traffic."""

    prompt_tokens: int = _opt(1048576, min=1, max=2**30, why="the study sizes its KV in memory")
    # (beyond any model's window on purpose: the study says what fits, and where nothing does)
    output_tokens: int = _tokens(256, min=1)
    arrival_s: float = _seconds(30.0, min=0)  # when the long request arrives among the traffic
    background: bool = True  # the workload's traffic around it (the co-tenants)
    budgets: tuple[int, ...] | None = _tokens((2048, 8192, 32768))  # chunked-prefill budgets
    # compared for the co-tenants (the engine's own is always added)
    architectures: tuple[str, ...] | None = ARCHITECTURES  # models compared at this length
    network_bytes_per_s: float = _opt(50e9, gt=0)  # per GPU between nodes (400 Gb/s NIC):
    # KV transfer of a separate prefill pool, context parallelism beyond one node
    jobs: int | None = _opt(None, min=1)  # simulations at once (default: every core)
    adapt_tp: bool = False  # the scenario file's parallel.tp is a default: where the model's
    # heads refuse it, the study runs at a valid degree and says which (a parallel.tp given on
    # the command line is the user's choice and is never replaced)
    extend_context_to: int | None = _opt(None, min=1)  # the longest prompt + output accepted
    # beyond the model's own maximum context (as RoPE scaling with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1
    # lets an engine serve); None: the model's max_position_embeddings
    sparse_prefill_density: float | None = _opt(None, gt=0, max=1)  # the sparse prefill remedy's
    # share of the causal pairs attended; None: from the model's vertical + slash pattern


@dataclass(frozen=True, slots=True)
class SloConfig:
    """Latency targets per request, as `vllm bench serve --goodput ttft:MS tpot:MS e2el:MS`:
    a finished request is good when every target set is met (value <= target); goodput is the
    good requests over the run's duration. None: no target on that metric."""

    ttft_ms: float | None = _opt(None, gt=0)
    tpot_ms: float | None = _opt(None, gt=0)
    e2el_ms: float | None = _opt(None, gt=0)

    def targets(self) -> dict[str, float]:
        """{metric: target in ms} of the targets set, e.g. {"ttft": 2000.0}."""
        pairs = (("ttft", self.ttft_ms), ("tpot", self.tpot_ms), ("e2el", self.e2el_ms))
        return {m: v for m, v in pairs if v is not None}


@dataclass(frozen=True, slots=True)
class CapacityConfig:
    """scenario=capacity: the highest request rate (or fewest replicas for a rate) whose p99
    TTFT and p99 TPOT meet the SLOs (slo.ttft_ms, slo.tpot_ms)."""

    rate: float | None = _opt(None, gt=0)  # None: search the rate on this configuration;
    # a rate: search the fewest replicas (parallel.dp) that serve it within the SLOs
    seeds: int = _runs(3, min=2)  # workload draws per probed rate at first ...
    max_seeds: int = _runs(8, min=2)  # ... and at most, while a probe is too close to call
    confidence: float = _opt(0.95, gt=0.5, lt=1)  # the verdict at a probe must be this sure
    tolerance: float = _opt(0.02, gt=0, lt=1)  # stop when the bracket is this narrow (relative)
    max_probes: int = _runs(24, min=2)  # rates tried at most (each with its seeds)
    max_replicas: int = _gpus(64, min=1)  # replica search: give up beyond this many
    gpu_hour_usd: float | None = _opt(None, gt=0)  # price of one GPU-hour; None: the hardware
    # catalogue's gpu_hour_usd
    jobs: int | None = _opt(None, min=1)  # simulations at once (default: every core)


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """One pool of a disaggregated deployment: its GPUs, their parallelism and how many."""

    hardware: str | None = None  # a GPU of the catalogue; None: the top-level `hardware`
    tp: int | None = _gpus(None, min=1)  # None: parallel.tp
    replicas: int = _gpus(1, min=1)
    engine_args: Mapping[str, object] = field(default_factory=dict)  # over engine_args, for
    # this pool only (say, a larger max_num_seqs for decode, a larger token budget for prefill)


@dataclass(frozen=True, slots=True)
class DisaggConfig:
    """Disaggregated prefill/decode (sim/run/disagg.py): a prefill pool computes each prompt, sends
    its KV cache over `link` to a decode pool, which generates the answer. scenario=disagg
    searches the pool sizes."""

    enabled: bool = False  # simulate with separate pools (scenario=disagg turns it on)
    prefill: PoolConfig = field(default_factory=PoolConfig)
    decode: PoolConfig = field(default_factory=PoolConfig)
    link: str = "infiniband"  # a link of hardware/links.yaml
    link_bytes_per_s: float | None = _opt(None, gt=0)  # per GPU and direction; None: the link's
    link_latency_s: float | None = _opt(None, min=0)  # per transfer; None: the link's
    router: str = _opt("least_loaded", choices=ROUTERS[:3])  # how each pool picks a replica
    # scenario=disagg: the fewest GPUs whose pools meet the SLOs at workload.rate
    max_replicas: int = _gpus(16, min=1)  # per pool, searched at most
    colocated: bool = True  # also find the fewest colocated replicas (parallel.dp) for the rate
    seeds: int = _runs(2, min=1)  # workload draws per probe at first ...
    max_seeds: int = _runs(4, min=1)  # ... and at most, while a probe is too close to call
    jobs: int | None = _opt(None, min=1)  # simulations at once (default: every core)


@dataclass(frozen=True, slots=True)
class TeachConfig:
    """scenario=teach_*: one mechanism, two runs one setting apart
    (sim/scenarios/teach/lessons.py)."""

    lesson: str = "static_vs_continuous"
    long_prompts: int = _requests(3, min=1)  # chunked_prefill: long prompts among the traffic
    long_prompt_tokens: int = _tokens(12288, min=1)  # chunked_prefill, head_of_line
    long_output_tokens: int = _tokens(16, min=1)
    long_arrival_s: float = _seconds(1.0, min=0)  # the first long prompt's arrival
    long_gap_s: float = _seconds(1.0, min=0)  # between long prompts; head_of_line: the short
    # requests start this long after the long one


@dataclass(frozen=True, slots=True)
class SimConfig:
    task: str = _opt("simulate", choices=TASKS)
    seed: int = _opt(0, min=0)
    hardware: str = "h100-sxm"
    model: str = "llama-3.1-8b"
    engine: str = "vllm"
    entry_point: str = _opt("server", choices=("server", "offline"))
    dtype: str = _opt("auto", choices=("auto", "bf16", "fp16", "fp8", "fp8_block", "fp4", "int4"))
    cost_profile: str = "auto"  # auto: the GPU's calibrated profile, else the roofline prior
    calibration: str | None = None  # a deployment calibration (python -m sim.calibrate --runs)
    max_sim_time_s: float | None = _seconds(None, gt=0, why=f"{_SPAN_WHY}; null: no limit")
    # stop the clock here; report the rest
    fast_forward: bool = True  # jump over runs of decode-only steps (same results, faster)
    trace: bool = False  # record each request's phases: trace.json (Perfetto) and timeline.png
    parallel: Parallel = field(default_factory=Parallel)
    engine_args: Mapping[str, object] = field(default_factory=dict)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    kernel_check: KernelCheckConfig = field(default_factory=KernelCheckConfig)
    validate: ValidateConfig = field(default_factory=ValidateConfig)
    upgrade: UpgradeConfig = field(default_factory=UpgradeConfig)
    long_context: LongContextConfig = field(default_factory=LongContextConfig)
    slo: SloConfig = field(default_factory=SloConfig)
    capacity: CapacityConfig = field(default_factory=CapacityConfig)
    teach: TeachConfig = field(default_factory=TeachConfig)
    disagg: DisaggConfig = field(default_factory=DisaggConfig)

    @classmethod
    def from_mapping(cls, data: Mapping) -> SimConfig:
        cfg = build(cls, data)
        if cfg.workload.rate == AUTO and cfg.task != "upgrade_diff":
            raise UserError(
                "workload.rate=auto: only scenario=upgrade_diff chooses a rate (a fraction of the "
                f"before version's capacity); task {cfg.task} needs a number of requests per "
                "second, e.g. workload.rate=8 (scenario=capacity finds the highest rate within "
                "latency SLOs)"
            )
        _check_spans(cfg)
        return cfg


def slowest_rate(num_requests: int) -> float:
    """The lowest request rate whose `num_requests` arrivals fit in MAX_SPAN_S."""
    return num_requests / MAX_SPAN_S


def too_slow(key: str, rate: float, num_requests: int, span_s: float) -> str:
    """Why `num_requests` arrivals at `rate` req/s, over `span_s` seconds, cannot run."""
    return (
        f"{key}={rate:g}: {num_requests:,} requests at that rate arrive over {span_s:.3g} s, more "
        f"than the {MAX_SPAN_S:.0e} s ({_SPAN_WHY}: past it, float64 seconds lose the step times "
        f"latencies are made of); the smallest rate that fits is num_requests / {MAX_SPAN_S:.0e} s "
        f"= {max(slowest_rate(num_requests), rate * span_s / MAX_SPAN_S):.3g} req/s"
    )


def _check_spans(cfg: SimConfig) -> None:
    """The arrivals a config sets end within MAX_SPAN_S (those drawn are checked again as drawn,
    sim/workload/generate.py; a trace's span as it is read, sim/workload/traces.py)."""
    w, n = cfg.workload, cfg.workload.num_requests
    rates = []
    if w.kind in ("poisson", "gamma", "constant", "bench_json") and isinstance(w.rate, float):
        rates.append(("workload.rate", w.rate))
    if cfg.task == "capacity" and cfg.capacity.rate is not None:
        rates.append(("capacity.rate", cfg.capacity.rate))
    for key, rate in rates:
        if n is not None and rate < slowest_rate(n):
            raise UserError(too_slow(key, rate, n, n / rate))
    t = cfg.teach
    last = t.long_arrival_s + (t.long_prompts - 1) * t.long_gap_s
    if cfg.task == "teach" and last > MAX_SPAN_S:
        raise UserError(
            f"teach.long_gap_s={t.long_gap_s:g}: the last of {t.long_prompts} long prompts would "
            f"arrive at {last:.3g} s, past {MAX_SPAN_S:.0e} s ({_SPAN_WHY}); shorten the gap"
        )
