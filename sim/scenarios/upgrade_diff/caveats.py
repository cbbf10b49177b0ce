"""What the verdict must say it cannot see, in words: a side that ran overloaded (its latency
measures how far the queue got), and releases the catalogue resolves with another release's
rules (what changed between them and is not modelled is not in the answer). Kernel changes no
table prices are sim/scenarios/upgrade_diff/unpriced.py."""

from __future__ import annotations

from sim.scenarios.upgrade_diff.result import Side


def overload_words(before: Side, after: Side, names: tuple[str, str]) -> str:
    """The verdict's opening when either side ran overloaded on any seed ("" when neither):
    each such side's served and offered rates, what that does to the figures, and the way out.
    `names`: the two sides as the verdict names them."""
    hit = [
        side.overload.words(name)
        for side, name in zip((before, after), names, strict=True)
        if side.overload is not None and side.overload.overloaded
    ]
    if not hit:
        return ""
    return (
        f"Overloaded: {' and '.join(hit)}: the queue grows through the run, so its latency "
        "measures how far the queue got as much as the engines (sim.overload per seed in "
        "summary.json); workload.rate=auto studies the upgrade below capacity. "
    )


UNMODELLED = (
    "what changed between these releases and is not modelled (fixes, kernel builds without a "
    "measured table, kernels compiled at first use that no rule records, scheduler changes no "
    "rule records) is not in this answer."
)


def same_settings_words(before: Side, after: Side) -> str:
    """Why two releases whose resolved settings are all the same may still differ ("" for one
    release against itself, and for two with one rule set: rules_words says it)."""
    if before.version == after.version or before.rule_set == after.rule_set:
        return ""
    return f"Their rules give the same settings on this GPU and model: {UNMODELLED}"


def rules_words(before: Side, after: Side) -> str:
    """What the catalogue's rule sets say of the two sides ("" when each has its own): two
    releases that resolve to the same rule set differ in nothing it models; a release with no
    rule set of its own runs with the nearest earlier one's."""
    if before.rule_set is None or after.rule_set is None:
        return ""
    name = before.engine.partition("@")[0]
    if before.version != after.version and before.rule_set == after.rule_set:
        return (
            f"{before.engine} and {after.engine} both resolve to {name} {before.rule_set}'s "
            f"rules, so no engine setting the catalogue records differs between them: {UNMODELLED}"
        )
    own = {s.engine: s.rule_set for s in (before, after) if s.version != s.rule_set}
    if not own:
        return ""
    if len(own) == 1:
        ((engine, rule_set),) = own.items()
        return f"{engine} has no rule set of its own: it runs with {name} {rule_set}'s rules."
    (b, rb), (a, ra) = own.items()
    return (
        f"{b} and {a} have no rule set of their own: they run with {name} {rb}'s and {ra}'s rules."
    )
