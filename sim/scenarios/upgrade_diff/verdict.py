"""The verdict in words: the metrics' names and units, what the simulation shows moving
between two runs (mechanism), and the sentence report.md and the console lead with."""

from __future__ import annotations

from collections.abc import Sequence

from sim.scenarios.upgrade_diff.attribute import Attribution
from sim.scenarios.upgrade_diff.changes import Change
from sim.scenarios.upgrade_diff.outcomes import Figures
from sim.scenarios.upgrade_diff.result import AttributionRow, Side

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
    k0, k1 = a.attention_kernel, b.attention_kernel
    if k0 != k1 or a.kernel_family != b.kernel_family:
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


def verdict(
    changes: list[Change],
    r: Attribution,
    before: Side,
    after: Side,
    rows: Sequence[AttributionRow],
) -> str:
    """The headline metric's change and the fewest settings that make up 70% of it (rows:
    largest effect first), with what the simulation shows moving."""
    m = r.headline
    title, _, _ = NAMES[m]
    b, a = before.metrics[m], after.metrics[m]
    total = r.change_pct[m]
    versions = f"from {before.engine} to {after.engine}"
    if not changes:
        same = f"{title} {fmt(m, b)}"
        return f"No setting differs {versions}: the two runs are the same ({same})."
    if abs(total) < 0.05:
        return f"{title} is unchanged {versions} ({fmt(m, b)})."
    word = "rose" if total > 0 else "fell"
    lead = f"{title} {word} {abs(total):.1f}% ({fmt(m, b)} -> {fmt(m, a)}) {versions}"
    active = [row for row in rows if not row.inert]
    pushing = [row for row in active if row.effect_pct[m] * total > 0]
    top, share = [], 0.0
    for row in pushing:  # sorted by size: the fewest that make up 70% of the change
        top.append(row)
        share += row.effect_pct[m]
        if share / total >= 0.7 or len(top) == 3:
            break
    if not top:
        return lead + ": no single setting accounts for it; it comes from their interaction."

    def named(row: AttributionRow) -> str:
        return (
            f"{row.setting} ({_short(row.before)} -> {_short(row.after)}, "
            f"{row.category}: {row.effect_pct[m]:+.1f} ± {row.ci_pct[m]:.1f} points)"
        )

    text = f"{lead}: {_join([named(row) for row in top])}"
    text += " accounts" if len(top) == 1 else " account"
    text += f" for {share:+.1f} of the {total:+.1f} points"
    against = [row for row in active if row.effect_pct[m] * total < 0]
    if share / total > 1.1 and against:
        offsets = [f"{row.setting} ({row.effect_pct[m]:+.1f})" for row in against[:2]]
        text += f", partly offset by {_join(offsets)}"
    idx = [i for i, c in enumerate(changes) if c.setting == top[0].setting]
    how = mechanism(before.sim, Figures.of(r.outcome(idx))) or mechanism(before.sim, after.sim)
    if how:
        text += f"; the simulation shows {' and '.join(how[:2])}"
    return text + "."


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
