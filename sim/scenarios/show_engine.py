"""scenario=show_engine: the settings an engine version resolves to on a GPU and model.

Prints a table (setting, value, category, rule) by the engine's own argument names and writes
summary.json with `engine_settings: {name: {value, category, rule}}`, the memory plan the
engine's start-up would find, and settings.md with the same table. When the engine would
refuse to start (the memory plan fails: weights too large, a context longer than the KV pool
holds), it shows the settings and as much of the plan as there is, then the refusal with its
fix (summary.json `refusal`), and exits 2 as any refused run does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sim.config import SimConfig
from sim.engines.resolve import after_memory, resolve
from sim.engines.settings import EngineSettings
from sim.errors import UserError
from sim.kv.memory import GIB, MemoryPlan, plan_memory
from sim.report.console import ProgressBar, outputs_line
from sim.report.escape import md_row, md_text, one_line
from sim.run.outputs import atomic_write, write_json
from sim.run.setup import Setup
from sim.specs.hardware import Hardware, load_hardware
from sim.specs.model import ModelSpec
from sim.specs.model_config import load_model


@dataclass(frozen=True)
class EngineShown:
    config: SimConfig
    settings: EngineSettings
    hardware: Hardware
    model: ModelSpec
    memory: MemoryPlan | None  # None: not even the KV pool could be sized (weights too large)
    refusal: str | None = None  # why the engine would not start, and the fix; None: it starts

    @classmethod
    def of(cls, cfg: SimConfig) -> EngineShown:
        """The setup cfg resolves to or, when it is refused after the settings resolve, the
        settings, the memory plan and the refusal (a refusal before them is raised)."""
        try:
            setup = Setup.from_config(cfg)
        except UserError as refusal:
            return cls.refused(cfg, refusal)
        return cls(cfg, setup.settings, setup.hardware, setup.model, setup.memory)

    @classmethod
    def refused(cls, cfg: SimConfig, refusal: UserError) -> EngineShown:
        hardware, model = load_hardware(cfg.hardware), load_model(cfg.model)
        par = cfg.parallel
        try:
            settings = resolve(
                cfg.engine, hardware, model, par.tp, cfg.entry_point, cfg.engine_args,
                workers=par.tp * par.pp,
            )  # fmt: skip
        except UserError:
            raise refusal from None  # nothing resolved to show
        # the pool the engine sizes at start-up, before the check that one request of
        # max_model_len fits in it (the plan is the same whatever that length)
        sized = replace(settings, max_model_len=1)
        try:
            memory = plan_memory(hardware, model, sized, par.tp, cfg.dtype, par.pp, par.ep)
        except UserError:
            memory = None
        else:
            settings = after_memory(settings, memory.kv_capacity_tokens)
        return cls(cfg, settings, hardware, model, memory, str(refusal))

    @property
    def title(self) -> str:
        s, cfg = self.settings, self.config
        rule_note = (
            f" (rules of {s.rule_set}, the nearest earlier release with known rules)"
            if s.rule_set != s.version
            else ""
        )
        return (
            f"{s.engine}@{s.version}{rule_note}, {s.entry_point} entry point, "
            f"{self.model.name} on {cfg.parallel.tp} x {self.hardware.display_name}"
        )

    @property
    def summary(self) -> dict:
        s, par = self.settings, self.config.parallel
        out = {
            "engine": s.engine,
            "version": s.version,
            "rule_set": s.rule_set,
            "entry_point": s.entry_point,
            "hardware": self.hardware.name,
            "model": self.model.name,
            "parallel": {"tp": par.tp, "pp": par.pp, "ep": par.ep},
            "engine_settings": s.as_mapping(),
            "memory_plan": None if self.memory is None else self.memory.record(),
        }
        if self.refusal is not None:
            out["refusal"] = self.refusal
        return out


class ShowEngine:
    counts = "runs"

    def check(self, cfg: SimConfig) -> None:
        EngineShown.of(cfg)

    def run(self, cfg: SimConfig, out_dir: Path, bar: ProgressBar) -> EngineShown:
        return EngineShown.of(cfg)

    def write(self, result: EngineShown, out_dir: Path) -> None:
        write_json(out_dir / "summary.json", result.summary)
        # the model, the GPU and the engine arguments' values may be a user's: escaped
        lines = [
            f"# {md_text(result.title)}",
            "",
            "| setting | value | category | rule |",
            "|---|---|---|---|",
        ]
        lines += [
            md_row((r["name"], _fmt(r["value"]), r["category"], r["rule"]))
            for r in result.settings.records()
        ]
        lines += ["", plan_sentence(result.memory)]
        if result.refusal is not None:
            lines += ["", f"**The engine would refuse to start:** {md_text(result.refusal)}"]
        text = "\n".join(lines) + "\n"
        atomic_write(out_dir / "settings.md", lambda p: p.write_text(text))

    def brief(self, result: EngineShown, out_dir: Path, sweeping: bool) -> None:
        # Text, not rich markup: a "[/]" in a GPU's name or an engine argument is text
        console = Console(width=200)
        table = Table(title=Text(one_line(result.title)), title_justify="left")
        for column in ("setting", "value", "category", "rule"):
            table.add_column(column, overflow="fold")
        for r in result.settings.records():
            cells = (r["name"], _fmt(r["value"]), r["category"], r["rule"])
            table.add_row(*(Text(one_line(c)) for c in cells))
        console.print(table)
        console.print(plan_sentence(result.memory), markup=False)
        console.print(outputs_line(out_dir), highlight=False, markup=False)
        if result.refusal is not None:  # sim/__main__.py prints it last and exits 2
            raise UserError(result.refusal)


def plan_sentence(mem: MemoryPlan | None) -> str:
    if mem is None:
        return "KV cache: none (no memory is left for it: see the refusal)"
    return (
        f"KV cache: {mem.kv_cache_bytes / GIB:.2f} GiB per GPU = {mem.num_blocks - 1:,} "
        f"blocks of {mem.block_size} tokens ({mem.kv_capacity_tokens:,} tokens); weights "
        f"{mem.weight_bytes / GIB:.2f} GiB, activations {mem.activation_bytes / GIB:.2f} GiB"
    )


def _fmt(value) -> str:
    if isinstance(value, list):
        if len(value) > 8:
            return f"{', '.join(map(str, value[:4]))}, ..., {value[-1]} ({len(value)} sizes)"
        return ", ".join(map(str, value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
