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
from sim.engines.resolve import resolve
from sim.engines.settings import CATEGORY, SETTING_NAMES, Category, EngineSettings
from sim.errors import UserError
from sim.run.setup import Setup
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model

KERNELS = "kernel_tables"  # the change of measured kernels between the two versions
USER_OVERRIDE = "user override"  # the group of a change the user's arguments made (resolve()'s
# rule "user override (engine_args.NAME)" on either side), whatever its setting's category


@dataclass(frozen=True, slots=True)
class Change:
    name: str  # an EngineSettings field, or KERNELS
    category: Category
    before: object
    after: object
    rule_before: str
    rule_after: str
    flag: str  # the engine's own argument name for it (after the upgrade)
    linked: tuple[tuple[str, object, object], ...] = ()  # settings derived from this one that
    # move with it: (name, before, after)

    @property
    def setting(self) -> str:
        """The name the report gives it: the engine's argument name, or KERNELS."""
        return KERNELS if self.name == KERNELS else self.flag

    @property
    def group(self) -> str:
        """The category the report and the by-category figures give it: USER_OVERRIDE when the
        user's arguments (upgrade.before_args / after_args) set either side, not the release;
        else its setting's own category (defaults, kernels, scheduling, memory)."""
        if any(r.startswith(USER_OVERRIDE) for r in (self.rule_before, self.rule_after)):
            return USER_OVERRIDE
        return self.category.value


def resolved(cfg: SimConfig, engine: str, engine_args) -> EngineSettings:
    """resolve() of `engine` (name@version) for cfg's hardware, model, TP and entry point."""
    return resolve(
        engine,
        load_hardware(cfg.hardware),
        load_model(cfg.model),
        cfg.parallel.tp,
        cfg.entry_point,
        engine_args,
        workers=cfg.parallel.tp * cfg.parallel.pp,
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
    out = _link_derived(out, a, b)
    pa = Setup.from_settings(cfg, a, kernel_version=None).pricing
    pb = Setup.from_settings(cfg, b, kernel_version=None).pricing
    if pa.family != pb.family:
        out.append(
            Change(KERNELS, Category.KERNELS, pa.family, pb.family, pa.source, pb.source, KERNELS)
        )
    return out


# Settings an engine derives from another (as long as it does): they change with their source
# and are restored with it, so they are one change, not two.
DERIVED = {"max_prefill_tokens": "max_num_batched_tokens"}  # vLLM: the prefill budget is the
# token budget


def _link_derived(changes: list[Change], a: EngineSettings, b: EngineSettings) -> list[Change]:
    by_name = {c.name: c for c in changes}
    out = []
    for c in changes:
        source = DERIVED.get(c.name)
        if (
            source in by_name
            and getattr(a, c.name) == getattr(a, source)
            and getattr(b, c.name) == getattr(b, source)
        ):
            continue  # folded into its source below
        derived = tuple(
            (d.name, d.before, d.after)
            for d in changes
            if DERIVED.get(d.name) == c.name
            and getattr(a, d.name) == getattr(a, c.name)
            and getattr(b, d.name) == getattr(b, c.name)
        )
        out.append(replace(c, linked=derived) if derived else c)
    return out


def mixture(
    before: EngineSettings, after: EngineSettings, changes: list[Change], chosen: Iterable[int]
) -> tuple[EngineSettings, str]:
    """`before` with the chosen changes applied: (the settings, the version whose measured
    kernels price it)."""
    picked = [changes[i] for i in chosen]
    fields = {c.name: c.after for c in picked if c.name != KERNELS}
    fields |= {name: new for c in picked for name, _, new in c.linked}
    rules = dict(before.rules)
    rules.update({c.name: c.rule_after for c in picked if c.name != KERNELS})
    rules.update({name: after.rules.get(name, "") for c in picked for name, _, _ in c.linked})
    mixed = replace(before, **fields, rules=rules)
    kernels = after.version if any(c.name == KERNELS for c in picked) else before.version
    return mixed, kernels


def mixture_setup(
    cfg: SimConfig, before: EngineSettings, after: EngineSettings, changes, chosen
) -> Setup:
    settings, kernels = mixture(before, after, changes, chosen)
    return Setup.from_settings(cfg, settings, kernel_version=kernels)
