"""upgrade_diff's answer as records: UpgradeResult and its parts. Each record's `summary` is
what summary.json holds of it (keys in summary.json's order); every percentage is of the
before version's value, the mean over seeds."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sim.config import SimConfig
from sim.scenarios.upgrade_diff.load_sweep import LoadSweep
from sim.scenarios.upgrade_diff.outcomes import Figures
from sim.scenarios.upgrade_diff.overload import Overload
from sim.scenarios.upgrade_diff.plan import SIMULATED
from sim.scenarios.upgrade_diff.rate import AutoRate
from sim.scenarios.upgrade_diff.restore import RestoreCommand
from sim.scenarios.upgrade_diff.unpriced import Unpriced


@dataclass(frozen=True, slots=True)
class Side:
    """One version as simulated: the mean over seeds of its outcome."""

    engine: str  # name@version
    metrics: dict[str, float]  # the bench metrics by name
    sim: Figures
    rule_set: str | None = None  # the release whose rules resolved it (None: not a version)
    overload: Overload | None = None  # each seed's overload judgement (None: not gathered)

    @property
    def version(self) -> str:
        return self.engine.partition("@")[2]

    @property
    def summary(self) -> dict:
        sim = self.sim.summary
        if self.overload is not None:  # as python -m sim's summary.json sim.overload, per seed
            sim |= {"overload": self.overload.summary}
        rules = {"rule_set": self.rule_set} if self.rule_set is not None else {}
        return {"engine": self.engine, **rules, **self.metrics, "sim": sim}


@dataclass(frozen=True, slots=True)
class AttributionRow:
    """One change and what it does to each metric (metric -> points of %)."""

    setting: str  # the engine's argument name, or KERNELS
    category: str  # Change.group: its setting's category, or "user override"
    before: object  # the values as summary.json holds them (a tuple as a list)
    after: object
    rule: str  # why the after version has its value
    rule_before: str
    effect_pct: dict[str, float]  # the Shapley value
    ci_pct: dict[str, float]  # half-width of its 95% interval
    added_pct: dict[str, float]  # before + this change alone
    removed_pct: dict[str, float]  # after without this change
    inert: bool
    in_minimal_set: bool
    linked: tuple[str, ...]  # settings derived from this one, moved with it
    restore_flag: str | None
    restore_note: str
    field: str  # the EngineSettings field
    setting_category: str = ""  # the setting's own category (defaults, kernels, ...)

    @property
    def summary(self) -> dict:
        return {
            "setting": self.setting,
            "category": self.category,
            "setting_category": self.setting_category or self.category,
            "before": self.before,
            "after": self.after,
            "rule": self.rule,
            "rule_before": self.rule_before,
            "effect_pct": dict(self.effect_pct),
            "ci_pct": dict(self.ci_pct),
            "added_pct": dict(self.added_pct),
            "removed_pct": dict(self.removed_pct),
            "inert": self.inert,
            "in_minimal_set": self.in_minimal_set,
            "linked": list(self.linked),
            "restore_flag": self.restore_flag,
            "restore_note": self.restore_note,
            "field": self.field,
        }


@dataclass(frozen=True, slots=True)
class ShapleyMethod:
    """How the Shapley values were computed."""

    exact: bool  # over every subset (else sampled orders)
    orders_per_seed: int
    seeds: tuple[int, ...]
    num_changes: int
    inert: tuple[str, ...]  # the settings with no effect either way
    inert_residual_pct: dict[str, float]  # after minus after-without-the-inert
    attribution_simulations: int

    @property
    def summary(self) -> dict:
        return {
            "exact": self.exact,
            "orders_per_seed": self.orders_per_seed,
            "seeds": list(self.seeds),
            "changes": self.num_changes,
            "inert": list(self.inert),
            "inert_residual_pct": dict(self.inert_residual_pct),
            "attribution_simulations": self.attribution_simulations,
        }


@dataclass(frozen=True, slots=True)
class Baseline:
    """What the simulated before is checked against: nothing (kind SIMULATED) or a recorded
    run of the before version, with the simulated before on the baseline's seed."""

    kind: str  # SIMULATED | "run_dir" | "bench_json"
    path: str | None
    measured: dict[str, float] | None  # the recorded metrics
    simulated: dict[str, float] | None  # metric -> the simulated before's value
    match_pct: dict[str, float] | None  # simulated vs recorded

    @property
    def summary(self) -> dict:
        if self.kind == SIMULATED:
            return {"kind": self.kind, "path": self.path, "match_pct": self.match_pct}
        return {
            "kind": self.kind,
            "path": self.path,
            "measured": self.measured,
            "simulated": self.simulated,
            "match_pct": self.match_pct,
        }


@dataclass(frozen=True, slots=True)
class Measured:
    """Real results of both versions (metric -> value) and the real change."""

    before_path: str
    after_path: str
    before: dict[str, float]
    after: dict[str, float]
    change_pct: dict[str, float]

    @property
    def summary(self) -> dict:
        return {
            "before": {"path": self.before_path, **self.before},
            "after": {"path": self.after_path, **self.after},
            "change_pct": dict(self.change_pct),
        }


@dataclass(frozen=True, slots=True)
class UpgradeResult:
    """upgrade_diff's answer; `summary` is summary.json."""

    before: Side
    after: Side
    top_alone: Side | None  # the before version with only the verdict's first setting changed
    change_pct: dict[str, float]  # metric -> after vs before
    change_ci_pct: dict[str, float]  # half-width of its 95% interval over seeds
    headline: str  # the metric the verdict, the waterfall and the minimal set are about
    headline_rule: str  # which rule chose it (sim/scenarios/upgrade_diff/headline.py)
    attribution: tuple[AttributionRow, ...]  # largest headline effect first
    by_category_pct: dict[str, dict[str, float]]  # category -> metric -> its changes alone
    interaction_pct: dict[str, float]  # the change minus the categories' effects alone
    unexplained_pct: dict[str, float] | None  # measured minus simulated change
    simulations_run: int
    minimal_set: tuple[str, ...]  # settings
    shapley: ShapleyMethod
    baseline: Baseline
    measured: Measured | None
    load_sweep: LoadSweep | None
    restore_command: RestoreCommand
    notes: tuple[str, ...]
    wall_time_s: float
    verdict: str
    config: SimConfig  # as every simulation ran it (seed per attribution seed)
    auto_rate: AutoRate | None = None  # the rate workload.rate=auto chose, and from what
    unpriced: tuple[Unpriced, ...] = ()  # kernel changes priced with one table on both sides
    verdicts: dict[str, dict] | None = None  # headline -> its verdict, for every headline
    # asked in this run dir (history.py); None: this one alone
    audit: dict | None = None  # the physics audit of the attribution's runs (merge_records)

    @property
    def verdict_record(self) -> dict:
        """What summary.json's `verdicts` keeps of this headline's verdict."""
        return {
            "verdict": self.verdict,
            "headline_rule": self.headline_rule,
            "minimal_set": list(self.minimal_set),
            "minimal_command": self.restore_command.minimal_command,
        }

    @property
    def summary(self) -> dict:
        return {
            "before": self.before.summary,
            "after": self.after.summary,
            "top_alone": self.top_alone.summary if self.top_alone else None,
            "change_pct": dict(self.change_pct),
            "change_ci_pct": dict(self.change_ci_pct),
            "headline": self.headline,
            "headline_rule": self.headline_rule,
            "attribution": [row.summary for row in self.attribution],
            "by_category_pct": {cat: dict(v) for cat, v in self.by_category_pct.items()},
            "interaction_pct": dict(self.interaction_pct),
            "unexplained_pct": self.unexplained_pct,
            "simulations_run": self.simulations_run,
            "minimal_set": list(self.minimal_set),
            "shapley": self.shapley.summary,
            "baseline": self.baseline.summary,
            "measured": self.measured.summary if self.measured else None,
            "load_sweep": self.load_sweep.summary if self.load_sweep else None,
            "restore_command": self.restore_command.summary,
            "notes": list(self.notes),
            "wall_time_s": self.wall_time_s,
            "verdict": self.verdict,
            "config": asdict(self.config),
            "auto_rate": self.auto_rate.summary if self.auto_rate else None,
            "unpriced": [u.summary for u in self.unpriced],
            "verdicts": self.verdicts or {self.headline: self.verdict_record},
            "audit": self.audit,
        }
