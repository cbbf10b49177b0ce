"""What each rule set changed, read from the committed changelogs.

`sim/engines/changelogs/<engine>.yaml` holds every published release's changes, read from the
release itself by `python -m tools.engine_changelog` (facts: setting names, values, conditions,
files). A rule set stands for its release and every published release up to the next rule set;
what it changed is the union of the modelled settings those releases' changelogs name since the
rule set before it. `python -m sim --list engines` prints it per rule set.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from sim.engines.published import known_releases
from sim.engines.versions import release_key

CHANGELOG_DIR = Path(__file__).parent / "changelogs"


@dataclass(frozen=True, slots=True)
class RuleSetChange:
    release: str  # the rule set
    settings: tuple[str, ...]  # modelled settings the changelogs name since the rule set before
    releases: int  # published releases it stands for (itself included)
    read: bool  # whether the changelog read every one of them


def read(engine: str) -> dict | None:
    """The engine's committed changelog (None where none is committed)."""
    return read_file(CHANGELOG_DIR / f"{engine}.yaml")


def read_file(path: Path) -> dict | None:
    """A changelog file (libyaml's loader where installed: they run to megabytes), None if
    absent; tools/engine_changelog reads and rewrites them with it too."""
    if not path.is_file():
        return None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with path.open(encoding="utf-8") as f:
        return yaml.load(f, Loader=loader)


def rule_set_changes(engine: str, rule_sets: tuple[str, ...]) -> list[RuleSetChange]:
    """Each rule set of `engine` with what its releases changed since the rule set before."""
    log = read(engine) or {}
    entries = log.get("releases") or {}
    known = [(release_key(r), r) for r in known_releases(engine, rule_sets)]
    keys = [release_key(r) for r in rule_sets] + [None]
    out = []
    for i, rule in enumerate(rule_sets):
        prior, key, upper = (keys[i - 1] if i else None), keys[i], keys[i + 1]
        # the releases since the rule set before (whose changes this one takes on), and those
        # it stands for (up to the next rule set)
        since = [r for k, r in known if (prior is None or k > prior) and k <= key]
        covers = [r for k, r in known if k >= key and (upper is None or k < upper)]
        names = {
            c["setting"]
            for r in since
            for c in (entries.get(r) or {}).get("changes", ())
            if c.get("modelled")
        }
        read_all = bool(entries) and all(r in entries for r in since)
        out.append(RuleSetChange(rule, tuple(sorted(names)), len(covers), read_all))
    return out
