"""scenario=disagg: the prefill:decode split that meets the SLOs at the fewest GPUs.

At workload.rate, a probe simulates a deployment of P prefill and D decode replicas with a few
seeds and computes per seed the margin (the worse of p99 TTFT / slo.ttft_ms and p99 TPOT /
slo.tpot_ms, as scenario=capacity), and a verdict over the seeds with a Student t interval:
meets, fails, or unclear (more seeds, up to disagg.max_seeds; still unclear counts as not
meeting). For P = 1, 2, ... the search finds the fewest D that meet the SLOs (doubling, then
bisection; more prefill replicas never need more decode replicas, so the previous P's answer
bounds the next search from above; when doubling D cuts the margin by less than 3%, the
prefill side is what misses and P moves on), and stops once P prefill replicas and one decode
replica already take as many GPUs as the best deployment found. The answer is the deployment
with the fewest GPUs (ties: the lower margin). Beside it, with disagg.colocated, scenario=capacity's
replica search finds the fewest colocated replicas (prefill and decode on the same GPUs) for
the same rate and SLOs: what disaggregation saves, or costs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from sim.config import SimConfig
from sim.errors import UserError
from sim.run.disagg import Pools
from sim.scenarios.capacity.search import Search as CapacitySearch
from sim.scenarios.capacity.search import search_replicas
from sim.scenarios.disagg.result import Colocated, DisaggResult, FewestDecode, Pool, Probe
from sim.scenarios.fanout import fan_out
from sim.scenarios.probes import OPEN_LOOP, seed_figures, settle
from sim.specs.hardware import load_hardware

CONFIDENCE = 0.95  # each verdict's Student t interval over the seeds, as scenario=capacity's
STALL = 0.97  # doubling the decode replicas must cut the margin by 3% to go on doubling


class Search:
    """The simulations of one split search, disagg.jobs at a time (sim/scenarios/fanout.py),
    and the splits probed so far."""

    def __init__(self, cfg: SimConfig, progress: Callable[[int, None], None] | None = None):
        check(cfg)
        self.cfg = replace(
            cfg,
            output=replace(cfg.output, report=False, progress=False),
            disagg=replace(cfg.disagg, enabled=True),
        )
        self.targets_ms = cfg.slo.targets()
        self.progress = progress
        self.probes: list[Probe] = []
        self.simulations = 0
        d = cfg.disagg
        self.tp_prefill = d.prefill.tp or cfg.parallel.tp
        self.tp_decode = d.decode.tp or cfg.parallel.tp

    def at(self, prefill: int, decode: int) -> SimConfig:
        d = self.cfg.disagg
        return replace(
            self.cfg,
            disagg=replace(
                d,
                prefill=replace(d.prefill, replicas=prefill),
                decode=replace(d.decode, replicas=decode),
            ),
        )

    def run(self, configs: list[SimConfig]) -> list[dict[str, float]]:
        out = fan_out(seed_figures, [(cfg,) for cfg in configs], self.cfg.disagg.jobs)
        self.simulations += len(configs)
        if self.progress:
            self.progress(self.simulations, None)
        return out

    def probe(self, prefill: int, decode: int) -> Probe:
        for p in self.probes:  # asked again by a later search: the same answer
            if (p.prefill_replicas, p.decode_replicas) == (prefill, decode):
                return p
        d = self.cfg.disagg
        gpus = prefill * self.tp_prefill + decode * self.tp_decode
        seeded = settle(self.run, self.at(prefill, decode), self.targets_ms, d.seeds,
                        d.max_seeds, CONFIDENCE)  # fmt: skip
        p = Probe(prefill, decode, gpus, seeded)
        self.probes.append(p)
        return p


def check(cfg: SimConfig) -> None:
    targets = cfg.slo.targets()
    if not {"ttft", "tpot"} & set(targets):
        raise UserError(
            "scenario=disagg needs latency targets: set slo.ttft_ms and/or slo.tpot_ms "
            "(e.g. slo.ttft_ms=2000 slo.tpot_ms=50)"
        )
    if cfg.workload.kind not in OPEN_LOOP or not cfg.workload.rate:
        raise UserError(
            f"scenario=disagg sizes the pools for a request rate; workload={cfg.workload.kind} "
            f"has none (use one of {', '.join(OPEN_LOOP)} with workload.rate)"
        )
    if cfg.disagg.max_seeds < cfg.disagg.seeds:
        raise UserError(
            f"disagg.max_seeds={cfg.disagg.max_seeds} is below disagg.seeds={cfg.disagg.seeds}"
        )


def fewest_decode(s: Search, prefill: int, upper: int | None) -> Probe | None:
    """The fewest decode replicas that meet the SLOs beside `prefill` prefill replicas
    (None: not even disagg.max_replicas); `upper` is known to meet with fewer prefill ones."""
    limit = s.cfg.disagg.max_replicas
    good = bad = None
    if upper is not None:
        p = s.probe(prefill, upper)
        good, bad = (p, None) if p.verdict == "meets" else (None, p)
    n = 1 if good is not None or upper is None else upper * 2
    while good is None and n <= limit:
        p = s.probe(prefill, n)
        if p.verdict == "meets":
            good = p
            break
        if bad is not None and p.margin > STALL * bad.margin:
            return None  # twice the decode replicas barely helped: the prefill side is short
        bad, n = p, n * 2
    if good is None and (bad is None or bad.decode_replicas < limit):
        p = s.probe(prefill, limit)
        good = p if p.verdict == "meets" else None
    if good is None:
        return None
    below = bad is not None and bad.decode_replicas < good.decode_replicas
    lo = bad.decode_replicas if below else 0  # fails (or none tried)
    if lo == 0 and good.decode_replicas > 1:
        p = s.probe(prefill, 1)
        if p.verdict == "meets":
            return p
        lo = 1
    while good.decode_replicas - lo > 1:
        p = s.probe(prefill, (good.decode_replicas + lo) // 2)
        if p.verdict == "meets":
            good = p
        else:
            lo = p.decode_replicas
    return good


def search_split(s: Search) -> tuple[Probe | None, tuple[FewestDecode, ...]]:
    """The split with the fewest GPUs (None: none meets), and the fewest decode replicas found
    for each prefill count searched."""
    limit = s.cfg.disagg.max_replicas
    best: Probe | None = None
    upper = None
    per_prefill = []
    for prefill in range(1, limit + 1):
        if best is not None and prefill * s.tp_prefill + s.tp_decode >= best.gpus:
            break  # no split with this many prefill replicas can use fewer GPUs
        good = fewest_decode(s, prefill, upper)
        per_prefill.append(FewestDecode(prefill, good))
        if good is None:
            continue
        upper = good.decode_replicas
        if best is None or (good.gpus, good.margin) < (best.gpus, best.margin):
            best = good
    return best, tuple(per_prefill)


def run_disagg_search(
    cfg: SimConfig, progress: Callable[[int, None], None] | None = None
) -> DisaggResult:
    started = time.perf_counter()
    pools = Pools.from_config(replace(cfg, disagg=replace(cfg.disagg, enabled=True)))
    s = Search(cfg, progress)
    best, per_prefill = search_split(s)
    d = cfg.disagg
    return DisaggResult(
        best=best,
        per_prefill=per_prefill,
        rate=cfg.workload.rate,
        targets_ms=s.targets_ms,
        model=pools.decode.model.name,
        engine=f"{pools.decode.settings.engine}@{pools.decode.settings.version}",
        prefill_pool=Pool(pools.prefill.hardware.name, s.tp_prefill),
        decode_pool=Pool(pools.decode.hardware.name, s.tp_decode),
        link=pools.link,
        kv_transfer_layerwise=pools.layerwise,
        num_requests=cfg.workload.num_requests,
        max_replicas=d.max_replicas,
        probes=tuple(s.probes),
        simulations_run=s.simulations,
        colocated=colocated(cfg) if d.colocated else None,
        wall_time_s=time.perf_counter() - started,
    )


def colocated(cfg: SimConfig) -> Colocated:
    """scenario=capacity's fewest replicas for the rate, prefill and decode on the same GPUs
    (the top-level hardware, parallel.tp and engine_args), with the same SLOs and seeds."""
    d = cfg.disagg
    c = replace(
        cfg.capacity,
        seeds=max(2, d.seeds),
        max_seeds=max(2, d.max_seeds),
        max_replicas=2 * d.max_replicas,
        jobs=d.jobs,
    )
    plain = replace(cfg, task="capacity", capacity=c, disagg=replace(d, enabled=False))
    s = CapacitySearch(plain)
    try:
        answer, why = search_replicas(s, cfg.workload.rate), None
    except UserError as exc:
        answer, why = None, str(exc)
    return Colocated(
        hardware=load_hardware(cfg.hardware).name,
        tp=cfg.parallel.tp,
        pp=cfg.parallel.pp,
        answer=answer,
        why=why,
        probes=tuple(s.probes),
        simulations_run=s.simulations,
    )
