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

import os
import time
from dataclasses import dataclass, replace

from sim.config import SimConfig
from sim.errors import UserError
from sim.run.disagg_driver import TTFT_PARTS as PARTS
from sim.scenarios.capacity.search import OPEN_LOOP, Seeded, settle

KEYS = (
    "p99_ttft_ms",
    "p99_tpot_ms",
    "mean_ttft_ms",
    "mean_tpot_ms",
    "request_throughput",
    "prefill_busy",
    "decode_busy",
    "transfer_mean_ms",
)
CONFIDENCE = 0.95  # each verdict's Student t interval over the seeds, as scenario=capacity's
STALL = 0.97  # doubling the decode replicas must cut the margin by 3% to go on doubling


def _summary(cfg: SimConfig) -> dict:
    """One disaggregated simulation (in a joblib worker): what a probe keeps."""
    from sim.run.simulate import simulate

    s = simulate(cfg).summary
    d = s["disagg"]
    kept = {k: s[k] for k in ("p99_ttft_ms", "p99_tpot_ms", "p99_e2el_ms", "mean_ttft_ms",
                              "mean_tpot_ms", "request_throughput", "output_throughput",
                              "completed", "total_output_tokens")}  # fmt: skip
    kept |= {f"ttft_{p}_ms": d["ttft_split_ms"][p]["mean"] for p in PARTS}
    kept |= {f"{pool}_busy": d[pool]["busy_fraction"] for pool in ("prefill", "decode")}
    kept["transfer_mean_ms"] = d["transfer"]["mean_ms"]
    kept["transfer_mean_bytes"] = d["transfer"]["mean_bytes"]
    return kept


@dataclass
class Probe(Seeded):
    """One split tried at the rate."""

    prefill: int
    decode: int
    gpus: int

    def record(self) -> dict:
        out = {
            "prefill_replicas": self.prefill,
            "decode_replicas": self.decode,
            "gpus": self.gpus,
            **self.verdict_record(),
        }
        keys = KEYS
        out |= {k: self.mean(k) for k in keys}
        out |= {f"ttft_{p}_ms": self.mean(f"ttft_{p}_ms") for p in PARTS}
        return out


class Search:
    def __init__(self, cfg: SimConfig, progress=None):
        check(cfg)
        self.cfg = replace(
            cfg,
            output=replace(cfg.output, report=False, progress=False),
            disagg=replace(cfg.disagg, enabled=True),
        )
        self.targets = cfg.slo.targets()
        self.jobs = cfg.disagg.jobs or os.cpu_count() or 1
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

    def run(self, configs: list[SimConfig]) -> list[dict]:
        from joblib import Parallel, delayed

        n = min(self.jobs, len(configs))
        if n <= 1:
            out = [_summary(c) for c in configs]
        else:
            out = list(Parallel(n_jobs=n)(delayed(_summary)(c) for c in configs))
        self.simulations += len(configs)
        if self.progress:
            self.progress(self.simulations, None)
        return out

    def probe(self, prefill: int, decode: int) -> Probe:
        for p in self.probes:  # asked again by a later search: the same answer
            if (p.prefill, p.decode) == (prefill, decode):
                return p
        d = self.cfg.disagg
        gpus = prefill * self.tp_prefill + decode * self.tp_decode
        p = Probe(prefill, decode, gpus)
        settle(p, self.run, self.at(prefill, decode), self.targets, d.seeds, d.max_seeds,
               CONFIDENCE)  # fmt: skip
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
        if bad is not None and p.mean_margin > STALL * bad.mean_margin:
            return None  # twice the decode replicas barely helped: the prefill side is short
        bad, n = p, n * 2
    if good is None and (bad is None or bad.decode < limit):
        p = s.probe(prefill, limit)
        good = p if p.verdict == "meets" else None
    if good is None:
        return None
    lo = 0 if bad is None or bad.decode >= good.decode else bad.decode  # fails (or none tried)
    if lo == 0 and good.decode > 1:
        p = s.probe(prefill, 1)
        if p.verdict == "meets":
            return p
        lo = 1
    while good.decode - lo > 1:
        p = s.probe(prefill, (good.decode + lo) // 2)
        if p.verdict == "meets":
            good = p
        else:
            lo = p.decode
    return good


def search_split(s: Search) -> dict:
    limit = s.cfg.disagg.max_replicas
    best: Probe | None = None
    upper = None
    per_prefill = []
    for prefill in range(1, limit + 1):
        if best is not None and prefill * s.tp_prefill + s.tp_decode >= best.gpus:
            break  # no split with this many prefill replicas can use fewer GPUs
        good = fewest_decode(s, prefill, upper)
        per_prefill.append({"prefill_replicas": prefill,
                            "decode_replicas": good.decode if good else None,
                            "gpus": good.gpus if good else None})  # fmt: skip
        if good is None:
            continue
        upper = good.decode
        if best is None or (good.gpus, good.mean_margin) < (best.gpus, best.mean_margin):
            best = good
    return {"best": best.record() if best else None, "per_prefill": per_prefill}


@dataclass(frozen=True)
class DisaggResult:
    """scenario=disagg's answer: summary.json as a dict."""

    summary: dict


def run_disagg_search(cfg: SimConfig, progress=None) -> DisaggResult:
    from sim.run.disagg import Pools

    started = time.perf_counter()
    pools = Pools.from_config(replace(cfg, disagg=replace(cfg.disagg, enabled=True)))
    s = Search(cfg, progress)
    out = search_split(s)
    d = cfg.disagg
    out |= {
        "rate": cfg.workload.rate,
        "slo": {f"{m}_ms": t for m, t in s.targets.items()},
        "model": pools.decode.model.name,
        "engine": f"{pools.decode.settings.engine}@{pools.decode.settings.version}",
        "prefill_pool": {"hardware": pools.prefill.hardware.name, "tp": s.tp_prefill},
        "decode_pool": {"hardware": pools.decode.hardware.name, "tp": s.tp_decode},
        "link": pools.link.record(),
        "kv_transfer_layerwise": pools.layerwise,
        "num_requests": cfg.workload.num_requests,
        "max_replicas": d.max_replicas,
        "probes": [p.record() for p in s.probes],
        "simulations_run": s.simulations,
    }
    out["colocated"] = colocated(cfg) if d.colocated else None
    out["wall_time_s"] = time.perf_counter() - started
    return DisaggResult(out)


def colocated(cfg: SimConfig) -> dict:
    """scenario=capacity's fewest replicas for the rate, prefill and decode on the same GPUs
    (the top-level hardware, parallel.tp and engine_args)."""
    from sim.scenarios.capacity import search as capacity
    from sim.specs.hardware import load_hardware

    d = cfg.disagg
    c = replace(
        cfg.capacity,
        seeds=max(2, d.seeds),
        max_seeds=max(2, d.max_seeds),
        max_replicas=2 * d.max_replicas,
        jobs=d.jobs,
    )
    plain = replace(cfg, task="capacity", capacity=c, disagg=replace(d, enabled=False))
    s = capacity.Search(plain)
    try:
        r = capacity.search_replicas(s, cfg.workload.rate)
    except UserError as exc:
        return {"replicas": None, "gpus": None, "why": str(exc), "simulations_run": s.simulations}
    gpus = r["replicas"] * cfg.parallel.tp * cfg.parallel.pp
    return {
        "hardware": load_hardware(cfg.hardware).name,
        "tp": cfg.parallel.tp,
        "replicas": r["replicas"],
        "gpus": gpus,
        "p99_ttft_ms": r["p99_ttft_ms_at_capacity"],
        "p99_tpot_ms": r["p99_tpot_ms_at_capacity"],
        "probes": [p.record() for p in s.probes],
        "simulations_run": s.simulations,
    }
