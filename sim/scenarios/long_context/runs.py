"""scenario=long_context: the long request simulated through the engine, alone and among traffic.

    1. memory   the engine's plan at the given parallelism against one sequence (sim/long_context)
    2. prefill  the request alone through the engine (its TTFT), and walked chunk by chunk for
                the split and for every length from 4K up
    3. decode   its time per output token alone, split into weights read and KV read
    4. traffic  the workload's requests (co-tenants) with and without it, per chunk budget
                (sim/scenarios/long_context/traffic.py)
Where it does not fit the given parallelism it is simulated on the smallest that fits, and said
so; where nothing fits, the memory answer stands alone. This module holds what they share: the
Context, the engine's config and workload for a run, one run (EngineRun) and the figures read
off it. The whole study: sim/scenarios/long_context/study.py; architectures and remedies:
architectures.py, remedies.py beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from sim.config import SimConfig
from sim.cost.comm import topology
from sim.cost.prior import CostProfile
from sim.cost.profiles import choose_pricer
from sim.cost.step import CostModel
from sim.engines.resolve import ENGINES, resolve
from sim.engines.settings import EngineSettings
from sim.errors import UserError
from sim.run.setup import Setup
from sim.run.simulate import simulate
from sim.scenarios.fanout import fan_out
from sim.scenarios.long_context.arithmetic import (
    Fit,
    Prefill,
    check_fit,
    smallest_fit,
    walk_prefill,
)
from sim.specs.hardware import Hardware, load_hardware
from sim.specs.model import ModelSpec
from sim.specs.model_config import load_model
from sim.workload.generate import Workload, first_private_ids, generate

SCALING_FROM = 4096  # the TTFT split is shown from this prompt length up
TAIL_S = 30.0  # background traffic continues this long after the long request's estimate


@dataclass(frozen=True, slots=True)
class Context:
    """What every part of the scenario shares: the config, GPU, the model allowed the long
    context, and how to resolve the engine's settings at a parallelism."""

    cfg: SimConfig
    hardware: Hardware
    model: ModelSpec
    total_tokens: int  # prompt + output: the max_model_len the engine must accept
    trained_tokens: int  # the model's own max_position_embeddings

    @classmethod
    def of(cls, cfg: SimConfig, model_name: str | None = None) -> Context:
        lc = cfg.long_context
        total = lc.prompt_tokens + lc.output_tokens
        model = load_model(model_name or cfg.model)
        longer = replace(model, max_position_embeddings=max(model.max_position_embeddings, total))
        return cls(cfg, load_hardware(cfg.hardware), longer, total, model.max_position_embeddings)

    def engine_args(self, **changes) -> dict:
        args = {k: v for k, v in self.cfg.engine_args.items() if v is not None}
        args.setdefault("max_model_len", self.total_tokens)
        names = getattr(ENGINES[self.engine_name], "NAMES", {})
        for key, value in changes.items():
            args[names.get(key, key)] = value
        return args

    @property
    def engine_name(self) -> str:
        return self.cfg.engine.partition("@")[0].strip().lower()

    def settings(self, tp: int, pp: int = 1, **changes) -> EngineSettings:
        return resolve(
            self.cfg.engine, self.hardware, self.model, tp, self.cfg.entry_point,
            self.engine_args(**changes), workers=tp * pp,
        )  # fmt: skip

    def fit(self, tp: int, pp: int = 1, cp: int = 1, **changes) -> Fit:
        return check_fit(
            self.hardware, self.model, self.settings(tp, pp, **changes), self.total_tokens,
            self.cfg.dtype, tp, pp, cp,
        )  # fmt: skip

    def fp8_fit(self, tp: int, pp: int = 1) -> Fit | str:
        """The fit with an FP8 KV cache, or the engine's one-line refusal of it (a release that
        falls back with it to an engine that cannot serve the model)."""
        try:
            return self.fit(tp, pp, kv_cache_dtype="fp8")
        except UserError as exc:
            return str(exc)

    def smallest_fit(self) -> Fit | None:
        """The smallest configuration holding the sequence (pipeline stages only where the
        engine runs them: vLLM V1)."""
        allow_pp = self.settings(self.cfg.parallel.tp).scheduler.startswith("vllm_v1")
        return smallest_fit(lambda tp, pp: self.fit(tp, pp), self.model, allow_pp)

    def cost_model(self, tp: int, pp: int = 1, **changes) -> CostModel:
        """The step cost model at this parallelism, whether or not the sequence fits (the
        time it would take)."""
        s = self.settings(tp, pp, **changes)
        prior = CostProfile.load("prior")
        pricing = choose_pricer(self.hardware, self.cfg.cost_profile, prior, s.engine, s.version)
        par = self.cfg.parallel  # the servers the engine's own runs place the stages on
        where = topology(tp, pp, par.gpus_per_node, par.node_link, self.hardware)
        return CostModel(self.model, s, tp, self.cfg.dtype, pricing.pricer, prior, pp, 1, where)


def chunk_tokens(settings: EngineSettings, prompt_tokens: int) -> int:
    """How many tokens of a prompt prefilled alone one step takes."""
    if not settings.enable_chunked_prefill:
        return prompt_tokens
    chunk = settings.max_num_batched_tokens
    if settings.long_prefill_token_threshold:
        chunk = min(chunk, settings.long_prefill_token_threshold)
    return chunk


def scaling_lengths(prompt_tokens: int) -> list[int]:
    """4K, 8K, ... doubling below the prompt, then the prompt itself."""
    lengths, n = [], SCALING_FROM
    while n < prompt_tokens:
        lengths.append(n)
        n *= 2
    return [*lengths, prompt_tokens]


def fit_for_simulation(ctx: Context) -> tuple[Fit, Fit | None]:
    """(the fit at the given parallelism, the one simulated: that one when it fits, else the
    smallest that does; None when nothing does)."""
    par = ctx.cfg.parallel
    given = ctx.fit(par.tp, par.pp)
    return given, given if given.fits else ctx.smallest_fit()


def sim_config(ctx: Context, fit: Fit, **changes) -> SimConfig:
    """The run's config at the simulated parallelism, its engine accepting the long request.
    Its memory plan sizes windowed layers as the release does (sim/engines/windows.py), as `fit`
    did: the pool is the one the fit was checked against."""
    cfg = ctx.cfg
    args = ctx.engine_args(**changes)
    par = replace(cfg.parallel, tp=fit.tp, pp=fit.pp)
    quiet = replace(cfg.output, report=False, progress=False)
    return replace(cfg, parallel=par, engine_args=args, output=quiet)


def with_long_request(background: Workload | None, arrival_s: float, prompt: int, output: int):
    """The background traffic with one long request inserted at `arrival_s` (its content all
    its own); returns (workload, the long request's index)."""
    block = background.content_block_tokens if background is not None else 16
    need = -(-(prompt + output) // block)
    if background is None or len(background) == 0:
        ids = np.arange(1, need + 1, dtype=np.int64)
        w = Workload(
            np.array([arrival_s]), np.array([prompt]), np.array([output]), ids,
            np.array([0, need], dtype=np.int64), block, None,
            f"one request of {prompt:,} prompt tokens and {output} output tokens",
        )  # fmt: skip
        return w, 0
    b = background
    k = int(np.searchsorted(b.arrival_s, arrival_s, side="right"))
    every = b.ids
    start = int(every.max(initial=0)) + 1
    long_ids = np.arange(start, start + need, dtype=np.int64)
    lo = b.content_offsets[k]
    ids = np.concatenate([every[:lo], long_ids, every[lo:]])
    lengths = np.diff(b.content_offsets)
    lengths = np.insert(lengths, k, need)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(lengths)
    w = replace(
        b,
        arrival_s=np.insert(b.arrival_s, k, arrival_s),
        prompt_len=np.insert(b.prompt_len, k, prompt),
        output_len=np.insert(b.output_len, k, output),
        content_ids=ids,
        content_offsets=offsets,
        fresh_ids=False,
        priority=None if b.priority is None else np.insert(b.priority, k, 0),
        first_private=None if b.first_private is None else first_private_ids(ids, offsets),
        description=f"{b.description}; plus one of {prompt:,} prompt tokens at {arrival_s:g} s",
    )
    return w, k


def background_workload(cfg: SimConfig, duration_s: float) -> Workload:
    """The workload's traffic, enough of it (open loop at a rate) to cover `duration_s`."""
    w = cfg.workload
    if w.kind in ("poisson", "gamma", "constant") and w.rate:
        w = replace(w, num_requests=max(1, math.ceil(w.rate * duration_s)))
    return generate(w, np.random.default_rng(cfg.seed))


@dataclass(frozen=True, slots=True)
class Cotenants:
    """TTFT and TPOT percentiles (ms) of the co-tenants (vllm bench's definitions); None
    where none finished."""

    num_requests: int
    finished: int
    p50_ttft_ms: float | None
    p99_ttft_ms: float | None
    p50_tpot_ms: float | None
    p99_tpot_ms: float | None


def cotenant_figures(requests: pd.DataFrame, ids: np.ndarray) -> Cotenants:
    """The co-tenants `ids` of a run's requests frame."""
    r = requests.set_index("request_id").loc[ids]
    done = r[r["status"] == "finished"]
    p = {}
    for name, col in (("ttft", "ttft_s"), ("tpot", "tpot_s")):
        values = done[col].dropna().to_numpy() * 1e3
        for q in (50, 99):
            p[f"p{q}_{name}_ms"] = float(np.percentile(values, q)) if len(values) else None
    return Cotenants(len(ids), len(done), **p)


@dataclass(frozen=True, slots=True)
class EngineRun:
    """One engine run, as the study reads it: the requests frame, the steps when kept."""

    requests: pd.DataFrame
    steps: pd.DataFrame | None
    max_step_s: float
    sim_s: float  # when the last step ended
    num_steps: int
    memory_plan: dict  # the run's summary["memory_plan"], written out as it is
    audit: dict | None = None  # the run's physics audit (summary.json audit)


def simulate_run(cfg: SimConfig, model: ModelSpec, workload: Workload, keep: bool) -> EngineRun:
    """One engine run (in a joblib worker); its steps kept when `keep`."""
    result = simulate(cfg, setup=Setup.from_config(cfg, model), workload=workload)
    keep_cols = ["request_id", "status", "arrival_s", "first_token_s", "finish_s", "ttft_s"]
    steps = result.steps
    return EngineRun(
        requests=result.requests[[*keep_cols, "tpot_s", "output_tokens"]],
        steps=steps if keep else None,
        max_step_s=float(steps["duration_s"].max()) if len(steps) else 0.0,
        sim_s=float((steps["start_s"] + steps["duration_s"]).max()) if len(steps) else 0.0,
        num_steps=len(steps),
        memory_plan=result.summary["memory_plan"],
        audit=result.summary["audit"],
    )


def run_all(jobs: list[tuple], n_jobs: int | None, progress=None) -> list[EngineRun]:
    """simulate_run for each (cfg, model, workload, keep), `n_jobs` at a time."""
    return fan_out(simulate_run, jobs, n_jobs, progress)


@dataclass(frozen=True, slots=True)
class LongRequest:
    """The long request's own figures in a run."""

    ttft_s: float
    tpot_ms: float | None  # None with a single output token
    finish_s: float


def long_request_figures(requests: pd.DataFrame, k: int) -> LongRequest:
    row = requests.set_index("request_id").loc[k]
    if row["status"] != "finished":
        raise UserError(f"the long request ended {row['status']}: see the run's requests")
    return LongRequest(
        ttft_s=float(row["ttft_s"]),
        tpot_ms=float(row["tpot_s"] * 1e3) if pd.notna(row["tpot_s"]) else None,
        finish_s=float(row["finish_s"]),
    )


def prefill_split(cost: CostModel, prompt_tokens: int, chunk: int) -> tuple[Prefill, list[dict]]:
    """The walk at every scaling length: (the prompt's, the last; a row per length)."""
    rows = []
    for n in scaling_lengths(prompt_tokens):
        last = walk_prefill(cost, n, chunk)
        rows.append({"prompt_tokens": n, "ttft_s": last.total_s, **last.breakdown()})
    return last, rows
