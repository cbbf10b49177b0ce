"""The configuration difference between two engine versions, and mixtures of the two.

upgrade_diff attributes a metric's change to the settings that changed. A change is one
setting whose resolved value differs between the `before` and `after` EngineSettings (as
resolve() returns them, before the memory plan: what an engine derives from its KV pool at
start-up, such as SGLang's max_running_requests, is re-derived for every mixture), or the
kernels measured for each version, which price the same operations differently. mixture()
applies any subset of the changes to `before`; with none it is `before`, with all `after`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from sim.config import SimConfig
from sim.errors import UserError
from sim.hardware import load_hardware
from sim.model_config import load_model
from sim.profiles import resolve
from sim.run import Setup, simulate
from sim.settings import CATEGORY, SETTING_NAMES, Category, EngineSettings

KERNELS = "kernel_tables"  # the change of measured kernels between the two versions


@dataclass(frozen=True, slots=True)
class Change:
    name: str  # an EngineSettings field, or KERNELS
    category: Category
    before: object
    after: object
    rule_before: str
    rule_after: str
    flag: str  # the engine's own argument name for it (after the upgrade)


def resolved(cfg: SimConfig, engine: str, engine_args) -> EngineSettings:
    """resolve() of `engine` (name@version) for cfg's hardware, model, TP and entry point."""
    return resolve(
        engine,
        load_hardware(cfg.hardware),
        load_model(cfg.model),
        cfg.parallel.tp,
        cfg.entry_point,
        engine_args,
    )


def diff(cfg: SimConfig, a: EngineSettings, b: EngineSettings) -> list[Change]:
    """Every setting whose value differs between two resolved settings, in the settings'
    order, then the kernel tables when the two versions are priced from different
    measurements on cfg's GPU."""
    if (a.engine, a.entry_point) != (b.engine, b.entry_point):
        raise UserError(
            f"upgrade_diff compares two versions of one engine and entry point, not "
            f"{a.engine} ({a.entry_point}) and {b.engine} ({b.entry_point})"
        )
    out = [
        Change(
            name,
            CATEGORY[name],
            getattr(a, name),
            getattr(b, name),
            a.rules.get(name, ""),
            b.rules.get(name, ""),
            b.display_name(name),
        )
        for name in SETTING_NAMES
        if getattr(a, name) != getattr(b, name)
    ]
    pa = Setup.from_settings(cfg, a, kernel_version=None).pricing
    pb = Setup.from_settings(cfg, b, kernel_version=None).pricing
    if pa.family != pb.family:
        out.append(
            Change(KERNELS, Category.KERNELS, pa.family, pb.family, pa.source, pb.source, KERNELS)
        )
    return out


def mixture(
    before: EngineSettings, after: EngineSettings, changes: list[Change], chosen: Iterable[int]
) -> tuple[EngineSettings, str]:
    """`before` with the chosen changes applied: (the settings, the version whose measured
    kernels price it)."""
    picked = [changes[i] for i in chosen]
    fields = {c.name: c.after for c in picked if c.name != KERNELS}
    rules = dict(before.rules)
    rules.update({c.name: c.rule_after for c in picked if c.name != KERNELS})
    mixed = replace(before, **fields, rules=rules)
    kernels = after.version if any(c.name == KERNELS for c in picked) else before.version
    return mixed, kernels


def mixture_setup(
    cfg: SimConfig, before: EngineSettings, after: EngineSettings, changes, chosen
) -> Setup:
    settings, kernels = mixture(before, after, changes, chosen)
    return Setup.from_settings(cfg, settings, kernel_version=kernels)


METRICS = (
    "request_throughput",
    "output_throughput",
    "mean_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "p99_tpot_ms",
)


def run_mixtures(
    cfg: SimConfig,
    before: EngineSettings,
    after: EngineSettings,
    changes: list[Change],
    subsets: Iterable[frozenset[int]],
    jobs: int | None = None,
) -> dict[frozenset[int], dict[str, float]]:
    """The METRICS of each mixture, simulated in parallel (joblib, every core by default) on
    cfg's workload: same seed, so the same arrivals and lengths in every run."""
    from joblib import Parallel, delayed

    quiet = replace(cfg, output=replace(cfg.output, report=False, progress=False))
    todo = sorted({frozenset(s) for s in subsets}, key=lambda s: (len(s), sorted(s)))
    results = Parallel(n_jobs=jobs or -1)(
        delayed(_metrics)(quiet, before, after, changes, tuple(sorted(s))) for s in todo
    )
    return dict(zip(todo, results, strict=True))


def _metrics(cfg, before, after, changes, chosen) -> dict[str, float]:
    summary = simulate(cfg, setup=mixture_setup(cfg, before, after, changes, chosen)).summary
    return {m: float(summary[m]) for m in METRICS}
