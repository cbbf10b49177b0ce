"""The verdict in words: the metrics' names and units, what the simulation shows moving
between two runs (mechanism), the two sides' names (pair: two versions, or a what-if by its
change), and the sentence report.md and the console lead with. Effects whose 95% interval
includes zero are noise: never credited, never an offset."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.config import UpgradeConfig
from sim.scenarios.upgrade_diff.attribute import Attribution
from sim.scenarios.upgrade_diff.caveats import overload_words, rules_words, same_settings_words
from sim.scenarios.upgrade_diff.headline import (
    FLOOR_PCT,
    LARGEST,
    MEASURED,
    NAMED,
    THROUGHPUT,
    THROUGHPUTS,
    regressed,
    within_noise,
)
from sim.scenarios.upgrade_diff.outcomes import Figures, adverse
from sim.scenarios.upgrade_diff.result import AttributionRow, Side
from sim.scenarios.upgrade_diff.unpriced import Unpriced, table

NAMES = {
    "request_throughput": ("request throughput", "req/s", 2),
    "output_throughput": ("output throughput", "tok/s", 0),
    "mean_ttft_ms": ("mean TTFT", "ms", 1),
    "p99_ttft_ms": ("p99 TTFT", "ms", 1),
    "mean_tpot_ms": ("mean TPOT", "ms", 2),
    "p99_tpot_ms": ("p99 TPOT", "ms", 2),
}


def fmt(metric: str, value: float) -> str:
    _, unit, digits = NAMES[metric]
    return f"{value:,.{digits}f} {unit}"


def mechanism(a: Figures, b: Figures) -> list[str]:
    """What the simulation shows moving between two runs' figures, strongest first."""
    found: list[tuple[float, str]] = []

    def rel(x, y):
        return (y - x) / x if x else (1.0 if y else 0.0)

    c0, c1, s0, s1 = a.first_use_compiles, b.first_use_compiles, a.first_use_s, b.first_use_s
    if abs(s1 - s0) >= 0.001:  # host time compiling kernels at first use (first_use.py)
        found.append(
            (
                1e9,  # the step's own host time: it leads whatever else moved
                f"{'more' if s1 > s0 else 'less'} time compiling GPU kernels at their first use "
                f"in the measured window ({c0:,.0f} -> {c1:,.0f} kernels, {s0:,.1f} s -> "
                f"{s1:,.1f} s)",
            )
        )

    p0, p1 = a.preemptions, b.preemptions
    if abs(p1 - p0) >= max(5, 0.25 * max(p0, p1)):
        word = "more" if p1 > p0 else "fewer"
        found.append((abs(rel(p0, p1)) + 1, f"{word} preemptions ({p0:,.0f} -> {p1:,.0f})"))
    for key, up, down, unit, digits in (
        ("mean_batch_size", "larger batches", "smaller batches", "", 1),
        ("mean_step_ms", "longer steps", "shorter steps", " ms", 2),
        ("p99_step_ms", "longer worst steps", "shorter worst steps", " ms", 1),
        ("mean_tokens_per_step", "more tokens per step", "fewer tokens per step", "", 0),
    ):
        x, y = getattr(a, key), getattr(b, key)
        change = rel(x, y)
        if abs(change) >= 0.1:
            word = up if change > 0 else down
            label = key.replace("_", " ").replace(" ms", "").replace("mean ", "mean ")
            found.append(
                (abs(change), f"{word} ({label} {x:,.{digits}f}{unit} -> {y:,.{digits}f}{unit})")
            )
    h0, h1 = a.prefix_cache_hit_rate, b.prefix_cache_hit_rate
    if abs(h1 - h0) >= 0.05:
        found.append((abs(h1 - h0), f"prefix-cache hits {h0:.0%} -> {h1:.0%}"))
    k0, k1 = table(a.attention_kernel), table(b.attention_kernel)  # the tables that priced
    if k0 != k1 or a.kernel_family != b.kernel_family:  # (one standing in for another: the same)
        what = f"{k0} -> {k1}" if k0 != k1 else f"{a.kernel_family} -> {b.kernel_family}"
        found.append((0.5, f"a different kernel ({what})"))
    blocks = rel(a.num_kv_blocks, b.num_kv_blocks)
    if a.num_kv_blocks != b.num_kv_blocks and abs(blocks) >= 0.05:
        found.append(
            (
                abs(blocks),
                f"a {'larger' if b.num_kv_blocks > a.num_kv_blocks else 'smaller'} KV "
                f"pool ({a.num_kv_blocks:,.0f} -> {b.num_kv_blocks:,.0f} blocks)",
            )
        )
    found.sort(key=lambda t: -t[0])
    return [text for _, text in found]


@dataclass(frozen=True, slots=True)
class Pair:
    """The two sides in words: two versions, or one version with one argument changed."""

    before: str  # each side's name in tables: name@version (with the arguments set, if any)
    after: str
    words: str  # "from vllm@0.6.3 to vllm@0.10.2" | "on vllm@0.10.2 with max_num_seqs 256 -> 128"
    title: str  # "vllm@0.6.3 -> vllm@0.10.2" | "vllm@0.10.2 with max_num_seqs 256 -> 128"


def pair(before: str, after: str, rows: Sequence[AttributionRow], up: UpgradeConfig) -> Pair:
    """Two versions by name; a what-if (the same version on both sides) by the settings its
    arguments changed (upgrade.before_args / after_args), before -> after."""
    if before != after:
        return Pair(before, after, f"from {before} to {after}", f"{before} -> {after}")
    set_before = {k for k, v in up.before_args.items() if v is not None}
    asked = set_before | {k for k, v in up.after_args.items() if v is not None}
    moved = [r for r in rows if r.setting in asked or r.field in asked] or list(rows[:3])
    if not moved:
        return Pair(before, after, f"between {before} and itself", f"{before} against itself")
    change = ", ".join(f"{r.setting} {_short(r.before)} -> {_short(r.after)}" for r in moved)
    b_set = ", ".join(f"{r.setting} {_short(r.before)}" for r in moved)
    a_set = ", ".join(f"{r.setting} {_short(r.after)}" for r in moved)
    b_name = f"{before} with {b_set}" if set_before else before
    words = f"{before} with {change}"
    return Pair(b_name, f"{after} with {a_set}", f"on {words}", words)


def leaders(rows: Sequence[AttributionRow], m: str, total: float) -> list[AttributionRow]:
    """The fewest settings (three at most) whose effects on m, each beyond the noise and in
    the direction of the change, make up 70% of it (rows: largest effect first)."""
    top, share = [], 0.0
    for row in rows:
        if row.inert or row.effect_pct[m] * total <= 0 or noise(row, m):
            continue
        top.append(row)
        share += row.effect_pct[m]
        if share / total >= 0.7 or len(top) == 3:
            break
    return top


def noise(row: AttributionRow, m: str) -> bool:
    """Whether a setting's effect on m is not distinguishable from noise (its 95% interval
    includes zero; an interval of no width is no noise, as report.md's tables mark it)."""
    return not row.inert and row.ci_pct[m] > 0 and within_noise(row.effect_pct[m], row.ci_pct[m])


def verdict(
    r: Attribution,
    before: Side,
    after: Side,
    rows: Sequence[AttributionRow],
    sides: Pair,
    alone: Side | None = None,
    unpriced: Sequence[Unpriced] = (),
) -> str:
    """The headline metric's change, the fewest settings beyond the noise that make up 70% of
    it and what offsets them, what the simulation shows moving (`alone`: the before version
    with only the first of them changed), and which rule chose the headline; first, when a
    side ran overloaded, that; before the headline's rule, the kernel changes no table prices
    and the releases resolved with another release's rules (caveats.py, unpriced.py)."""
    m = r.headline
    title, _, _ = NAMES[m]
    b, a = before.metrics[m], after.metrics[m]
    total = r.change_pct[m]
    warn = overload_words(before, after, (sides.before, sides.after))
    rules = rules_words(before, after)
    if not rows:
        same = f"the two simulated runs are the same ({title} {fmt(m, b)})."
        more = " ".join(x for x in (rules, same_settings_words(before, after)) if x)
        return f"{warn}No setting differs {sides.words}: {same} {more}".rstrip()
    cannot = [f"{u.words}." for u in unpriced]
    why = " ".join([*cannot, *([rules] if rules else []), headline_words(r)])
    if abs(total) < 0.05:  # settings differ, the runs do not: say which, and why not
        said = " ".join(x for x in (_inert(rows, unpriced), why) if x)
        return f"{warn}{title} is unchanged {sides.words} ({fmt(m, b)}). {said}"
    word = "rose" if total > 0 else "fell"
    lead = f"{title} {word} {abs(total):.1f}% ({fmt(m, b)} -> {fmt(m, a)}) {sides.words}"
    lead = warn + lead
    if within_noise(total, r.change_ci_pct[m]):
        lead += f", not distinguishable from noise (± {r.change_ci_pct[m]:.1f} points)"
    top = leaders(rows, m, total)
    if not top:
        pushing = [row for row in rows if not row.inert and row.effect_pct[m] * total > 0]
        if pushing:
            return f"{lead}: no setting's effect on it is distinguishable from noise. {why}"
        return f"{lead}: no single setting accounts for it; it comes from their interaction. {why}"
    text = f"{lead}: {_join([_named(row, m) for row in top])}"
    text += (" accounts" if len(top) == 1 else " account") + _share(top, rows, m, total)
    how = mechanism(before.sim, alone.sim) if alone is not None else []
    if how:
        where = f"{before.engine} with only {top[0].setting} changed"
    elif how := mechanism(before.sim, after.sim):
        where = f"from {sides.before} to {sides.after} the simulation"
    if how:
        text += f"; {where} shows {' and '.join(how[:2])}"
    return f"{text}. {why}"


def _inert(rows: Sequence[AttributionRow], unpriced: Sequence[Unpriced]) -> str:
    """The changes that left every figure of this workload as it was (besides those the verdict
    already calls unpriced), by name: they differ between the sides and move nothing here (what
    an unchanged verdict says of the settings that differ)."""
    said = {u.setting for u in unpriced}
    idle = [row for row in rows if row.inert and row.setting not in said]
    if not idle:
        return ""
    names = _join([f"{row.setting} ({_short(row.before)} -> {_short(row.after)})" for row in idle])
    verb = "changes" if len(idle) == 1 else "change"
    return f"{names} {verb} nothing on this workload (the same runs with or without it)."


def _named(row: AttributionRow, m: str) -> str:
    return (
        f"{row.setting} ({_short(row.before)} -> {_short(row.after)}, "
        f"{row.category}: {row.effect_pct[m]:+.1f} ± {row.ci_pct[m]:.1f} points)"
    )


def _share(top: list[AttributionRow], rows: Sequence[AttributionRow], m: str, total: float) -> str:
    """What part of the change the leaders make up; when more than all of it, what offsets."""
    share = sum(row.effect_pct[m] for row in top)
    if round(abs(share), 1) <= round(abs(total), 1):  # as printed: never "+5.7 of the +5.6"
        return f" for {share:+.1f} of the {total:+.1f}-point change"
    text = (
        f" for {share:+.1f} points, more than the whole {total:+.1f}-point change: other "
        f"changes offset {round(total, 1) - round(share, 1):+.1f}"  # adds up as printed
    )
    against = [
        row
        for row in rows
        if row.effect_pct[m] * total < 0 and abs(row.effect_pct[m]) >= 0.05 and not noise(row, m)
    ]
    if against:
        text += f" ({_join([f'{row.setting} {row.effect_pct[m]:+.1f}' for row in against[:2]])})"
    return text


def headline_words(r: Attribution) -> str:
    """Which metric leads the verdict, which rule chose it, and the worst other regression
    beyond the noise, with the upgrade.headline that explains that one instead."""
    m, rule = r.headline, r.headline_rule
    if rule == NAMED:
        return f"Headline: {NAMES[m][0]} (upgrade.headline={m})."
    reason = {
        MEASURED: "it regressed in the measured before/after",
        THROUGHPUT: "it moved beyond the noise",
        LARGEST: "no throughput moved beyond the noise; "
        + (
            "it had the largest adverse change"
            if adverse(m, r.change_pct[m]) > 0
            else "it changed most"
        ),
    }[rule]
    text = f"Headline: {NAMES[m][0]} ({reason}; set upgrade.headline to choose)."
    skip = set(THROUGHPUTS) if m in THROUGHPUTS else {m}
    beyond = {
        k: v
        for k, v in r.change_pct.items()
        if k not in skip and not within_noise(v, r.change_ci_pct[k])
    }
    if other := regressed(beyond, FLOOR_PCT):
        word = "fell" if other in THROUGHPUTS else "rose"
        text += (
            f" {NAMES[other][0]} {word} {abs(r.change_pct[other]):.1f}%: "
            f"upgrade.headline={other} explains it."
        )
    return text


def _short(value) -> str:
    if isinstance(value, list):
        return f"{len(value)} sizes up to {max(value)}" if value else "none"
    if isinstance(value, float) and value and abs(value) < 1e-3:
        return f"{value:.2g}"
    return str(value)


def _join(parts: list[str]) -> str:
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]
