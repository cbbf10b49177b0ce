"""What a sweep holds against the engine's own defaults, for its report and console.

A scenario may set engine arguments for every run besides the ones it sweeps (the
chunked-prefill sweep sets max_num_seqs=256), and its report compares the winner with "the
engine's default" of the swept settings. Both are read here from the resolved settings
(sim/engines): the engine, release and GPU the runs resolved to; each argument every run sets
that differs from the engine out of the box on this model and GPU, with the engine's own value;
and, where the engine refuses some of the swept settings with its own value, how many and its
reason (its own error message) - why the sweep sets it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from sim.cli import to_sim_config
from sim.config import SimConfig
from sim.errors import UserError
from sim.run.setup import Setup
from sim.scenarios.sweep.table import fmt_value, split_columns


@dataclass(frozen=True)
class Fixed:
    """An engine argument every run of the sweep sets, unlike the engine out of the box."""

    key: str  # the engine argument, e.g. max_num_seqs
    value: object  # what every run sets
    default: object  # the engine's own value on this model and GPU
    refused: int  # swept settings the engine refuses with its own value
    reason: str | None  # the engine's error for the first of them

    @property
    def record(self) -> dict:
        return {"key": self.key, "value": self.value, "engine_default": self.default,
                "refused_without_it": self.refused, "reason": self.reason}  # fmt: skip

    @property
    def text(self) -> str:
        own = fmt_value(self.default) if self.default not in ("", None) else "none"
        return f"{self.key}={fmt_value(self.value)} (the engine's own: {own})"


@dataclass(frozen=True)
class EngineDefaults:
    engine: str  # engine@release, as resolved
    hardware: str  # the GPU's name
    gpus: int
    model: str
    default_label: str | None  # the swept settings at the engine's values (table.py's label)
    fixed: tuple[Fixed, ...]
    swept_settings: int  # distinct engine-argument settings swept
    # where a sweep varies more than engine arguments (hardware=h100-sxm,h200): every
    # resolution, the base configuration's first; empty when all runs resolve alike
    resolutions: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        if len(self.resolutions) > 1:
            *head, last = self.resolutions
            return f"{', '.join(head)} or {last}, by the swept keys"
        return f"{self.engine} on {self.gpus} x {self.hardware} ({self.model})"

    @property
    def record(self) -> dict:
        """For sweep_summary.json."""
        return {
            "engine": self.engine,
            "hardware": self.hardware,
            "gpus": self.gpus,
            "model": self.model,
            "default_settings": self.default_label,
            "fixed": [f.record for f in self.fixed],
            "resolutions": list(self.resolutions),
        }

    def sentences(self) -> list[str]:
        """The report's paragraph, one sentence each: what "the engine's default" is, and what
        every run sets besides the swept settings, and why."""
        out = []
        if self.default_label:
            out.append(
                f"The runs resolve to {self.where}; its own values of the swept settings are "
                f'{self.default_label}: "the engine\'s default" in this report means them.'
            )
        else:
            out.append(f"The runs resolve to {self.where}.")
        for f in self.fixed:
            text = f"Every run sets {f.text}"
            if f.refused:
                text += (
                    f": with its own value the engine refuses {f.refused} of the "
                    f"{self.swept_settings} settings swept ({f.reason.rstrip('.')})"
                )
            out.append(text + ".")
        if self.fixed and self.default_label:
            keys = ", ".join(f.key for f in self.fixed)
            out.append(
                f"So the setting called the engine's default differs from the engine out of "
                f"the box in {keys} too."
            )
        return out


def _setup(cfg: SimConfig, args: dict) -> Setup:
    return Setup.from_config(replace(cfg, engine_args=args))


def engine_defaults(config, frame: pd.DataFrame, default_label: str | None) -> (
    EngineDefaults | None
):  # fmt: skip
    """The sweep's engine, GPU and fixed engine arguments against the engine's own values;
    None when the base configuration does not resolve (the report then says nothing of it)."""
    keys = frame.attrs.get("keys", {})
    _, settings = split_columns(frame)
    swept = {keys[s].removeprefix("engine_args."): s for s in settings
             if keys.get(s, "").startswith("engine_args.")}  # fmt: skip
    try:
        cfg = to_sim_config(config)
        given = {k: v for k, v in cfg.engine_args.items() if v is not None and k not in swept}
        stock = _setup(cfg, {k: None for k in cfg.engine_args}).settings.as_mapping()
        base = Setup.from_config(cfg)
    except (UserError, KeyError, ValueError):
        return None
    combos = frame[list(swept.values())].drop_duplicates() if swept else pd.DataFrame([{}])
    points = [{k: _plain(row[c]) for k, c in swept.items()} for _, row in combos.iterrows()]
    fixed = []
    for key, value in given.items():
        if key not in stock or stock[key]["value"] == value:
            continue
        errors = []
        for point in points:
            try:
                _setup(cfg, dict(cfg.engine_args) | point | {key: None})
            except UserError as e:
                errors.append(str(e))
        fixed.append(Fixed(key, value, stock[key]["value"], len(errors),
                           errors[0] if errors else None))  # fmt: skip
    return EngineDefaults(
        engine=f"{base.settings.engine}@{base.settings.version}",
        hardware=base.hardware.display_name,
        gpus=cfg.parallel.tp * cfg.parallel.pp,
        model=cfg.model,
        default_label=default_label,
        fixed=tuple(fixed),
        swept_settings=len(points) if swept else 0,
        resolutions=_resolutions(config, frame, keys, settings, _where(cfg, base)),
    )


def _where(cfg: SimConfig, setup: Setup) -> str:
    s = setup.settings
    gpus = cfg.parallel.tp * cfg.parallel.pp
    return f"{s.engine}@{s.version} on {gpus} x {setup.hardware.display_name} ({cfg.model})"


MAX_RESOLVED = 16  # distinct settings of a sweep's other keys resolved for the sentence


def _resolutions(config, frame, keys: dict, settings: list[str], first: str) -> tuple[str, ...]:
    """Where the runs resolve to when the sweep varies keys other than engine arguments
    (the GPU, the model, the release, the parallelism): each distinct one, the base's first.
    A setting that does not resolve on its own (a config group) is left out."""
    other = [c for c in settings if not keys.get(c, "").startswith("engine_args.")]
    if not other:
        return ()
    out = [first]
    for _, row in frame[other].drop_duplicates().head(MAX_RESOLVED).iterrows():
        dotlist = [f"{keys[c]}={fmt_value(_plain(row[c]))}" for c in other]
        try:
            merged = OmegaConf.merge(config, OmegaConf.from_dotlist(dotlist))
            cfg = to_sim_config(merged)
            where = _where(cfg, Setup.from_config(cfg))
        except (UserError, KeyError, ValueError, OmegaConfBaseException):
            continue
        if where not in out:
            out.append(where)
    return tuple(out) if len(out) > 1 else ()


def _plain(v):
    """A table value as the engine argument it was (a float column's 256.0 -> 256)."""
    if hasattr(v, "item"):
        v = v.item()
    return int(v) if isinstance(v, float) and v.is_integer() else v
