"""scenario=long_context, the whole study: memory, the engine runs, other architectures and the
remedies, gathered into one typed result (sim/scenarios/long_context/report.py writes it out).

Runs: the long request alone (its TTFT and TPOT), and for each chunked-prefill budget the
workload's traffic with and without it (sim/scenarios/long_context/traffic.py).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import pandas as pd

from sim.config import SimConfig
from sim.engines.windows import WindowRule
from sim.scenarios.long_context.architectures import (
    Architecture,
    ArchitectureError,
    architecture_row,
)
from sim.scenarios.long_context.arithmetic import (
    Fit,
    Prefill,
    flops_crossover_tokens,
)
from sim.scenarios.long_context.decode import Decode, decode_at, kv_read_bytes_per_gpu
from sim.scenarios.long_context.remedies import Remedies, remedies
from sim.scenarios.long_context.runs import (
    Context,
    chunk_tokens,
    fit_for_simulation,
    prefill_split,
)
from sim.scenarios.long_context.tp_choice import TpChoice, choose_tp
from sim.scenarios.long_context.traffic import EngineRuns, Traffic, engine_runs


@dataclass(frozen=True, slots=True)
class Memory:
    """The sequence against the engine's memory plan at the given parallelism
    (summary.json's memory keys: these fields, in this order)."""

    given_parallel: str
    given_gpus: int
    kv_bytes_per_token: int
    kv_bytes_per_token_by_kind: dict[str, int]  # by attention kind
    kv_bytes_per_token_fp8: int
    kv_bytes_sequence: int
    kv_bytes_sequence_fp8: int
    kv_bytes_sequence_per_gpu: int
    weights_bytes_per_gpu: int
    activation_bytes_per_gpu: int
    kv_pool_bytes_per_gpu: int
    fits: bool
    fits_fp8_kv: bool
    why_not: str
    min_tp_to_fit: int | None  # None where only pipeline stages (or nothing) fit
    min_gpus_to_fit: int | None
    min_fit_parallel: str | None
    max_context_tokens: int
    max_context_tokens_fp8_kv: int
    total_tokens: int
    windows: dict[str, int]  # windowed attention kind -> its window (tokens)
    windows_bounded: bool  # the release's allocator holds only the window (sim/engines/windows.py)
    window_rule: str  # the rule that says so ("" without windowed layers)
    why_not_fp8_kv: str  # why FP8 KV holds none: the plan's or the engine's line ("" if some)
    kv_pool_bytes_per_gpu_fp8_kv: int  # the pool the plan leaves with FP8 KV (0: none)
    fp8_kv_refused: bool  # the engine refuses FP8 KV here (why_not_fp8_kv says why)


@dataclass(frozen=True, slots=True)
class Study:
    """Everything the scenario found; `summary` is summary.json."""

    model: str
    hardware: str
    engine: str  # engine@version
    prompt_tokens: int
    output_tokens: int
    trained_context_tokens: int
    memory: Memory
    at: Fit  # where time is measured: the simulated fit, else the given config
    prefill: Prefill  # the prompt walked chunk by chunk
    flops_crossover_tokens: int
    time_crossover_tokens: int | None
    decode: Decode  # one decode step alone at the prompt's context
    runs: EngineRuns | None  # None where nothing fits: nothing simulated
    architectures: tuple[Architecture | ArchitectureError, ...]
    remedies: Remedies
    wall_time_s: float
    scaling: pd.DataFrame  # TTFT split by prompt length
    tp_choice: TpChoice  # the degree studied: the given one, or a valid one and why

    @property
    def simulated(self) -> bool:
        return self.runs is not None

    @property
    def ttft_s(self) -> float:
        """The request's TTFT alone: the engine's where simulated, else the walk's."""
        return self.runs.ttft_s if self.runs is not None else self.prefill.total_s

    @property
    def decode_ms_per_token(self) -> float | None:
        """Its time per output token: the engine's TPOT where simulated, else one step's."""
        return self.runs.tpot_ms if self.runs is not None else self.decode.total_s * 1e3

    @property
    def traffic(self) -> Traffic | None:
        return self.runs.traffic if self.runs is not None else None

    @property
    def steps(self) -> pd.DataFrame | None:
        """The steps of the run with traffic at the engine's settings."""
        return self.traffic.shown.steps if self.traffic is not None else None

    @property
    def requests(self) -> pd.DataFrame | None:
        return self.traffic.shown.requests if self.traffic is not None else None

    @property
    def long_index(self) -> int | None:
        return self.traffic.long_index if self.traffic is not None else None

    @property
    def summary(self) -> dict:
        p = self.prefill
        s = {
            "model": self.model,
            "hardware": self.hardware,
            "engine": self.engine,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "trained_context_tokens": self.trained_context_tokens,
            **asdict(self.memory),
            "simulated": self.simulated,
            "simulated_parallel": self.at.parallel,
            "simulated_gpus": self.at.num_gpus,
            "chunk_tokens": p.budget,
            "ttft_s": self.ttft_s,
            "ttft_breakdown_s": p.breakdown(),
            "prefill": {
                "walk_ttft_s": p.total_s,
                "num_chunks": p.num_chunks,
                "chunk_tokens": p.budget,
                "first_chunk_s": p.first_chunk_s,
                "last_chunk_s": p.last_chunk_s,
            },
            "flops_crossover_tokens": self.flops_crossover_tokens,
            "time_crossover_tokens": self.time_crossover_tokens,
            "decode_ms_per_token": self.decode_ms_per_token,
            "decode": self.decode.summary,
        }
        if self.runs is not None:
            s |= self.runs.summary
        s["architectures"] = [asdict(a) for a in self.architectures]
        s["remedies"] = self.remedies.summary
        if self.tp_choice.why:
            s["tp_choice"] = self.tp_choice.summary
        s["wall_time_s"] = self.wall_time_s
        return s


def run_long_context(cfg: SimConfig, progress=None) -> Study:
    started = time.perf_counter()
    given_cfg = cfg  # the other architectures: each at its largest valid degree up to this tp
    cfg, tp_choice = choose_tp(cfg)
    lc = cfg.long_context
    ctx = Context.of(cfg)
    given, fit = fit_for_simulation(ctx)
    memory = memory_of(ctx, given, fit)
    at = fit or given  # where time is measured: the simulated fit, else the given config
    cost = ctx.cost_model(at.tp, at.pp)
    chunk = chunk_tokens(cost.settings, lc.prompt_tokens)
    split, scaling = prefill_split(cost, lc.prompt_tokens, chunk)
    read = kv_read_bytes_per_gpu(ctx.model, at, cost.settings.kv_cache_dtype)
    dec = decode_at(cost, lc.prompt_tokens, read, at.weights_bytes_per_gpu)
    runs = engine_runs(ctx, fit, cost, dec.total_s, progress) if fit is not None else None
    ttft_s = runs.ttft_s if runs is not None else split.total_s
    return Study(
        model=ctx.model.name,
        hardware=ctx.hardware.name,
        engine=_engine_label(ctx),
        prompt_tokens=lc.prompt_tokens,
        output_tokens=lc.output_tokens,
        trained_context_tokens=ctx.trained_tokens,
        memory=memory,
        at=at,
        prefill=split,
        flops_crossover_tokens=flops_crossover_tokens(ctx.model),
        time_crossover_tokens=_time_crossover(scaling),
        decode=dec,
        runs=runs,
        architectures=tuple(architecture_row(given_cfg, name) for name in lc.architectures or ()),
        remedies=remedies(ctx, at, split, dec, runs, ttft_s),
        wall_time_s=time.perf_counter() - started,
        scaling=pd.DataFrame(scaling),
        tp_choice=tp_choice,
    )


def _engine_label(ctx: Context) -> str:
    st = ctx.settings(ctx.cfg.parallel.tp)
    return f"{st.engine}@{st.version}"


def memory_of(ctx: Context, given: Fit, fit: Fit | None) -> Memory:
    """The memory answer: `given` at the given parallelism, `fit` the simulated one."""
    lc, m = ctx.cfg.long_context, ctx.model
    par = ctx.cfg.parallel
    fp8 = ctx.fp8_fit(par.tp, par.pp)
    refused = fp8 if isinstance(fp8, str) else ""
    smallest = ctx.smallest_fit() if given.fits else fit  # fit: already the smallest
    rule = window_rule_of(ctx.settings(par.tp), m)
    rule_fp8 = rule if refused else window_rule_of(ctx.settings(par.tp, kv_cache_dtype="fp8"), m)
    fp8_longest = 0 if refused else fp8.max_context_tokens
    n = lc.prompt_tokens
    return Memory(
        given_parallel=given.parallel,
        given_gpus=given.num_gpus,
        kv_bytes_per_token=m.kv_bytes_per_token(),
        kv_bytes_per_token_by_kind=m.kv_bytes_per_token_by_kind(),
        kv_bytes_per_token_fp8=m.kv_bytes_per_token("fp8"),
        kv_bytes_sequence=m.kv_bytes_for_sequence(n, "auto", rule.bounded),
        kv_bytes_sequence_fp8=m.kv_bytes_for_sequence(n, "fp8", rule_fp8.bounded),
        kv_bytes_sequence_per_gpu=given.kv_bytes_sequence_per_gpu,
        weights_bytes_per_gpu=given.weights_bytes_per_gpu,
        activation_bytes_per_gpu=given.activation_bytes,
        kv_pool_bytes_per_gpu=given.kv_pool_bytes_per_gpu,
        fits=given.fits,
        fits_fp8_kv=not refused and fp8.fits,
        why_not=given.why,
        min_tp_to_fit=smallest.tp if smallest is not None and smallest.pp == 1 else None,
        min_gpus_to_fit=smallest.num_gpus if smallest is not None else None,
        min_fit_parallel=smallest.parallel if smallest is not None else None,
        max_context_tokens=given.max_context_tokens,
        max_context_tokens_fp8_kv=fp8_longest,
        total_tokens=ctx.total_tokens,
        windows={x.attention.value: x.window_tokens for x in m.layers if x.window_tokens},
        windows_bounded=rule.bounded,
        window_rule=rule.why,
        why_not_fp8_kv=refused or ("" if fp8_longest else fp8.why),
        kv_pool_bytes_per_gpu_fp8_kv=0 if refused else fp8.kv_pool_bytes_per_gpu,
        fp8_kv_refused=bool(refused),
    )


def window_rule_of(settings, model) -> WindowRule:
    """How the resolved release sizes `model`'s windowed layers (its windows_bounded and rule;
    "" for a model without windowed layers)."""
    if not any(layer.window_tokens for layer in model.layers):
        return WindowRule(False, "")
    return WindowRule(settings.windows_bounded, settings.rules.get("windows_bounded", ""))


def _time_crossover(scaling: list[dict]) -> int | None:
    """The first scaling length at which the attention part of TTFT exceeds the linear part."""
    return next((r["prompt_tokens"] for r in scaling if r["attention"] > r["linear"]), None)
