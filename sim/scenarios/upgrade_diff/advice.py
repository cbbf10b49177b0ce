"""What report.md advises: the part of a measured change that configuration does not explain
and where to look next, and the engine flags that restore the old behaviour on the new
version."""

from __future__ import annotations

from sim.report.escape import md_code, md_fence, md_text
from sim.report.figures import md_table
from sim.scenarios.upgrade_diff.result import UpgradeResult
from sim.scenarios.upgrade_diff.verdict import NAMES


def unexplained(s: UpgradeResult) -> list[str]:
    lines = ["", "## Unexplained by configuration", ""]
    if s.unexplained_pct is None:
        lines.append(
            "No real results of both versions were given (`upgrade.measured_before=PATH "
            "upgrade.measured_after=PATH`, run dirs or vllm bench serve JSON), so the part of a "
            "real change that configuration does not explain cannot be computed."
        )
        return lines
    rows = [
        (
            NAMES[k][0],
            f"{s.measured.change_pct[k]:+.1f}%",
            f"{s.change_pct[k]:+.1f}%",
            f"{v:+.1f}",
        )
        for k, v in s.unexplained_pct.items()
    ]
    header = ("metric", "measured change", "simulated change", "unexplained (points)")
    lines.append(md_table(rows, header))
    worst = max(s.unexplained_pct.items(), key=lambda kv: abs(kv[1]))
    lines += ["", next_steps(worst[0], worst[1])]
    return lines


def restore(s: UpgradeResult) -> list[str]:
    rc = s.restore_command
    minimal = md_text(", ".join(s.minimal_set))  # the commands hold a user's values, maybe
    lines = ["", "## Restoring the old behaviour on the new version", ""]
    if rc.minimal_command:
        lines += [
            f"{md_text(s.after.engine)} with the minimal set set back ({minimal}):",
            "",
            *md_fence(rc.minimal_command, "bash"),
        ]
    else:
        lines.append(f"No engine flag sets the minimal set ({minimal or 'empty'}) back; see below.")
    lines += [
        "",
        "Every changed setting set back (those that matter first):",
        "",
        *md_fence(rc.command, "bash"),
    ]
    if rc.not_restorable:
        lines += ["", "No flag restores:", ""]
        lines += [f"- {md_code(x.setting)}: {md_text(x.why)}" for x in rc.not_restorable]
    return lines


def next_steps(metric: str, points: float) -> str:
    head = NAMES[metric][0]
    if abs(points) < 5:
        return (
            f"Configuration explains the measured change to within {abs(points):.1f} points "
            f"on every metric (largest: {head}): look no further than the settings above."
        )
    return (
        f"{abs(points):.1f} points of the measured {head} change are not explained by any "
        "configuration difference. Where to look next, in order: the kernels and libraries "
        "the release ships (swap torch / FlashAttention / FlashInfer back with the new "
        "engine), then the benchmark client (same client version, warm-up, concurrency), "
        "then bisect the engine's commits between the two releases."
    )
