"""docs/engines.md's coverage table: every published release of each engine in the changelog's
range, the rule set it runs with (sim.engines.resolve.parse_engine_spec) and what its
changelog says (changed something modelled / checked: no modelled change / unread).

A release that runs with an earlier release's rules although its changelog names a modelled
change has been reviewed where `reviewed_<engine>.yaml` (beside the changelogs) lists each of
its modelled settings with why none moves a run on a catalogue GPU and model (a branch for
speculative decoding or a device the catalogue lacks, a condition reworded with the same
outcome): it is then "checked: no modelled change" with the count reviewed."""

from __future__ import annotations

from pathlib import Path

import yaml

from sim.engines.published import PUBLISHED
from sim.engines.resolve import parse_engine_spec
from sim.engines.versions import release_key
from sim.errors import UserError
from tools.engine_changelog.changes import read_changelog
from tools.engine_changelog.engines import SPECS

MAX_NAMES = 6


def in_range(engine: str) -> list[str]:
    first = release_key(SPECS[engine].first)
    return [r for r in PUBLISHED[engine] if release_key(r) >= first]


def rule_set(engine: str, release: str) -> tuple[str, bool | None]:
    """(the rule set `release` runs with, whether it is its own); ("refused", None) when the
    catalogue refuses the release."""
    try:
        _, version, rules = parse_engine_spec(f"{engine}@{release}")
    except UserError:
        return "refused", None
    return rules, rules == version


def modelled_settings(entry: dict) -> list[str]:
    return sorted({c["setting"] for c in entry["changes"] if c["modelled"]})


def read_reviewed(out_dir: Path, engine: str) -> dict[str, set[str]]:
    """Release -> the modelled settings reviewed as moving no catalogue run (empty if none)."""
    path = out_dir / f"reviewed_{engine}.yaml"
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of release -> [{{setting, why}}]")
    out = {}
    for release, items in data.items():
        if not isinstance(items, list) or not all(
            isinstance(i, dict) and i.get("setting") and i.get("why") for i in items
        ):
            raise UserError(f"{path}: {release}: each item needs a setting and a why")
        out[str(release)] = {str(i["setting"]) for i in items}
    return out


def unreviewed(entry: dict, reviewed: set[str]) -> list[str]:
    """The modelled settings of a changelog entry not reviewed as moving no catalogue run."""
    return [n for n in modelled_settings(entry) if n not in reviewed]


def verdict(log: dict, release: str, reviewed: set[str] | None = None, own: bool = False) -> str:
    entry = (log.get("releases") or {}).get(release)
    if entry is None:
        return "unread: " + ((log.get("unread") or {}).get(release) or "not run").split(";")[0]
    if entry["compared_with"] is None:
        return "first release read (nothing to compare)"
    if not entry["modelled_change"]:
        return f"checked: no modelled change (vs {entry['compared_with']})"
    names = modelled_settings(entry)
    if not own and reviewed is not None and not unreviewed(entry, reviewed):
        return (
            f"checked: no modelled change (vs {entry['compared_with']}; {len(names)} modelled "
            "name(s) reviewed, none moves a catalogue run)"
        )
    more = f" and {len(names) - MAX_NAMES} more" if len(names) > MAX_NAMES else ""
    shown = ", ".join(f"`{n}`" for n in names[:MAX_NAMES])
    return f"changed something modelled (vs {entry['compared_with']}): {shown}{more}"


def table(out_dir: Path) -> str:
    """The markdown coverage table of the three engines, from the changelogs in `out_dir`."""
    lines = []
    for engine in SPECS:
        log = read_changelog(out_dir / f"{engine}.yaml")
        reviewed = read_reviewed(out_dir, engine)
        lines += [
            f"**{engine}** (changelog: `sim/engines/changelogs/{engine}.yaml`)",
            "",
            "| release | rule set | changelog |",
            "|---|---|---|",
        ]
        counts = {"read": 0, "modelled": 0, "reviewed": 0, "no rules": 0}
        for release in in_range(engine):
            rules, own = rule_set(engine, release)
            shown = {True: f"{rules} (own)", False: f"{rules}'s", None: "refused (no rules read)"}
            done = reviewed.get(release, set())
            lines.append(f"| {release} | {shown[own]} | {verdict(log, release, done, own)} |")
            entry = (log.get("releases") or {}).get(release)
            counts["read"] += entry is not None
            counts["modelled"] += bool(entry and entry["modelled_change"])
            open_ = bool(entry and entry["modelled_change"] and not own)
            counts["reviewed"] += open_ and not unreviewed(entry, done)
            counts["no rules"] += open_ and bool(unreviewed(entry, done))
        lines += ["", _summary(engine, counts), ""]
    return "\n".join(lines)


def _summary(engine: str, counts: dict) -> str:
    total = len(in_range(engine))
    return (
        f"{engine}: {total} published releases from {SPECS[engine].first}; {counts['read']} read, "
        f"{total - counts['read']} unread; {counts['modelled']} changed something modelled; "
        f"of those, {counts['reviewed']} run with an earlier rule set, reviewed as moving no "
        f"catalogue run, and {counts['no rules']} without a rule set of their own nor a review."
    )


def without_rule_set(out_dir: Path) -> list[tuple[str, str, list[str]]]:
    """(engine, release, modelled settings changed) of each release whose changelog names a
    modelled change but which runs with an earlier release's rules (or is refused)."""
    out = []
    for engine in SPECS:
        log = read_changelog(out_dir / f"{engine}.yaml")
        reviewed = read_reviewed(out_dir, engine)
        for release, entry in (log.get("releases") or {}).items():
            done = reviewed.get(release, set())
            if (
                entry["modelled_change"]
                and rule_set(engine, release)[1] is not True
                and unreviewed(entry, done)
            ):
                kinds = {}
                for c in entry["changes"]:
                    if c["modelled"] and c["setting"] not in done:
                        kinds.setdefault(c["setting"], set()).add(c["kind"])
                named = [f"{n} ({', '.join(sorted(k))})" for n, k in sorted(kinds.items())]
                out.append((engine, release, named))
    return out
