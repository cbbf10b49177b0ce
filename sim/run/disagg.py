"""Disaggregated prefill/decode: one simulation on a prefill pool and a decode pool.

Each pool is a Setup of its own (GPU type, tensor parallelism, replicas, engine arguments over
the run's), resolved from the same engine version: the prefill pool's settings decide how its
KV leaves (kv_transfer_layerwise), the link between the pools comes from hardware/links.yaml.
sim/run/disagg_driver.py runs the requests through both; this module builds the pools, checks
what the deployment cannot do, and turns the outcome into the run's requests, steps and
summary (the bench fields over the whole deployment, `disagg` for each pool, the transfers and
TTFT split into its parts).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from sim.config import PoolConfig, SimConfig
from sim.errors import UserError
from sim.kv.transfer import Pair
from sim.run.audit import PhysicsAudit, audit_record, longest_request
from sim.run.disagg_driver import TTFT_PARTS, check_disagg_conservation, run_disagg
from sim.run.engine import warm_prefix_caches
from sim.run.findings import enforce
from sim.run.metrics import StepLog, requests_frame, sim_figures
from sim.run.setup import Setup
from sim.run.summary import (
    RunResult,
    bench_header,
    clock,
    elapsed,
    headline,
    requests_record,
)
from sim.specs.links import Link, load_link
from sim.workload.generate import Workload, generate
from sim.workload.records import merged

POOLS = ("prefill", "decode")


def pool_config(cfg: SimConfig, pool: PoolConfig) -> SimConfig:
    """The run's config as one pool sees it: its GPU, parallelism, replicas and arguments."""
    args = dict(cfg.engine_args) | {k: v for k, v in pool.engine_args.items() if v is not None}
    par = replace(cfg.parallel, tp=pool.tp or cfg.parallel.tp, dp=pool.replicas)
    return replace(cfg, hardware=pool.hardware or cfg.hardware, parallel=par, engine_args=args)


@dataclass(frozen=True, slots=True)
class Pools:
    prefill: Setup
    decode: Setup
    link: Link
    pair: Pair

    @classmethod
    def from_config(cls, cfg: SimConfig) -> Pools:
        d = cfg.disagg
        setups = {}
        for name in POOLS:
            pc = pool_config(cfg, getattr(d, name))
            if pc.parallel.pp > 1:
                raise UserError(
                    f"disagg: parallel.pp={pc.parallel.pp}: pipeline stages are not modelled in "
                    "a disaggregated pool; use disagg.prefill.tp / disagg.decode.tp"
                )
            try:
                setups[name] = Setup.from_config(pc)
            except UserError as exc:
                raise UserError(f"disagg.{name} pool: {exc}") from None
            s = setups[name].settings
            if s.scheduler != "vllm_v1":
                raise UserError(
                    f"disagg: disaggregated prefill/decode is modelled for vLLM's V1 engine "
                    f"(0.8+, its KV connectors) only, not {s.engine}@{s.version}"
                )
        p, dec = setups["prefill"], setups["decode"]
        if p.settings.kv_cache_dtype != dec.settings.kv_cache_dtype:
            raise UserError(
                f"disagg: the pools' KV caches differ (kv_cache_dtype {p.settings.kv_cache_dtype} "
                f"vs {dec.settings.kv_cache_dtype}); the connector copies blocks as they are"
            )
        link = load_link(d.link, p.hardware, dec.hardware, d.link_bytes_per_s, d.link_latency_s)
        pair = Pair(
            p.model, p.settings.kv_cache_dtype, p.config.parallel.tp, dec.config.parallel.tp,
            p.memory.block_size, link,
        )  # fmt: skip
        return cls(p, dec, link, pair)

    @property
    def layerwise(self) -> bool:
        return self.prefill.settings.kv_transfer_layerwise

    @property
    def gpus(self) -> int:
        return sum(s.config.parallel.tp * s.config.parallel.dp for s in (self.prefill, self.decode))


def check(cfg: SimConfig) -> None:
    if cfg.trace:
        raise UserError("disagg with trace=true: the timeline draws one pool; trace without disagg")
    if cfg.output.stream:
        raise UserError(
            "disagg with output.stream=true: a disaggregated run keeps its steps in memory"
        )
    if cfg.workload.stagger:
        raise UserError("disagg with workload.stagger=true is not modelled; leave stagger off")
    if cfg.workload.frontend_ms or cfg.workload.frontend_us_per_token:
        raise UserError(
            "disagg with a workload front end is not modelled; leave workload.frontend_ms and "
            "workload.frontend_us_per_token at 0"
        )
    if cfg.calibration:
        raise UserError(
            "disagg with calibration=: a deployment is calibrated on colocated runs and its "
            "terms are not split between a prefill and a decode pool; leave calibration unset"
        )


def simulate_disagg(
    cfg: SimConfig, progress=None, workload: Workload | None = None, pools: Pools | None = None
) -> RunResult:
    started = clock()
    check(cfg)
    pools = pools or Pools.from_config(cfg)
    if workload is None:
        workload = generate(cfg.workload, np.random.default_rng(cfg.seed))
    for s in (pools.prefill, pools.decode):
        g, b = workload.content_block_tokens, s.memory.block_size
        if g % b and b % g:
            raise UserError(
                f"the workload's {g}-token content blocks do not align with KV blocks of {b} "
                f"tokens; use a block_size that divides or is a multiple of {g}"
            )
    logs = {name: StepLog() for name in POOLS}
    warmup = workload.warmup
    prefill = pools.prefill.engines(logs["prefill"], measure_from=warmup, sends_kv=True)
    # replicas are numbered across the deployment
    decode = pools.decode.engines(logs["decode"], len(prefill), measure_from=warmup)
    if workload.cache_warm:  # each pool as the earlier run left it
        warm_prefix_caches(prefill, workload)
        warm_prefix_caches(decode, workload)
    result = run_disagg(
        workload, prefill, decode, pools.pair, pools.prefill.model.num_layers, pools.layerwise,
        until_s=cfg.max_sim_time_s, progress=progress, router=cfg.disagg.router,
    )  # fmt: skip
    tally = check_disagg_conservation(result, prefill, decode)
    requests = requests_frame(result.outcome.records, workload.priority)
    requests = with_transfers(requests, result.transfers.columns())
    steps = steps_frame(logs)
    itl = merged([e.scheduler.itl for e in (*prefill, *decode)])
    summary, measured, window = headline(cfg, workload, requests, itl)
    dec = pools.decode
    outcome = result.outcome
    summary["sim"] = sim_figures(logs["decode"], requests, dec.memory.num_blocks) | {
        **requests_record(requests, workload, window, outcome, tally),
        **dec.pricing.record(),
        "workload": workload.description,
        "fast_forwarded_steps": sum(e.num_fast_forwarded_steps for e in decode),
        "steps_streamed": False,
        "kv_offload": None,
        **elapsed(started),
    }
    summary["disagg"] = disagg_record(pools, logs, measured, outcome.end_s)
    summary |= bench_header(cfg, dec, workload)
    summary["backend"] += " (disaggregated)"
    summary["config"] = asdict(cfg)
    summary["engine_settings"] = dec.settings.as_mapping()
    summary["memory_plan"] = dec.memory.record()
    engines = {"prefill": prefill, "decode": decode}
    transfers = result.transfers.columns()
    audits = audit_pools(pools, engines, logs, transfers, longest_request(workload))
    summary["audit"] = audit_record(audits)
    enforce(summary["audit"])
    return RunResult(dec, workload, requests, steps, summary, itl)


def audit_pools(
    pools: Pools, engines: dict, logs: dict[str, StepLog], transfers: dict, longest: int
) -> list:
    """The physics audit of each pool, the KV transfers between them with the decode pool's
    (`longest`: the workload's longest request, sim/run/audit.py longest_request)."""
    audits = []
    for name in POOLS:
        setup = getattr(pools, name)
        audit = PhysicsAudit(engines[name][0].cost, setup.memory, setup.hardware, f"{name} pool: ")
        audit.check_steps(logs[name].frame())
        audit.finish(setup.settings.scheduler, longest)
        audits.append(audit)
    audits[-1].check_transfers(transfers, pools.pair)
    return audits


def with_transfers(requests: pd.DataFrame, columns: dict) -> pd.DataFrame:
    """The requests with where each went, when its KV moved, and its TTFT in parts."""
    df = requests.copy()
    for name, values in columns.items():
        df[name] = values
    parts = {
        "queue": df["first_scheduled_s"] - df["arrival_s"],
        "prefill": df["prefill_end_s"] - df["first_scheduled_s"],
        "decode_wait": df["decode_blocks_s"] - df["prefill_end_s"],
        "transfer": df["transfer_end_s"] - df["decode_blocks_s"],
        "first_decode": df["first_token_s"] - df["transfer_end_s"],
    }
    for name in TTFT_PARTS:
        df[f"ttft_{name}_s"] = parts[name]
    return df


def steps_frame(logs: dict[str, StepLog]) -> pd.DataFrame:
    """Both pools' steps, prefill first, with a `pool` column."""
    frames = []
    for name in POOLS:
        f = logs[name].frame()
        f.insert(0, "pool", name)
        frames.append(f)
    return pd.concat(frames, ignore_index=True)


def disagg_record(pools: Pools, logs: dict[str, StepLog], requests, end_s: float) -> dict:
    """summary.json `disagg`: each pool, the link, the transfers and the TTFT split."""
    out = {}
    for name in POOLS:
        s: Setup = getattr(pools, name)
        par = s.config.parallel
        steps = logs[name].frame()
        figures = logs[name].figures(s.memory.num_blocks)
        busy = float(steps["duration_s"].sum()) / (par.dp * end_s) if end_s > 0 else 0.0
        out[name] = {
            "hardware": s.hardware.name,
            "tp": par.tp,
            "replicas": par.dp,
            "gpus": par.tp * par.dp,
            "num_blocks": s.memory.num_blocks,
            "max_num_seqs": s.settings.max_num_seqs,
            "max_num_batched_tokens": s.settings.max_num_batched_tokens,
            "busy_fraction": busy,
            "steps": figures["steps"],
            "preemptions": figures["preemptions"],
            "kv_usage_peak": figures["kv_usage_peak"],
            "kv_usage_mean": figures["kv_usage_mean"],
            "mean_batch_size": figures["mean_batch_size"],
        }
    done = requests[requests["status"] == "finished"]
    moved = done[done["kv_transfer_tokens"] > 0]
    exposed_ms = (moved["transfer_end_s"] - moved["decode_blocks_s"]).to_numpy() * 1e3
    out |= {
        "gpus": pools.gpus,
        "ratio": f"{out['prefill']['gpus']}:{out['decode']['gpus']}",
        "link": pools.link.record(),
        "kv_transfer_layerwise": pools.layerwise,
        "transfer": {
            "requests": len(moved),
            "mean_tokens": float(moved["kv_transfer_tokens"].mean()) if len(moved) else 0.0,
            "mean_bytes": float(moved["kv_transfer_bytes"].mean()) if len(moved) else 0.0,
            "total_bytes": int(moved["kv_transfer_bytes"].sum()),
            "mean_ms": float(exposed_ms.mean()) if len(moved) else 0.0,
            "p99_ms": float(np.percentile(exposed_ms, 99)) if len(moved) else 0.0,
        },
        "ttft_split_ms": ttft_split(done),
    }
    return out


def ttft_split(done: pd.DataFrame) -> dict:
    """Mean, median and p99 of each part of TTFT (ms), over the finished requests; the means
    add up to the mean TTFT."""
    out = {}
    for name in TTFT_PARTS:
        ms = done[f"ttft_{name}_s"].to_numpy(dtype=np.float64) * 1e3
        ms = ms if len(ms) else np.zeros(1)
        out[name] = {
            "mean": float(ms.mean()),
            "median": float(np.median(ms)),
            "p99": float(np.percentile(ms, 99)),
        }
    return out
