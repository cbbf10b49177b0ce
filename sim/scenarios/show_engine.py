"""scenario=show_engine: the settings an engine version resolves to on a GPU and model.

Prints a table (setting, value, category, rule) by the engine's own argument names and writes
summary.json with `engine_settings: {name: {value, category, rule}}`, the memory plan the
engine's start-up would find, and settings.md with the same table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sim.config import SimConfig
from sim.kv.memory import GIB
from sim.report.console import ProgressBar
from sim.run.outputs import atomic_write, write_json
from sim.run.setup import Setup


@dataclass(frozen=True)
class EngineShown:
    setup: Setup

    @property
    def title(self) -> str:
        s, cfg = self.setup.settings, self.setup.config
        rule_note = (
            f" (rules of {s.rule_set}, the nearest earlier release with known rules)"
            if s.rule_set != s.version
            else ""
        )
        return (
            f"{s.engine}@{s.version}{rule_note}, {s.entry_point} entry point, "
            f"{self.setup.model.name} on {cfg.parallel.tp} x {self.setup.hardware.display_name}"
        )

    @property
    def summary(self) -> dict:
        s, par = self.setup.settings, self.setup.config.parallel
        return {
            "engine": s.engine,
            "version": s.version,
            "rule_set": s.rule_set,
            "entry_point": s.entry_point,
            "hardware": self.setup.hardware.name,
            "model": self.setup.model.name,
            "parallel": {"tp": par.tp, "pp": par.pp, "ep": par.ep},
            "engine_settings": s.as_mapping(),
            "memory_plan": self.setup.memory.record(),
        }


class ShowEngine:
    counts = "runs"

    def check(self, cfg: SimConfig) -> None:
        Setup.from_config(cfg)

    def run(self, cfg: SimConfig, out_dir: Path, bar: ProgressBar) -> EngineShown:
        return EngineShown(Setup.from_config(cfg))

    def write(self, result: EngineShown, out_dir: Path) -> None:
        write_json(out_dir / "summary.json", result.summary)
        lines = [
            f"# {result.title}",
            "",
            "| setting | value | category | rule |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {r['name']} | {_fmt(r['value'])} | {r['category']} | {r['rule']} |"
            for r in result.setup.settings.records()
        ]
        text = "\n".join(lines) + "\n"
        atomic_write(out_dir / "settings.md", lambda p: p.write_text(text))

    def brief(self, result: EngineShown, out_dir: Path, sweeping: bool) -> None:
        mem = result.setup.memory
        console = Console(width=200)
        table = Table(title=result.title, title_justify="left")
        for column in ("setting", "value", "category", "rule"):
            table.add_column(column, overflow="fold")
        for r in result.setup.settings.records():
            table.add_row(r["name"], _fmt(r["value"]), r["category"], r["rule"])
        console.print(table)
        console.print(
            f"KV cache: {mem.kv_cache_bytes / GIB:.2f} GiB per GPU = {mem.num_blocks - 1:,} "
            f"blocks of {mem.block_size} tokens ({mem.kv_capacity_tokens:,} tokens); weights "
            f"{mem.weight_bytes / GIB:.2f} GiB, activations {mem.activation_bytes / GIB:.2f} GiB"
        )
        console.print(f"Outputs: {out_dir}/ (summary.json, settings.md)")


def _fmt(value) -> str:
    if isinstance(value, list):
        if len(value) > 8:
            return f"{', '.join(map(str, value[:4]))}, ..., {value[-1]} ({len(value)} sizes)"
        return ", ".join(map(str, value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
