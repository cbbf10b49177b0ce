"""Everything a run derives from its config before the clock starts: the GPU, the model, the
engine's resolved settings, the memory plan and the kernel pricer; and the replicas built
from them."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from sim.config import SimConfig
from sim.cost.comm import topology
from sim.cost.prior import CostProfile
from sim.cost.profiles import PricingChoice, choose_pricer
from sim.cost.step import CostModel
from sim.engines.resolve import after_memory, resolve
from sim.engines.settings import EngineSettings
from sim.engines.speculative import drafts_per_step
from sim.errors import UserError
from sim.kv.memory import MemoryPlan, plan_memory
from sim.run.calibration import Applied, Terms, apply, deployment_of
from sim.run.engine import PP_SCHEDULERS, Engine
from sim.run.metrics import StepLog
from sim.run.phases import PhaseLog
from sim.schedulers.base import SchedulerOptions
from sim.specs.hardware import Hardware, load_hardware
from sim.specs.links import link_names
from sim.specs.model import ModelSpec
from sim.specs.model_config import load_model


def _engine_args(cfg: SimConfig, model: ModelSpec) -> dict:
    """The user's engine_args; for trtllm's offline entry point (trtllm-bench throughput)
    also the dataset lengths and weight dtype its settings derive from, unless given."""
    args = dict(cfg.engine_args)
    if str(cfg.engine).split("@")[0].strip().lower() == "trtllm" and cfg.entry_point == "offline":
        w = cfg.workload
        derived = {
            "target_input_len": w.input_len,
            "target_output_len": w.output_len,
            "dtype": model.resolve_weight_dtype(cfg.dtype),
        }
        args = derived | {k: v for k, v in args.items() if v is not None}
    return args


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
    # the deployment's calibrated terms (calibration=PATH, sim/run/calibration.py), or None
    calibration: Applied | None = None

    @classmethod
    def from_config(
        cls, cfg: SimConfig, model: ModelSpec | None = None, terms: Terms | None = None
    ) -> Setup:
        """`model`, when given, replaces the one cfg.model names (long_context: a model
        allowed a context beyond its trained length); `terms`, when given, are the run's
        calibrated terms in place of calibration=PATH's (python -m sim.calibrate's fit)."""
        hardware = load_hardware(cfg.hardware)
        model = model or load_model(cfg.model)
        _check_heads(model, cfg.parallel.tp)
        par = cfg.parallel
        settings = resolve(
            cfg.engine, hardware, model, par.tp, cfg.entry_point, _engine_args(cfg, model),
            workers=par.tp * par.pp,
        )  # fmt: skip
        return cls._build(cfg, settings, hardware, model, None, terms)

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
    def _build(
        cls, cfg, settings, hardware: Hardware, model: ModelSpec, kernel_version, terms=None
    ) -> Setup:
        par = cfg.parallel
        tp = par.tp
        check_parallel(model, settings, par.tp, par.pp, par.ep, par.dp)
        if par.node_link not in link_names():
            raise UserError(
                f"parallel.node_link={par.node_link!r} is not in hardware/links.yaml; "
                f"choose one of: {', '.join(link_names())}"
            )
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
        applied = calibrated(cfg, settings, hardware, model, terms)
        return cls(cfg, hardware, model, settings, memory, prior, pricing, applied)

    @property
    def dp_lockstep(self) -> bool:
        par = self.config.parallel
        if par.dp_lockstep is not None:
            return par.dp_lockstep and par.dp > 1
        vllm = self.settings.scheduler.startswith("vllm")
        return par.dp > 1 and vllm and self.model.moe is not None

    def cost_model(self) -> CostModel:
        par = self.config.parallel
        return CostModel(
            self.model,
            self.settings,
            par.tp,
            self.config.dtype,
            self.pricing.pricer,
            self.prior,
            par.pp,
            par.ep,
            topology(par.tp, par.pp, par.gpus_per_node, par.node_link, self.hardware, par.ep),
            self.terms.cost_scales if self.terms else None,
        )

    @property
    def deployment(self) -> dict:
        """The deployment this run is calibrated and matched as."""
        return deployment_key(self.config, self.settings, self.hardware, self.model)

    @property
    def terms(self) -> Terms | None:
        """The calibrated terms this run is priced with (None: uncalibrated)."""
        return self.calibration.terms if self.calibration else None

    def engines(
        self,
        steps: StepLog,
        first_replica: int = 0,
        phases: PhaseLog | None = None,
        measure_from: int = 0,
        sends_kv: bool = False,
    ) -> list[Engine]:
        """The run's parallel.dp replicas, numbered from `first_replica`, whole: each with its
        scheduler's options (draft acceptance drawn per replica of this setup, warm-up requests
        before `measure_from`, a disaggregated prefill pool's replicas holding KV until sent)
        and, when traced, the phase log."""
        cost = self.cost_model()
        par = self.config.parallel
        spec = drafts_per_step(self.settings) > 0
        return [
            Engine(
                self.settings,
                self.memory,
                cost,
                steps,
                replica=first_replica + k,
                pp=par.pp,
                fast_forward=self.config.fast_forward,
                host_bytes_per_s=self.hardware.pcie_bytes_per_s,
                options=SchedulerOptions(
                    np.random.default_rng([self.config.seed, k]) if spec else None,
                    measure_from,
                    sends_kv,
                    par.pp,
                ),
                phases=phases,
            )
            for k in range(par.dp)
        ]


def calibrated(cfg: SimConfig, settings, hardware: Hardware, model: ModelSpec, terms):
    """The run's calibration: `terms` given by the fit, else calibration=PATH's terms for the
    run's deployment (or the record of why none matched), else None."""
    if terms is not None:  # (the record's path: none, the terms are the fit's own)
        key = deployment_key(cfg, settings, hardware, model)
        return Applied(terms, {"path": None, "deployment": key, "terms": terms.as_dict()})
    if not cfg.calibration:
        return None
    return apply(cfg.calibration, deployment_key(cfg, settings, hardware, model))


def deployment_key(cfg: SimConfig, settings, hardware: Hardware, model: ModelSpec) -> dict:
    """The deployment a run is calibrated and matched as (sim/run/calibration.py)."""
    par = cfg.parallel
    return deployment_of(
        model.name, hardware.name, f"{settings.engine}@{settings.version}", par.tp, par.pp,
        par.ep, model.resolve_weight_dtype(cfg.dtype),
    )  # fmt: skip


def _check_heads(model: ModelSpec, tp: int) -> None:
    why = model.tp_error(tp)
    if why:
        raise UserError(why)


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
