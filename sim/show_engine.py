"""scenario=show_engine: the settings an engine version resolves to on a GPU and model.

Prints a table (setting, value, category, rule) by the engine's own argument names and writes
summary.json with `engine_settings: {name: {value, category, rule}}`, the memory plan the
engine's start-up would find, and settings.md with the same table.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from sim.config import SimConfig
from sim.outputs import atomic_write, write_json
from sim.run import Setup

GIB = 2**30


def show_engine(cfg: SimConfig, out_dir: Path, console: Console | None = None) -> dict:
    setup = Setup.from_config(cfg)
    s, mem = setup.settings, setup.memory
    rule_note = (
        f" (rules of {s.rule_set}, the nearest earlier release with known rules)"
        if s.rule_set != s.version
        else ""
    )
    title = (
        f"{s.engine}@{s.version}{rule_note}, {s.entry_point} entry point, "
        f"{setup.model.name} on {cfg.parallel.tp} x {setup.hardware.display_name}"
    )
    summary = {
        "engine": s.engine,
        "version": s.version,
        "rule_set": s.rule_set,
        "entry_point": s.entry_point,
        "hardware": setup.hardware.name,
        "model": setup.model.name,
        "parallel": {"tp": cfg.parallel.tp, "pp": cfg.parallel.pp, "ep": cfg.parallel.ep},
        "engine_settings": s.as_mapping(),
        "memory_plan": mem.record(),
    }
    console = console or Console(width=200)
    table = Table(title=title, title_justify="left")
    for column in ("setting", "value", "category", "rule"):
        table.add_column(column, overflow="fold")
    for r in s.records():
        table.add_row(r["name"], _fmt(r["value"]), r["category"], r["rule"])
    console.print(table)
    console.print(
        f"KV cache: {mem.kv_cache_bytes / GIB:.2f} GiB per GPU = {mem.num_blocks - 1:,} blocks "
        f"of {mem.block_size} tokens ({mem.kv_capacity_tokens:,} tokens); weights "
        f"{mem.weight_bytes / GIB:.2f} GiB, activations {mem.activation_bytes / GIB:.2f} GiB"
    )
    write_json(out_dir / "summary.json", summary)
    lines = [f"# {title}", "", "| setting | value | category | rule |", "|---|---|---|---|"]
    lines += [
        f"| {r['name']} | {_fmt(r['value'])} | {r['category']} | {r['rule']} |" for r in s.records()
    ]
    text = "\n".join(lines) + "\n"
    atomic_write(out_dir / "settings.md", lambda p: p.write_text(text))
    console.print(f"Outputs: {out_dir}/ (summary.json, settings.md)")
    return summary


def _fmt(value) -> str:
    if isinstance(value, list):
        if len(value) > 8:
            return f"{', '.join(map(str, value[:4]))}, ..., {value[-1]} ({len(value)} sizes)"
        return ", ".join(map(str, value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
