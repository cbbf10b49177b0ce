"""One simulation from a SimConfig to its results: resolve, plan, generate, drive, measure."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from sim.config import SimConfig
from sim.cost import CostModel
from sim.cost_profile import CostProfile
from sim.driver import Progress, check_conservation, run_simpy
from sim.engine import PP_SCHEDULERS, Engine
from sim.errors import UserError
from sim.gpu_profile import PricingChoice, choose_pricer
from sim.hardware import Hardware, load_hardware
from sim.memory import MemoryPlan, plan_memory
from sim.metrics import (
    StepLog,
    bench_summary,
    full_loop_throughputs,
    goodput,
    requests_frame,
    sim_figures,
)
from sim.model import ModelSpec
from sim.model_config import load_model
from sim.outputs import ParquetChunks
from sim.overview import StepOverview, of_file, of_frame
from sim.profiles import after_memory, resolve
from sim.records import merged
from sim.scheduler import StepPlan
from sim.settings import EngineSettings
from sim.workload import Workload, generate


@dataclass(frozen=True, slots=True)
class Setup:
    """Everything a run derives from its config before the clock starts."""

    config: SimConfig
    hardware: Hardware
    model: ModelSpec
    settings: EngineSettings
    memory: MemoryPlan
    prior: CostProfile
    pricing: PricingChoice

    @classmethod
    def from_config(cls, cfg: SimConfig, model: ModelSpec | None = None) -> Setup:
        """`model`, when given, replaces the one cfg.model names (long_context: a model
        allowed a context beyond its trained length)."""
        hardware = load_hardware(cfg.hardware)
        model = model or load_model(cfg.model)
        _check_heads(model, cfg.parallel.tp)
        settings = resolve(
            cfg.engine, hardware, model, cfg.parallel.tp, cfg.entry_point, cfg.engine_args
        )
        return cls._build(cfg, settings, hardware, model, None)

    @classmethod
    def from_settings(
        cls, cfg: SimConfig, settings: EngineSettings, kernel_version: str | None
    ) -> Setup:
        """The run of `cfg` with these engine settings, as resolve() returns them (before the
        memory plan sizes what an engine derives from its KV pool), priced with the kernels
        measured for `kernel_version` of the engine (default: the settings' own version).
        upgrade_diff builds its mixtures of two versions' settings this way."""
        model = load_model(cfg.model)
        _check_heads(model, cfg.parallel.tp)
        return cls._build(cfg, settings, load_hardware(cfg.hardware), model, kernel_version)

    @classmethod
    def _build(cls, cfg, settings, hardware: Hardware, model: ModelSpec, kernel_version) -> Setup:
        par = cfg.parallel
        tp = par.tp
        check_parallel(model, settings, par.tp, par.pp, par.ep, par.dp)
        memory = plan_memory(hardware, model, settings, tp, cfg.dtype, par.pp, par.ep)
        settings = after_memory(settings, memory.kv_capacity_tokens)
        prior = CostProfile.load("prior")
        if par.link_bytes_per_s is not None:  # the peer link; host transfers keep PCIe
            hardware = replace(hardware, nvlink_bytes_per_s=par.link_bytes_per_s)
        if par.link_latency_s is not None:
            prior = replace(prior, allreduce_latency_s=par.link_latency_s)
        pricing = choose_pricer(
            hardware, cfg.cost_profile, prior, settings.engine, kernel_version or settings.version
        )
        return cls(cfg, hardware, model, settings, memory, prior, pricing)

    @property
    def dp_lockstep(self) -> bool:
        par = self.config.parallel
        if par.dp_lockstep is not None:
            return par.dp_lockstep and par.dp > 1
        vllm = self.settings.scheduler.startswith("vllm")
        return par.dp > 1 and vllm and self.model.moe is not None

    def cost_model(self) -> CostModel:
        return CostModel(
            self.model,
            self.settings,
            self.config.parallel.tp,
            self.config.dtype,
            self.pricing.pricer,
            self.prior,
            self.config.parallel.pp,
            self.config.parallel.ep,
        )

    def engines(self, steps: StepLog) -> list[Engine]:
        cost = self.cost_model()
        par = self.config.parallel
        return [
            Engine(
                self.settings,
                self.memory,
                cost,
                steps,
                replica=k,
                pp=par.pp,
                fast_forward=self.config.fast_forward,
                seed=self.config.seed,
                host_bytes_per_s=self.hardware.pcie_bytes_per_s,
            )
            for k in range(par.dp)
        ]


def _check_heads(model: ModelSpec, tp: int) -> None:
    if model.num_q_heads % tp:
        raise UserError(
            f"parallel.tp={tp} must divide {model.name}'s {model.num_q_heads} attention heads"
        )


def check_parallel(
    model: ModelSpec, settings: EngineSettings, tp: int, pp: int, ep: int, dp: int = 1
) -> None:
    if pp > 1 and settings.speculative_method != "none":
        raise UserError(
            f"parallel.pp={pp} with speculative_method={settings.speculative_method}: "
            "vLLM does not run speculative decoding with pipeline parallelism"
        )
    if pp > model.num_layers:
        raise UserError(f"parallel.pp={pp} exceeds {model.name}'s {model.num_layers} layers")
    if pp > 1 and settings.scheduler not in PP_SCHEDULERS:
        raise UserError(
            f"parallel.pp={pp}: pipeline parallelism is modelled for vLLM's V1 engine (0.8+) "
            f"only, not {settings.engine}@{settings.version}; use parallel.tp"
        )
    if ep > 1:
        if model.moe is None:
            raise UserError(f"parallel.ep={ep}: {model.name} is not a mixture-of-experts model")
        if ep not in (tp, tp * dp):
            raise UserError(
                f"parallel.ep={ep}: experts are split over a replica's tensor-parallel group "
                f"(ep = tp = {tp}) or over every GPU of the data-parallel ranks (ep = tp x dp "
                f"= {tp * dp}), or not at all (1)"
            )
        if ep > tp and not settings.scheduler.startswith("vllm_v1"):
            raise UserError(
                f"parallel.ep={ep} across data-parallel ranks is modelled for vLLM's V1 engine "
                f"only, not {settings.engine}@{settings.version}"
            )
        if model.moe.num_experts % ep:
            raise UserError(
                f"parallel.ep={ep} must divide {model.name}'s {model.moe.num_experts} experts"
            )


@dataclass(frozen=True, slots=True)
class RunResult:
    setup: Setup
    workload: Workload
    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: dict
    itl: tuple[np.ndarray, np.ndarray]  # distinct gaps between a request's tokens, counts
    phases: pd.DataFrame | None = None  # each request's phases (sim/timeline.py), when traced
    # streamed: every step went to steps.parquet as the run went; `steps` is then a sample
    # of them and this the report's view (sim/overview.py)
    streamed: StepOverview | None = None

    @property
    def overview(self) -> StepOverview:
        return self.streamed or of_frame(self.steps)

    @property
    def itl_s(self) -> np.ndarray:
        """Every gap between consecutive tokens of a measured request, pooled (ascending)."""
        return np.repeat(*self.itl)


def request_lifetime_s(setup: Setup, prompt: int, output: int, batch: int) -> float:
    """The cost model's estimate of one request's lifetime in a steady closed loop of `batch`
    requests per replica: its prompt prefilled in one step beside the others' decodes, then
    `output - 1` decode steps at the mean context."""
    from sim.request import Request

    cost = setup.cost_model()
    req = Request(0, 0.0, prompt, output, [], 1)
    others = batch - 1
    ctx = prompt + output // 2
    first = StepPlan(
        [req] * batch, [prompt] + [1] * others, [0] + [ctx] * others, prompt, others, 0
    )
    decode = StepPlan([req] * batch, [1] * batch, [ctx] * batch, 0, batch, 0)
    return cost.step_time_s(first) + (output - 1) * cost.step_time_s(decode)


def stagger_first_wave(workload: Workload, setup: Setup) -> Workload:
    """A closed loop whose first `concurrency` requests start evenly over one request lifetime
    (workload.stagger): the steady state a long benchmark drifts into, where prompts arrive
    one at a time, reached without simulating the drift."""
    c = workload.concurrency
    if not c:
        raise UserError("workload.stagger=true needs a closed loop (workload.concurrency)")
    c = min(c, len(workload))
    per_replica = max(1, -(-c // setup.config.parallel.dp))
    prompt = int(np.mean(workload.prompt_len[:c]))
    output = int(np.mean(workload.output_len[:c]))
    life = request_lifetime_s(setup, prompt, output, per_replica)
    gap = life / c
    arrival = np.maximum(workload.arrival_s, np.minimum(np.arange(len(workload)), c - 1) * gap)
    what = f"{workload.description}; first {c} spread over {life:.3g} s (one request lifetime)"
    return replace(workload, arrival_s=arrival, description=what)


STREAM_FROM_REQUESTS = 100_000  # output.stream=null streams the steps of runs this long


def streams(cfg: SimConfig, num_requests: int) -> bool:
    """Whether a run writing into a run dir streams its steps there (output.stream)."""
    if cfg.output.stream is None:
        return num_requests >= STREAM_FROM_REQUESTS and not cfg.trace
    if cfg.output.stream and cfg.trace:
        raise UserError(
            "output.stream=true and trace=true: the timeline needs every step in memory; "
            "trace a shorter run, or leave output.stream unset"
        )
    return cfg.output.stream


def simulate(
    cfg: SimConfig,
    progress: Progress | None = None,
    setup: Setup | None = None,
    workload: Workload | None = None,
    run_dir: Path | None = None,
) -> RunResult:
    """Run `cfg` (with `setup` and `workload`, when given, in place of the ones its config
    resolves to and generates). With `run_dir`, a long run (see streams()) writes its
    steps.parquet there a chunk at a time as it goes."""
    if cfg.disagg.enabled:  # separate prefill and decode pools
        from sim.disagg import simulate_disagg

        if setup is not None:
            raise UserError(
                "disagg.enabled=true: this task builds one engine setup; disaggregated pools "
                "run under task=simulate (and its sweeps) and scenario=disagg"
            )
        return simulate_disagg(cfg, progress, workload)
    started = time.perf_counter()
    setup = setup or Setup.from_config(cfg)
    if workload is None:
        workload = generate(cfg.workload, np.random.default_rng(cfg.seed))
    if cfg.workload.stagger:
        workload = stagger_first_wave(workload, setup)
    g, b = workload.content_block_tokens, setup.memory.block_size
    if g % b and b % g:
        raise UserError(
            f"the workload's {g}-token content blocks do not align with KV blocks "
            f"of {b} tokens; use a block_size that divides or is a multiple of {g}"
        )
    stream = run_dir is not None and streams(cfg, len(workload))
    log = StepLog(ParquetChunks(run_dir / "steps.parquet")) if stream else StepLog()
    try:
        return _run(cfg, progress, setup, workload, log, started)
    except BaseException:
        if stream:  # no half-written steps.parquet
            log.sink.abort()
        raise


def _run(cfg, progress, setup: Setup, workload: Workload, log: StepLog, started) -> RunResult:
    engines = setup.engines(log)
    if cfg.trace:
        from sim.timeline import PhaseLog

        phase_log = PhaseLog()
        for e in engines:
            e.phases, e.fast_forward = phase_log, False  # every step handed over, one by one
    for e in engines:
        e.scheduler.itl.measure_from = workload.warmup
    outcome = run_simpy(
        workload,
        engines,
        until_s=cfg.max_sim_time_s,
        progress=progress,
        router=cfg.parallel.router,
        lockstep=setup.dp_lockstep,
    )
    tally = check_conservation(outcome, engines)
    requests = requests_frame(outcome.records, workload.priority)
    streamed = None
    if log.sink is not None:
        log.close()
        figures = log.figures(setup.memory.num_blocks)
        streamed = of_file(log.sink.path, figures["steps"], figures["sim_time_s"])
        steps = streamed.sample
    else:
        steps = log.frame()
    itl = merged([e.scheduler.itl for e in engines])  # warm-up requests' gaps left out
    summary, _, window = headline(cfg, workload, requests, itl)
    summary["sim"] = sim_figures(log, requests, setup.memory.num_blocks) | {
        **requests_record(requests, workload, window, outcome, tally),
        **setup.pricing.record(),
        "workload": workload.description,
        "fast_forwarded_steps": sum(e.num_fast_forwarded_steps for e in engines),
        "steps_streamed": log.sink is not None,
        "kv_offload": _offload_record(engines),
        "wall_time_s": time.perf_counter() - started,
    }
    summary |= _bench_header(cfg, setup, workload)
    summary["config"] = asdict(cfg)
    summary["engine_settings"] = setup.settings.as_mapping()
    summary["memory_plan"] = setup.memory.record()
    phases = None
    if cfg.trace:
        finish = dict(zip(requests["request_id"].tolist(), requests["finish_s"].tolist(),
                          strict=True))  # fmt: skip
        phases = phase_log.frame(finish)
    return RunResult(setup, workload, requests, steps, summary, itl, phases, streamed)


def headline(cfg: SimConfig, workload: Workload, requests: pd.DataFrame, itl):
    """The bench fields over the measured requests (warm-up ones left out), goodput under the
    SLOs set, and a closed loop's full-loop throughputs: (summary, measured requests, the
    full-loop window or None)."""
    measured = requests[requests["request_id"] >= workload.warmup] if workload.warmup else requests
    summary = bench_summary(measured, itl)
    if targets := cfg.slo.targets():
        summary |= goodput(measured, summary["duration"], targets)
        summary["slo"] = {f"{m}_ms": v for m, v in targets.items()}
    window = None
    if workload.warmup and workload.concurrency:
        full = full_loop_throughputs(requests, workload.warmup)
        if full is not None:
            window = full.pop("window_s")
            summary |= full
    return summary, measured, window


def requests_record(requests: pd.DataFrame, workload: Workload, window, outcome, tally) -> dict:
    """summary.json `sim`'s account of the requests: how many ended how, the time limit, the
    conservation tally."""
    statuses = requests["status"].value_counts().to_dict()
    finished, rejected = int(statuses.get("finished", 0)), int(statuses.get("rejected", 0))
    return {
        "requests": len(requests),
        "warmup_requests": workload.warmup,
        "throughput_window_s": window,
        "finished": finished,
        "rejected": rejected,
        "unfinished_at_time_limit": len(requests) - finished - rejected,
        "stopped_at_s": outcome.end_s if outcome.stopped_early else None,
        "conservation": tally,
    }


def _offload_record(engines) -> dict | None:
    """The offload tiers' figures summed over the replicas (None: no offloading)."""
    tiers = [e.kv.pool.lower for e in engines if e.kv.pool.lower is not None]
    if not tiers:
        return None
    records = [t.record() for t in tiers]
    return {k: sum(r[k] for r in records) for k in records[0]}


def _bench_header(cfg: SimConfig, setup: Setup, workload: Workload) -> dict:
    """The descriptive fields of a vllm bench serve result."""
    w = cfg.workload
    rate = w.rate if w.kind in ("poisson", "gamma", "constant") else "inf"
    return {
        "backend": f"sim:{setup.settings.engine}@{setup.settings.version}",
        "model_id": setup.model.name,
        "num_prompts": len(workload),
        "request_rate": rate,
        "burstiness": w.burstiness if w.burstiness is not None else 1.0,
        "max_concurrency": workload.concurrency,
    }
