"""report.md's text for upgrade_diff, section by section: the verdict (with an overloaded
side's judgement and every headline asked in the run dir), the workload, the baseline, what
changed, the attribution, the load sweep, what configuration does not explain and the flags
that restore the old behaviour (advice.py), and the method."""

from __future__ import annotations

from sim.report.escape import Md, md_code, md_text
from sim.report.figures import md_table
from sim.scenarios.upgrade_diff.advice import restore, unexplained
from sim.scenarios.upgrade_diff.headline import within_noise
from sim.scenarios.upgrade_diff.load_sweep import appears_at
from sim.scenarios.upgrade_diff.outcomes import METRICS
from sim.scenarios.upgrade_diff.plan import SIMULATED
from sim.scenarios.upgrade_diff.result import UpgradeResult
from sim.scenarios.upgrade_diff.verdict import NAMES, Pair, fmt, pair

MATCH_WARN_PCT = 10.0  # a simulated before further than this from the baseline is flagged


def report_text(s: UpgradeResult, plots: dict) -> str:
    sides = pair(s.before.engine, s.after.engine, s.attribution, s.config.upgrade)
    # the verdict, the notes and the judgements are the console's too, plain text: escaped
    # whole; the model, the GPU, a baseline's path and a setting's value may be a user's
    lines = [f"# Upgrade diff: {md_text(sides.title)}", "", f"**{md_text(s.verdict)}**", ""]
    lines += _overload(s)
    lines += _other_headlines(s)
    lines += _workload(s)
    lines += _baseline(s)
    lines += _what_changed(s, sides)
    lines += _attribution(s, sides, plots)
    if s.load_sweep:
        lines += _load(s, plots)
    lines += unexplained(s)
    lines += restore(s)
    lines += _method(s)
    return "\n".join(lines)


def _overload(s: UpgradeResult) -> list[str]:
    """Each overloaded side's judgement, as python -m sim prints it (its first such seed)."""
    lines = []
    for side in (s.before, s.after):
        if side.overload is not None and (warning := side.overload.warning(side.engine)):
            lines += [md_text(warning), ""]
    return lines


def _other_headlines(s: UpgradeResult) -> list[str]:
    """The verdicts of every headline asked in this run dir (history.py), this one marked."""
    if not s.verdicts or len(s.verdicts) < 2:
        return []
    lines = ["## Every headline asked in this run dir", ""]
    for metric, v in s.verdicts.items():
        said = "this report's, above" if metric == s.headline else md_text(v["verdict"])
        lines.append(f"- `upgrade.headline={metric}`: {said}")
    return [*lines, ""]


def _workload(s: UpgradeResult) -> list[str]:
    cfg = s.config
    w = cfg.workload
    lines = [
        f"{md_text(cfg.model)} on {md_text(cfg.hardware)} (TP {cfg.parallel.tp}), "
        f"{s.before.metrics['completed']:.0f} requests ({w.kind}"
        + (f", {w.rate:g} req/s" if w.rate and not w.concurrency else "")  # (a closed loop
        + (f", concurrency {w.concurrency}" if w.concurrency else "")  # has no rate)
        + f"), seeds {', '.join(map(str, s.shapley.seeds))}; every run of a seed sees the same "
        "arrivals and lengths. Metrics are means over the seeds; changes and effects are in "
        "percent of the before version's value on each seed, then averaged, ± the half-width "
        "of the 95% interval over seeds (and sampled orders).",
        "",
    ]
    return lines + [f"- {md_text(note)}" for note in s.notes]


def _baseline(s: UpgradeResult) -> list[str]:
    b = md_text(s.before.engine)
    lines = ["", "## Baseline", ""]
    base = s.baseline
    if base.kind == SIMULATED:
        lines.append(
            f"The baseline is {b} simulated on this workload. No recorded run was given "
            "(`upgrade.baseline=PATH`), so nothing checks that the simulated before matches "
            "the real one: the attribution explains the simulator's before and after."
        )
        return lines
    worst = max((abs(v) for v in base.match_pct.values()), default=0.0)
    rows = [
        (NAMES[k][0], fmt(k, base.measured[k]), fmt(k, base.simulated[k]), f"{v:+.1f}%")
        for k, v in base.match_pct.items()
    ]
    lines.append(f"Recorded baseline: {md_code(base.path)} ({base.kind}).")
    header = ("metric", "recorded", f"simulated {s.before.engine} (seed {s.shapley.seeds[0]})",
              "error")  # fmt: skip
    lines += ["", md_table(rows, header), ""]
    if worst > MATCH_WARN_PCT:
        lines.append(
            f"**The simulated before is {worst:.0f}% off the recorded baseline on at least "
            "one metric: the attribution below is only as good as that match; read its "
            "effects as directions rather than sizes.**"
        )
    else:
        lines.append(
            f"The simulated before is within {worst:.1f}% of the recorded baseline on "
            "every metric it recorded; the attribution is only as good as this match."
        )
    return lines


def _what_changed(s: UpgradeResult, sides: Pair) -> list[str]:
    b, a = sides.before, sides.after
    rows = [
        (
            NAMES[k][0],
            fmt(k, s.before.metrics[k]),
            fmt(k, s.after.metrics[k]),
            _pm(s.change_pct[k], s.change_ci_pct[k], "%"),
            f"{s.interaction_pct[k]:+.1f}",
        )
        for k in METRICS
    ]
    lines = ["", "## What changed", ""]
    lines.append(md_table(rows, ("metric", b, a, "change", "interaction (points)")))
    sides_run = [(b, s.before.sim), (a, s.after.sim)]
    if s.top_alone is not None:  # the figures the verdict's mechanism reads
        sides_run.append((s.top_alone.engine, s.top_alone.sim))
    figures = [
        ("engine steps", lambda f: f"{f.steps:,.0f}"),
        ("mean / p99 step", lambda f: f"{f.mean_step_ms:.2f} / {f.p99_step_ms:.1f} ms"),
        (
            "mean batch / tokens per step",
            lambda f: f"{f.mean_batch_size:.1f} / {f.mean_tokens_per_step:.0f}",
        ),
        ("preemptions", lambda f: f"{f.preemptions:,.1f}"),
        ("KV blocks / peak use", lambda f: f"{f.num_kv_blocks:,.0f} / {f.kv_usage_peak:.0%}"),
        ("prefix-cache hits", lambda f: f"{f.prefix_cache_hit_rate:.0%}"),
        ("attention priced with", lambda f: f.attention_kernel),
    ]
    table = [(name, *(show(f) for _, f in sides_run)) for name, show in figures]
    lines += ["", md_table(table, ("simulator figure", *(n for n, _ in sides_run))), ""]
    return lines


def _pm(value: float, half_width: float, unit: str = "") -> str:
    """value ± the half-width of its 95% interval, marked when that interval includes zero."""
    text = f"{value:+.1f}{unit} ± {half_width:.1f}"
    return text + " (noise)" if half_width > 0 and within_noise(value, half_width) else text


def _attribution(s: UpgradeResult, sides: Pair, plots: dict) -> list[str]:
    m = s.headline
    head = NAMES[m][0]
    sh = s.shapley
    lines = ["## Attribution", "", f"![waterfall]({plots['waterfall']})", ""]
    rows = [
        (
            Md(md_code(r.setting) + (" *" if r.in_minimal_set else "")),
            r.category,
            _v(r.before),
            _v(r.after),
            "inert" if r.inert else _pm(r.effect_pct[m], r.ci_pct[m]),
            f"{r.added_pct[m]:+.1f}",
            f"{r.removed_pct[m]:+.1f}",
            r.rule,
        )
        for r in s.attribution
    ]
    header = (
        "setting",
        "category",
        sides.before,
        sides.after,
        f"{head}: Shapley",
        "added to before",
        "removed from after",
        "rule (after)",
    )
    lines.append(md_table(rows, header))
    how = "over every subset" if sh.exact else f"from {sh.orders_per_seed} random orders per seed"
    lines += [
        "",
        f"Shapley values {how} of the {sh.num_changes - len(sh.inert)} changes that move "
        "anything; they add up to the change. `(noise)`: not distinguishable from noise (the "
        "95% interval includes zero), left out of the verdict. `added to before`: the before "
        "version with that one change; `removed from after`: the after version minus it with "
        "the sign of the upgrade. `*`: the minimal set (delta debugging) that reproduces at "
        f"least 90% of the {head} change: {', '.join(map(md_code, s.minimal_set)) or 'none'}. "
        f"Inert ({len(sh.inert)}): no effect on any run either way"
        + (f" ({', '.join(map(md_code, sh.inert))})" if sh.inert else "")
        + ".",
        "",
        "By category (that category's changes alone on the before version; the interaction is "
        "what only happens when categories change together):",
        "",
    ]
    return lines + _by_category(s)


def _by_category(s: UpgradeResult) -> list[str]:
    rows = [(cat, *(f"{v[k]:+.1f}" for k in METRICS)) for cat, v in s.by_category_pct.items()]
    rows.append(("interaction", *(f"{s.interaction_pct[k]:+.1f}" for k in METRICS)))
    rows.append(("total change", *(f"{s.change_pct[k]:+.1f}" for k in METRICS)))
    lines = [md_table(rows, ("category", *(NAMES[k][0] for k in METRICS)))]
    for u in s.unpriced:  # inert because no table tells its two sides apart: no evidence
        lines += ["", f"Note: {md_text(u.words)}. Its 0 above is no evidence either way."]
    return lines


def _load(s: UpgradeResult, plots: dict) -> list[str]:
    sweep = s.load_sweep
    head = NAMES[s.headline][0]
    lines = ["", "## Load", "", f"![load sweep]({plots['load']})", ""]
    where = appears_at(sweep, s.headline)
    if sweep.swept == "rate":
        lines.append(
            f"{md_text(s.before.engine)}'s capacity on this workload (every request queued at "
            "once): "
            f"{sweep.capacity_rps:.2f} req/s."
        )
    if where is None:
        lines.append(f"{head} gets no more than 5% worse at any load of the sweep.")
    else:
        at = (
            f"{where.rate:.2f} req/s ({where.factor:g} x capacity)"
            if sweep.swept == "rate"
            else f"concurrency {where.concurrency} ({where.factor:g} x)"
        )
        lines.append(f"The {head} regression appears from {at} on.")
    rows = [
        (
            (f"{p.rate:.2f} req/s" if p.rate is not None else f"{p.concurrency} concurrent")
            + f" ({p.factor:g}x)",
            *(f"{p.change_pct[k]:+.1f}%" for k in METRICS),
        )
        for p in sweep.points
    ]
    lines += ["", md_table(rows, ("load", *(NAMES[k][0] for k in METRICS)))]
    return lines


def _method(s: UpgradeResult) -> list[str]:
    sh = s.shapley
    return [
        "",
        "## Method",
        "",
        f"{s.simulations_run} simulations ({sh.attribution_simulations} for the "
        f"attribution over {len(sh.seeds)} seeds, the rest for the load sweep; the wall "
        "time is in summary.json). Each mixture is the before version's resolved settings "
        "with some changes applied; settings the engine derives from its KV pool at start-up "
        "are re-derived for each. See docs/upgrade_diff.md.",
        "",
    ]


def _v(value) -> Md:
    """A setting's value in a cell: a string (maybe a user's engine argument) as code."""
    if isinstance(value, list):
        return Md(f"{len(value)} sizes, {min(value)}..{max(value)}" if value else "none")
    if isinstance(value, float):
        return Md(f"{value:.3g}")
    return Md(md_code(value) if isinstance(value, str) else md_text(value))
