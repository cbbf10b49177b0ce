"""What upgrade_diff keeps of each simulation of a mixture, and running many of them.

An outcome is the JSON a finished mixture leaves in RUN_DIR/simulations/ (a rerun resumes
from it): the bench metrics by name, under "sim" the simulator's figures that show a
mechanism, under "overload" the run's overload judgement (summary.json sim.overload) and
under "audit" its physics audit (summary.json audit).
Figures is those figures as a record, for the report and the verdict.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from sim.config import UPGRADE_METRICS, SimConfig
from sim.engines.settings import EngineSettings
from sim.run.simulate import simulate
from sim.scenarios.fanout import Kept, fan_out
from sim.scenarios.upgrade_diff.changes import Change, mixture_setup

METRICS = UPGRADE_METRICS  # the metrics whose change upgrade_diff attributes
LOWER_IS_BETTER = {m: not m.endswith("throughput") for m in METRICS}


def adverse(metric: str, change_pct: float) -> float:
    """How much worse (positive) a change makes a metric."""
    return change_pct if LOWER_IS_BETTER[metric] else -change_pct


@dataclass(frozen=True, slots=True)
class Figures:
    """An outcome's simulator figures (counts are means, so floats, over several seeds)."""

    steps: float
    preemptions: float
    mean_batch_size: float
    mean_tokens_per_step: float
    mean_step_ms: float
    p99_step_ms: float
    kv_usage_peak: float
    prefix_cache_hit_rate: float
    num_kv_blocks: float
    attention_kernel: str
    kernel_family: str
    first_use_compiles: float = 0.0  # kernels compiled at first use in the measured window
    first_use_s: float = 0.0  # ... and the seconds they took (sim/cost/first_use.py)

    @classmethod
    def of(cls, outcome: dict) -> Figures:
        return cls(**outcome["sim"])

    @property
    def summary(self) -> dict:
        return asdict(self)


OVERLOAD = "overload"  # an outcome's key for the run's overload judgement (not a number)
AUDIT = "audit"  # an outcome's key for the run's physics audit (summary.json audit)
NOT_NUMBERS = ("sim", OVERLOAD, AUDIT)


def outcome(result) -> dict:
    """What upgrade_diff keeps of one run: the bench metrics (summary.json's numeric top-level
    keys), under "sim" the figures that show a mechanism, and under OVERLOAD the run's
    overload judgement as python -m sim makes it (sim/run/summary.py overload_record)."""
    s = result.summary
    steps = result.steps
    dur = steps["duration_s"].to_numpy()
    tokens = (steps["prefill_tokens"] + steps["decode_tokens"]).to_numpy()
    out = {k: float(v) for k, v in s.items() if isinstance(v, (int, float)) and k != "burstiness"}
    out = {k: v for k, v in out.items() if k not in ("request_rate", "max_concurrency")}
    sim = s["sim"]
    out["sim"] = {
        "steps": int(sim["steps"]),
        "preemptions": int(sim["preemptions"]),
        "mean_batch_size": float(sim["mean_batch_size"]),
        "mean_tokens_per_step": float(tokens.mean()) if len(tokens) else 0.0,
        "mean_step_ms": float(dur.mean() * 1e3) if len(dur) else 0.0,
        "p99_step_ms": float(np.percentile(dur, 99) * 1e3) if len(dur) else 0.0,
        "kv_usage_peak": float(sim["kv_usage_peak"]),
        "prefix_cache_hit_rate": float(sim["prefix_cache_hit_rate"]),
        "num_kv_blocks": int(result.setup.memory.num_blocks),
        "attention_kernel": str(  # (MLA's attention: the roofline prior, under "mla")
            sim["priced_with"].get("attention_decode") or sim["priced_with"].get("mla", "")
        ),
        "kernel_family": str(sim.get("kernel_family") or "prior"),
        "first_use_compiles": int((sim.get("first_use") or {}).get("compiles_in_window", 0)),
        "first_use_s": float((sim.get("first_use") or {}).get("paid_in_window", 0.0)),
    }
    out[OVERLOAD] = sim.get("overload")
    out[AUDIT] = s.get("audit")
    return out


def mixture_outcome(cfg: SimConfig, before, after, changes, chosen) -> dict:
    return outcome(simulate(cfg, setup=mixture_setup(cfg, before, after, changes, chosen)))


Task = tuple[SimConfig, tuple[int, ...]]  # a config (seed, workload) and the changes applied


def run_tasks(
    tasks: list[Task],
    before: EngineSettings,
    after: EngineSettings,
    changes: list[Change],
    jobs: int | None = None,
    progress=None,
    cache: Path | None = None,
) -> list[dict]:
    """outcome() of every task, in order, simulated `jobs` at a time (every core by default;
    sim/scenarios/fanout.py). `progress(done)` after each. With `cache` (a folder), each
    outcome is kept there as it finishes, named by task_key(), and a task already kept is not
    simulated again: an interrupted run resumes."""
    quiet = [
        (replace(c, output=replace(c.output, report=False, progress=False)), s) for c, s in tasks
    ]
    keep = None
    if cache:
        keep = Kept(cache, [task_key(c, s, before, after, changes) for c, s in quiet])
    calls = [(c, before, after, changes, chosen) for c, chosen in quiet]
    tick = (lambda done, _total: progress(done)) if progress else None
    return fan_out(mixture_outcome, calls, jobs, tick, keep)


def task_key(cfg: SimConfig, chosen, before, after, changes: list[Change]) -> str:
    """A digest of everything one mixture's outcome depends on (the name of its kept file):
    not the upgrade section, which only says which mixtures to run and how to read them (a
    rerun with another upgrade.headline reuses every simulation)."""
    what = {
        "config": {k: v for k, v in asdict(cfg).items() if k != "upgrade"},
        "chosen": list(chosen),
        "before": before.as_mapping(),
        "after": after.as_mapping(),
        "changes": [repr(c) for c in changes],
    }
    text = json.dumps(what, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def run_mixtures(
    cfg: SimConfig,
    before: EngineSettings,
    after: EngineSettings,
    changes: list[Change],
    subsets: Iterable[frozenset[int]],
    jobs: int | None = None,
) -> dict[frozenset[int], dict]:
    """outcome() of each mixture on cfg's workload (one seed: the same arrivals and lengths in
    every run)."""
    todo = sorted({frozenset(s) for s in subsets}, key=lambda s: (len(s), sorted(s)))
    tasks = [(cfg, tuple(sorted(s))) for s in todo]
    return dict(zip(todo, run_tasks(tasks, before, after, changes, jobs), strict=True))


def numbers(outcome: dict) -> dict:
    """An outcome's numbers (the bench metrics and the simulator's figures): two runs with the
    same numbers did the same thing, whatever the kernel tables they were priced with are
    called."""
    sim = {k: v for k, v in outcome["sim"].items() if not isinstance(v, str)}
    return {k: v for k, v in outcome.items() if k not in NOT_NUMBERS} | sim


def mean_outcome(outcomes: list[dict]) -> dict:
    """The mean of each number over several seeds' outcomes (text from the first; the overload
    judgements are gathered by sim/scenarios/upgrade_diff/overload.py, not averaged)."""
    first = outcomes[0]
    out = {k: float(np.mean([o[k] for o in outcomes])) for k in first if k not in NOT_NUMBERS}
    out["sim"] = {
        k: (v if isinstance(v, str) else float(np.mean([o["sim"][k] for o in outcomes])))
        for k, v in first["sim"].items()
    }
    return out


def pct_change(before: float, after: float) -> float:
    """after vs before, in percent of before (0 when before is 0)."""
    return (after - before) / before * 100 if before else 0.0
