"""scenario=long_context, the engine runs: the long request alone, then for each traffic
variant (a chunked-prefill budget, or vLLM's cap on one request's chunk) the workload's
traffic with and without it (common random numbers: the same co-tenants), and what they show.

The co-tenants measured are those that arrive while the long request is in the engine.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from sim.cost.step import CostModel
from sim.run.findings import merge_records
from sim.scenarios.long_context.arithmetic import Fit, walk_prefill
from sim.scenarios.long_context.runs import (
    TAIL_S,
    Context,
    Cotenants,
    EngineRun,
    background_workload,
    chunk_tokens,
    cotenant_figures,
    long_request_figures,
    run_all,
    sim_config,
    with_long_request,
)
from sim.workload.generate import Workload


@dataclass(frozen=True, slots=True)
class Variant:
    """The engine settings one traffic run pair uses."""

    budget: int  # max_num_batched_tokens
    long_prefill_token_threshold: int


@dataclass(frozen=True, slots=True)
class BudgetRun:
    """One variant's pair of traffic runs: the long request's figures, the co-tenants' with
    and without it."""

    variant: Variant
    engine_default: bool  # the engine's own settings
    long_ttft_s: float
    long_tpot_ms: float | None
    with_long: Cotenants
    without_long: Cotenants
    max_step_s: float
    max_step_without_s: float

    @property
    def summary(self) -> dict:
        return {
            **asdict(self.variant),
            "engine_default": self.engine_default,
            "long_ttft_s": self.long_ttft_s,
            "long_tpot_ms": self.long_tpot_ms,
            "with": asdict(self.with_long),
            "without": asdict(self.without_long),
            "max_step_s": self.max_step_s,
            "max_step_without_s": self.max_step_without_s,
        }


@dataclass(frozen=True, slots=True)
class Traffic:
    """Every variant's runs, in the order traffic_variants gives them."""

    by_budget: tuple[BudgetRun, ...]
    background: str  # the background workload's description
    shown: EngineRun  # the run with the long request at the engine's settings (steps kept)
    long_index: int  # the long request's index (request_id) in it
    not_run: tuple[str, ...]  # variants whose memory plan cannot hold the long request: why

    @property
    def engine_run(self) -> BudgetRun:
        """The runs at the engine's own settings (the last such, as there is one)."""
        return [r for r in self.by_budget if r.engine_default][-1]


@dataclass(frozen=True, slots=True)
class RunTotals:
    simulations: int
    steps: int
    simulated_s: float


@dataclass(frozen=True, slots=True)
class EngineRuns:
    """What the engine runs give the summary; `traffic` is None without background traffic."""

    ttft_s: float  # the engine's, alone (equal to the walk's total)
    tpot_ms: float | None
    memory_plan: dict  # the simulated run's memory plan, written out as it is
    totals: RunTotals
    traffic: Traffic | None
    audit: dict | None = None  # the physics audit of every engine run (merge_records)

    @property
    def summary(self) -> dict:
        """The keys these runs add to summary.json (ttft_s and decode_ms_per_token replace
        the walk's in place: Study.summary)."""
        out = {"memory_plan_simulated": self.memory_plan, "engine_runs": asdict(self.totals),
               "audit": self.audit}  # fmt: skip
        if self.traffic is not None:
            own = self.traffic.engine_run
            out["cotenant"] = {"with": asdict(own.with_long), "without": asdict(own.without_long)}
            out["ttft_with_traffic_s"] = own.long_ttft_s
            out["cotenant_by_budget"] = [r.summary for r in self.traffic.by_budget]
            out["cotenant_budgets_not_run"] = list(self.traffic.not_run)
            out["background"] = self.traffic.background
        return out


def traffic_variants(ctx: Context, fit: Fit) -> tuple[list[Variant], list[str]]:
    """The engine settings the traffic runs compare: each chunked-prefill budget, and (vLLM)
    the engine's budget with a cap on one request's chunk (long_prefill_token_threshold) so
    that waiting prompts are admitted beside the long one; and, apart, the budgets whose
    memory plan cannot hold the long request at fit's parallelism (a larger budget's profile
    run leaves a smaller pool), each with why, where the engine would refuse it at start-up."""
    settings = ctx.settings(fit.tp)
    budget = settings.max_num_batched_tokens
    rows = [
        Variant(b, settings.long_prefill_token_threshold)
        for b in sorted(set(ctx.cfg.long_context.budgets or ()) | {budget})
    ]
    if settings.scheduler.startswith("vllm") and not settings.long_prefill_token_threshold:
        rows.append(Variant(budget, budget // 4))
    run, not_run = [], []
    for v in rows:
        if v.budget != budget:  # (the engine's own budget is the one `fit` holds)
            held = ctx.fit(fit.tp, fit.pp, **_changes(v))
            if not held.fits:
                not_run.append(f"a budget of {v.budget:,}: {held.why}")
                continue
        run.append(v)
    return run, not_run


def _changes(variant: Variant) -> dict:
    """The engine settings a variant changes."""
    return {
        "max_num_batched_tokens": variant.budget,
        "long_prefill_token_threshold": variant.long_prefill_token_threshold,
    }


def _variant_chunk(cost: CostModel, variant: Variant, prompt_tokens: int) -> int:
    """The long prompt's chunk under a traffic variant's settings (chunk_tokens' rule)."""
    return chunk_tokens(replace(cost.settings, **_changes(variant)), prompt_tokens)


def engine_runs(ctx: Context, fit: Fit, cost: CostModel, step_s: float, progress) -> EngineRuns:
    """The request alone, then each traffic variant with and without it (`cost`: the step
    cost model at fit's parallelism; `step_s`: a decode step alone at the prompt's context)."""
    lc = ctx.cfg.long_context
    settings = ctx.settings(fit.tp)
    engine = Variant(settings.max_num_batched_tokens, settings.long_prefill_token_threshold)
    alone, _ = with_long_request(None, 0.0, lc.prompt_tokens, lc.output_tokens)
    jobs = [(sim_config(ctx, fit), ctx.model, alone, False)]
    variants, not_run = traffic_variants(ctx, fit) if lc.background else ([], [])
    if variants:  # traffic until the long request's slowest variant is surely done
        prefill_s = max(
            walk_prefill(cost, lc.prompt_tokens, _variant_chunk(cost, v, lc.prompt_tokens)).total_s
            for v in variants
        )
        life = 1.3 * prefill_s + 5 * lc.output_tokens * step_s  # decode beside the traffic
        background = background_workload(ctx.cfg, lc.arrival_s + life + TAIL_S)
        mixed, k = with_long_request(background, lc.arrival_s, lc.prompt_tokens, lc.output_tokens)
    for v in variants:
        ours = v == engine
        c = sim_config(ctx, fit, **({} if ours else _changes(v)))
        jobs += [(c, ctx.model, mixed, ours), (c, ctx.model, background, False)]
    results = run_all(jobs, lc.jobs, progress)
    totals = RunTotals(
        simulations=len(results),
        steps=sum(r.num_steps for r in results),
        simulated_s=sum(r.sim_s for r in results),
    )
    solo = long_request_figures(results[0].requests, 0)
    traffic = None
    if variants:
        rows = []
        for i, v in enumerate(variants):
            with_run, without_run = results[1 + 2 * i], results[2 + 2 * i]
            rows.append(_budget_run(v, v == engine, with_run, without_run, mixed, k, lc.arrival_s))
            if v == engine:
                shown = with_run
        traffic = Traffic(tuple(rows), background.description, shown, k, tuple(not_run))
    audit = merge_records([r.audit for r in results])
    return EngineRuns(solo.ttft_s, solo.tpot_ms, results[0].memory_plan, totals, traffic, audit)


def _budget_run(
    v: Variant,
    ours: bool,
    with_run: EngineRun,
    without_run: EngineRun,
    mixed: Workload,
    k: int,
    arrival_s: float,
) -> BudgetRun:
    """A variant's pair of runs: co-tenants are the requests arriving from the long one's
    arrival to its last token (their ids shift by one where the long one is absent)."""
    long = long_request_figures(with_run.requests, k)
    ids = np.flatnonzero((mixed.arrival_s >= arrival_s) & (mixed.arrival_s <= long.finish_s))
    ids = ids[ids != k]
    return BudgetRun(
        variant=v,
        engine_default=ours,
        long_ttft_s=long.ttft_s,
        long_tpot_ms=long.tpot_ms,
        with_long=cotenant_figures(with_run.requests, ids),
        without_long=cotenant_figures(without_run.requests, ids - (ids > k)),
        max_step_s=with_run.max_step_s,
        max_step_without_s=without_run.max_step_s,
    )
