"""Every headline's verdict asked in one run dir. A rerun into the same run dir with another
upgrade.headline reuses every simulation (outcomes.task_key leaves the upgrade section out)
and writes report.md and summary.json anew for the headline asked; the verdicts of the
headlines asked before are kept with them: summary.json's `verdicts` maps each headline to its
verdict, and report.md lists them all. An earlier summary.json counts only when it ran the very
same study (its config equal but for upgrade.headline, upgrade.jobs and the output section):
a verdict about other versions, another workload or other seeds is not this study's."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

from sim.scenarios.upgrade_diff.outcomes import METRICS
from sim.scenarios.upgrade_diff.result import UpgradeResult

NOT_THE_STUDY = (("upgrade", "headline"), ("upgrade", "jobs"), ("output",))  # config keys that
# do not change which simulations a study runs nor how it reads them


def with_earlier_verdicts(result: UpgradeResult, summary_path: Path) -> UpgradeResult:
    """`result` with the verdicts of the other headlines the summary.json at `summary_path`
    holds, when it was written by the same study (else `result` as it is)."""
    earlier = _earlier(summary_path)
    if earlier is None or _study(earlier.get("config")) != _study(asdict(result.config)):
        return result
    kept = dict(earlier.get("verdicts") or {})
    if not kept and earlier.get("headline") in METRICS:  # written before `verdicts` existed
        restore = earlier.get("restore_command") or {}
        kept[earlier["headline"]] = {
            "verdict": earlier.get("verdict", ""),
            "headline_rule": earlier.get("headline_rule", ""),
            "minimal_set": earlier.get("minimal_set", []),
            "minimal_command": restore.get("minimal_command"),
        }
    kept[result.headline] = result.verdict_record
    if set(kept) == {result.headline}:
        return result
    ordered = {m: kept[m] for m in METRICS if m in kept}  # the same order whatever was asked when
    return replace(result, verdicts=ordered)


def _earlier(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _study(config) -> dict | None:
    """A config as summary.json holds it (tuples as lists), with the keys that do not make
    another study left out."""
    if not isinstance(config, dict):
        return None
    out = json.loads(json.dumps(config, default=str))
    for path in NOT_THE_STUDY:
        node = out
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(path[-1], None)
    return out
