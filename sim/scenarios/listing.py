"""`python -m sim --list [models|gpus|engines|scenarios|workloads]`: what the catalogues hold,
one line per entry, read from the catalogues themselves: a GPU file added under hardware/, a
model under sim/catalog/models/ or a scenario under scenarios/ is listed as it is, its line
from its own fields (a scenario's and a workload's from its file's first comment)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from sim.cost.prior import PROFILE_DIR
from sim.engines.changelog import rule_set_changes
from sim.engines.published import known_releases
from sim.engines.resolve import ENGINES
from sim.engines.versions import version_tuple
from sim.errors import UserError
from sim.paths import HARDWARE_DIR, SCENARIO_DIR
from sim.specs.hardware import hardware_names, load_hardware
from sim.specs.model import Attention, ModelSpec
from sim.specs.model_config import load_model, model_names
from sim.specs.names import did_you_mean

SECTIONS = ("models", "gpus", "engines", "scenarios", "workloads")
SAME = {"model": "models", "gpu": "gpus", "hardware": "gpus", "engine": "engines"}
SAME |= {"scenario": "scenarios", "workload": "workloads"}
WIDTH = 100  # a scenario's or workload's line is cut to this many characters


def listing(what: str | None = None) -> str:
    """Every section (what=None), or one by name (singular, or `hardware`, taken too)."""
    if what is None:
        return "\n\n".join(listing(s) for s in SECTIONS)
    section = SAME.get(what.lower(), what.lower())
    if section not in SECTIONS:
        raise UserError(
            f"--list {what}: not a catalogue{did_you_mean(section, SECTIONS)}; choose one of: "
            f"{', '.join(SECTIONS)} (or --list alone for all)"
        )
    title, lines = {
        "models": _models,
        "gpus": _gpus,
        "engines": _engines,
        "scenarios": lambda: _group("scenario"),
        "workloads": lambda: _group("workload"),
    }[section]()
    return "\n".join([title, *lines])


def _table(rows: list[tuple[str, str]]) -> list[str]:
    width = max((len(name) for name, _ in rows), default=0)
    return [f"  {name:<{width}}  {text}" for name, text in rows]


def _models() -> tuple[str, list[str]]:
    rows = [(name, model_line(load_model(name))) for name in model_names()]
    title = (
        f"Models (model=NAME, {len(rows)} in sim/catalog/models/; or a HuggingFace id of one, "
        "such as meta-llama/Llama-3.1-8B-Instruct; or a path to a config.json):"
    )
    return title, _table(rows)


def model_line(model: ModelSpec) -> str:
    """Parameters, layers, attention design, context and checkpoint dtype, in one line."""
    p = model.params
    size = _billions(p.total)
    if model.moe is not None:
        size += (
            f" ({_billions(p.active)} active, {model.moe.num_experts} experts, top "
            f"{model.moe.experts_per_token})"
        )
    return (
        f"{size}, {model.num_layers} layers, {attention_line(model)}, context "
        f"{model.max_position_embeddings:,}, {model.checkpoint_dtype}"
    )


def _billions(params: int) -> str:
    return f"{params / 1e9:.0f}B" if params >= 100e9 else f"{params / 1e9:.1f}B"


def attention_line(model: ModelSpec) -> str:
    kinds = Counter((layer.attention, layer.window_tokens) for layer in model.layers)
    parts = []
    for (kind, window), count in sorted(kinds.items(), key=lambda kc: -kc[1]):
        name = _attention_name(model, kind, window)
        parts.append(name if len(kinds) == 1 else f"{count} x {name}")
    if model.indexer is not None:
        parts.append(f"sparse top-{model.indexer.topk_tokens:,}")
    return " + ".join(parts)


def _attention_name(model: ModelSpec, kind: Attention, window: int | None) -> str:
    match kind:
        case Attention.FULL:
            heads = "MHA" if model.num_kv_heads == model.num_q_heads else "GQA"
            return f"{heads} {model.num_q_heads}/{model.num_kv_heads} heads"
        case Attention.SLIDING | Attention.CHUNKED:
            return f"{'sliding' if kind == Attention.SLIDING else 'chunked-local'} {window:,}"
        case Attention.LINEAR:
            return f"linear ({model.linear.kind})" if model.linear else "linear"
    return str(kind.value).upper()  # MLA


def _gpus() -> tuple[str, list[str]]:
    rows = []
    for name in hardware_names():
        hw = load_hardware(name)
        bf16 = hw.flops_per_s.get("bf16", 0.0)
        profile = "calibrated" if (PROFILE_DIR / f"{name}.json").is_file() else "roofline prior"
        rows.append(
            (
                name,
                f"{hw.display_name}: {hw.hbm_bytes / 2**30:.1f} GiB, "
                f"{hw.hbm_bytes_per_s / 1e12:.2f} TB/s, {bf16 / 1e12:,.0f} TFLOP/s bf16; "
                f"{profile}",
            )
        )
    title = (
        f"GPUs (hardware=NAME, {len(rows)} in {HARDWARE_DIR.name}/; or a path to a .yaml file; "
        "each priced by its calibrated profile, else the roofline prior):"
    )
    return title, _table(rows)


def _engines() -> tuple[str, list[str]]:
    rows = []
    for name, family in ENGINES.items():
        releases = family.releases(name)
        if len(releases) == 1:
            rows.append((name, "for teaching: one version, no releases"))
            continue
        newest = ".".join(str(n) for n in version_tuple(releases[-1])[:2])
        known = len(known_releases(name, releases))
        rows.append(
            (
                name,
                f"{releases[0]} .. {newest}.x ({known} known releases, {len(releases)} rule "
                f"sets; a bare name is {releases[-1]})",
            )
        )
    title = (
        "Engines (engine=NAME@VERSION, a published release (sim/engines/published.py); one "
        "without rules of its own takes the nearest earlier rule set's, and the run says so):"
    )
    return title, _table(rows) + _rule_sets()


def _rule_sets(shown: int = 6) -> list[str]:
    """Each rule set with the modelled settings its releases' changelogs name since the rule
    set before (sim/engines/changelog.py), and how many published releases it stands for."""
    lines = [
        "",
        "  Rule sets and what each changed (the modelled settings the changelogs name since the "
        "rule set before, sim/engines/changelogs/; every release: python -m "
        "tools.engine_changelog --coverage):",
    ]
    for name, family in ENGINES.items():
        releases = family.releases(name)
        if len(releases) == 1:
            continue
        for c in rule_set_changes(name, releases):
            names = ", ".join(c.settings[:shown])
            more = f" and {len(c.settings) - shown} more" if len(c.settings) > shown else ""
            what = (names + more) if c.settings else "no modelled setting named"
            if not c.read:
                what = "not read (no changelog of this release)"
            spec = f"{name}@{c.release}"
            lines.append(f"    {spec:<20} {what} ({c.releases} release{'s' * (c.releases > 1)})")
    return lines


def _group(group: str) -> tuple[str, list[str]]:
    rows = [(p.stem, first_comment(p)) for p in sorted((SCENARIO_DIR / group).glob("*.yaml"))]
    title = f"{group.capitalize()}s ({group}=NAME, {len(rows)} in scenarios/{group}/):"
    return title, _table(rows)


def first_comment(path: Path, width: int = WIDTH) -> str:
    """The first sentence of a YAML file's opening comment (Hydra's `# @package` line left
    out), cut to fit `width` at a clause outside parentheses, or else at a word."""
    words = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if text.startswith("@package") or not text:
            continue
        if line.startswith("#   "):  # an indented command: the prose ended
            break
        words.append(text)
    prose = " ".join(words)
    end = re.search(r"[.?!](\s|$)", prose)
    sentence = (prose[: end.start() + 1] if end else prose).rstrip(".")
    if len(sentence) <= width:
        return sentence
    depth, clauses = 0, []
    for i, char in enumerate(sentence[:width]):
        depth += (char == "(") - (char == ")")
        if depth == 0 and sentence[i : i + 2] in (", ", " (", "; ", ": "):
            clauses.append(i)
    if clauses and clauses[-1] >= width // 2:
        return sentence[: clauses[-1]]
    return sentence[: sentence.rfind(" ", 0, width - 3)] + "..."
