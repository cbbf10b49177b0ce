"""upgrade_diff's outputs: summary.json, attribution.csv, report.md, waterfall and load plots."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.report.figures import md_table, plt, save_png
from sim.report.html import write_report
from sim.run.outputs import write_json, write_text
from sim.scenarios.upgrade_diff.mixtures import METRICS
from sim.scenarios.upgrade_diff.study import MATCH_WARN_PCT, NAMES, appears_at, fmt


def plot_waterfall(s: dict, path: Path) -> str:
    """The headline metric from before to after, one bar per change's Shapley value (with its
    95% interval), biggest first; inert changes in one bar."""
    m = s["headline"]
    title, unit, _ = NAMES[m]
    base = s["before"][m]
    rows = [r for r in s["attribution"] if not r["inert"]]
    inert = [r for r in s["attribution"] if r["inert"]]
    labels, deltas, errors = [], [], []
    for r in rows:
        labels.append(f"{r['setting']}\n({r['category']})")
        deltas.append(r["effect_pct"][m] / 100 * base)
        errors.append(r["ci_pct"][m] / 100 * base)
    residual = s["shapley"]["inert_residual_pct"][m] / 100 * base
    if inert:
        labels.append(f"{len(inert)} inert\nsetting{'s' if len(inert) > 1 else ''}")
        deltas.append(residual)
        errors.append(0.0)
    fig, ax = plt.subplots(figsize=(max(6.5, 1.1 * (len(labels) + 2)), 4.6))
    ax.bar(0, base, color="#7f7f7f")
    level = base
    for k, (d, e) in enumerate(zip(deltas, errors, strict=True), start=1):
        worse = d > 0 if not m.endswith("throughput") else d < 0
        ax.bar(k, d, bottom=level, color="#d62728" if worse else "#2ca02c")
        if e:
            ax.errorbar(k, level + d, yerr=e, color="black", capsize=3, lw=1)
        level += d
    end = len(labels) + 1
    ax.bar(end, s["after"][m], color="#1f77b4")
    ax.set_xticks(
        range(end + 1),
        [s["before"]["engine"], *labels, s["after"]["engine"]],
        rotation=30,
        ha="right",
        fontsize=8,
    )
    ax.set_ylabel(f"{title} ({unit})")
    ax.set_title(f"{title}: each changed setting's share (Shapley value, 95% interval)")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return save_png(fig, path)


def plot_load_sweep(s: dict, path: Path) -> str:
    sweep = s["load_sweep"]
    m = s["headline"]
    title, unit, _ = NAMES[m]
    pts = sweep["points"]
    x = [p.get("rate", p.get("concurrency")) for p in pts]
    xlabel = "request rate (req/s)" if sweep["swept"] == "rate" else "concurrency"
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4))
    ax.plot(x, [p["before"][m] for p in pts], "o-", label=s["before"]["engine"])
    ax.plot(x, [p["after"][m] for p in pts], "s-", label=s["after"]["engine"])
    if sweep.get("capacity_rps"):
        ax.axvline(sweep["capacity_rps"], color="gray", ls=":", lw=1, label="before's capacity")
    ax.set(xlabel=xlabel, ylabel=f"{title} ({unit})", title=f"{title} by load")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    for metric in METRICS:
        bx.plot(
            x,
            [p["change_pct"][metric] for p in pts],
            "o-",
            label=NAMES[metric][0],
            lw=2.5 if metric == m else 1,
        )
    bx.axhline(0, color="black", lw=0.8)
    bx.set(xlabel=xlabel, ylabel="after vs before (%)", title="change by load")
    bx.legend(fontsize=7)
    bx.grid(alpha=0.3)
    fig.tight_layout()
    return save_png(fig, path)


def attribution_frame(s: dict) -> pd.DataFrame:
    rows = []
    for r in s["attribution"]:
        row = {k: r[k] for k in ("setting", "category", "rule", "inert", "in_minimal_set")}
        row["before"], row["after"] = str(r["before"]), str(r["after"])
        for m in METRICS:
            row[f"effect_pct.{m}"] = r["effect_pct"][m]
            row[f"ci_pct.{m}"] = r["ci_pct"][m]
            row[f"added_pct.{m}"] = r["added_pct"][m]
            row[f"removed_pct.{m}"] = r["removed_pct"][m]
        row["restore_flag"] = r["restore_flag"] or ""
        rows.append(row)
    return pd.DataFrame(rows)


def _v(value) -> str:
    if isinstance(value, list):
        return f"{len(value)} sizes, {min(value)}..{max(value)}" if value else "none"
    if isinstance(value, float):
        return f"{value:.3g}"
    return f"`{value}`" if isinstance(value, str) else str(value)


def write_upgrade_outputs(s: dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    frame = attribution_frame(s)
    write_text(out_dir / "attribution.csv", frame.to_csv(index=False))
    plots = {"waterfall": plot_waterfall(s, out_dir / "waterfall.png")}
    if s["load_sweep"]:
        plots["load"] = plot_load_sweep(s, out_dir / "load_sweep.png")
    write_report(out_dir, report_text(s, plots))
    write_json(out_dir / "summary.json", s)


def report_text(s: dict, plots: dict) -> str:
    m = s["headline"]
    b, a = s["before"]["engine"], s["after"]["engine"]
    cfg = s["config"]
    w = cfg["workload"]
    sh = s["shapley"]
    lines = [f"# Upgrade diff: {b} -> {a}", "", f"**{s['verdict']}**", ""]
    lines += [
        f"{cfg['model']} on {cfg['hardware']} (TP {cfg['parallel']['tp']}), "
        f"{s['before']['completed']:.0f} requests ({w['kind']}"
        + (f", {w['rate']:g} req/s" if w.get("rate") else "")
        + (f", concurrency {w['concurrency']}" if w.get("concurrency") else "")
        + f"), seeds {', '.join(map(str, sh['seeds']))}; every run of a seed sees the same "
        "arrivals and lengths. Metrics are means over the seeds; changes and effects are in "
        "percent of the before version's value on each seed, then averaged, ± the half-width "
        "of the 95% interval over seeds (and sampled orders).",
        "",
    ]
    for note in s["notes"]:
        lines.append(f"- {note}")
    lines += ["", "## Baseline", ""]
    base = s["baseline"]
    if base["kind"] == "simulated":
        lines.append(
            f"The baseline is {b} simulated on this workload. No recorded run was given "
            "(`upgrade.baseline=PATH`), so nothing checks that the simulated before matches "
            "the real one: the attribution explains the simulator's before and after."
        )
    else:
        worst = max((abs(v) for v in base["match_pct"].values()), default=0.0)
        rows = [
            (NAMES[k][0], fmt(k, base["measured"][k]), fmt(k, base["simulated"][k]), f"{v:+.1f}%")
            for k, v in base["match_pct"].items()
        ]
        lines.append(f"Recorded baseline: `{base['path']}` ({base['kind']}).")
        header = ("metric", "recorded", f"simulated {b} (seed {sh['seeds'][0]})", "error")
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
    lines += ["", "## What changed", ""]
    rows = []
    for k in METRICS:
        rows.append(
            (
                NAMES[k][0],
                fmt(k, s["before"][k]),
                fmt(k, s["after"][k]),
                f"{s['change_pct'][k]:+.1f}% ± {s['change_ci_pct'][k]:.1f}",
                f"{s['interaction_pct'][k]:+.1f}",
            )
        )
    lines.append(md_table(rows, ("metric", b, a, "change", "interaction (points)")))
    sb, sa = s["before"]["sim"], s["after"]["sim"]
    lines += [
        "",
        "| simulator figure | " + b + " | " + a + " |",
        "|---|---|---|",
        f"| engine steps | {sb['steps']:,.0f} | {sa['steps']:,.0f} |",
        f"| mean / p99 step | {sb['mean_step_ms']:.2f} / {sb['p99_step_ms']:.1f} ms | "
        f"{sa['mean_step_ms']:.2f} / {sa['p99_step_ms']:.1f} ms |",
        f"| mean batch / tokens per step | {sb['mean_batch_size']:.1f} / "
        f"{sb['mean_tokens_per_step']:.0f} | {sa['mean_batch_size']:.1f} / "
        f"{sa['mean_tokens_per_step']:.0f} |",
        f"| preemptions | {sb['preemptions']:,.1f} | {sa['preemptions']:,.1f} |",
        f"| KV blocks / peak use | {sb['num_kv_blocks']:,.0f} / {sb['kv_usage_peak']:.0%} | "
        f"{sa['num_kv_blocks']:,.0f} / {sa['kv_usage_peak']:.0%} |",
        f"| prefix-cache hits | {sb['prefix_cache_hit_rate']:.0%} | "
        f"{sa['prefix_cache_hit_rate']:.0%} |",
        f"| attention priced with | {sb['attention_kernel']} | {sa['attention_kernel']} |",
        "",
    ]
    lines += ["## Attribution", "", f"![waterfall]({plots['waterfall']})", ""]
    head = NAMES[m][0]
    rows = []
    for r in s["attribution"]:
        rows.append(
            (
                f"`{r['setting']}`" + (" *" if r["in_minimal_set"] else ""),
                r["category"],
                _v(r["before"]),
                _v(r["after"]),
                "inert" if r["inert"] else f"{r['effect_pct'][m]:+.1f} ± {r['ci_pct'][m]:.1f}",
                f"{r['added_pct'][m]:+.1f}",
                f"{r['removed_pct'][m]:+.1f}",
                r["rule"],
            )
        )
    lines.append(
        md_table(
            rows,
            (
                "setting",
                "category",
                b,
                a,
                f"{head}: Shapley",
                "added to before",
                "removed from after",
                "rule (after)",
            ),
        )
    )
    how = (
        "over every subset"
        if sh["exact"]
        else f"from {sh['orders_per_seed']} random orders per seed"
    )
    lines += [
        "",
        f"Shapley values {how} of the {sh['changes'] - len(sh['inert'])} changes that move "
        f"anything; they add up to the change. `added to before`: the before version with that "
        "one change; `removed from after`: the after version minus it with the sign of the "
        f"upgrade. `*`: the minimal set (delta debugging) that reproduces at least 90% of the "
        f"{head} change: {', '.join(f'`{x}`' for x in s['minimal_set']) or 'none'}. "
        f"Inert ({len(sh['inert'])}): no effect on any run either way"
        + (f" ({', '.join(f'`{x}`' for x in sh['inert'])})" if sh["inert"] else "")
        + ".",
        "",
        "By category (that category's changes alone on the before version; the interaction is "
        "what only happens when categories change together):",
        "",
    ]
    rows = [(cat, *(f"{v[k]:+.1f}" for k in METRICS)) for cat, v in s["by_category_pct"].items()]
    rows.append(("interaction", *(f"{s['interaction_pct'][k]:+.1f}" for k in METRICS)))
    rows.append(("total change", *(f"{s['change_pct'][k]:+.1f}" for k in METRICS)))
    lines.append(md_table(rows, ("category", *(NAMES[k][0] for k in METRICS))))
    kernels_inert = any(r["inert"] and r["category"] == "kernels" for r in s["attribution"])
    nearest = "nearest to" in sb["attention_kernel"] or "nearest to" in sa["attention_kernel"]
    if kernels_inert and nearest:
        lines += [
            "",
            "Note: an inert kernel setting may be one the cost model cannot tell apart: "
            f"attention is priced with {sb['attention_kernel']} before and "
            f"{sa['attention_kernel']} after (no measured table for one of them on this "
            "GPU).",
        ]
    if s["load_sweep"]:
        sweep = s["load_sweep"]
        lines += ["", "## Load", "", f"![load sweep]({plots['load']})", ""]
        where = appears_at(sweep, m)
        if sweep["swept"] == "rate":
            lines.append(
                f"{b}'s capacity on this workload (every request queued at once): "
                f"{sweep['capacity_rps']:.2f} req/s."
            )
        if where is None:
            lines.append(f"{head} gets no more than 5% worse at any load of the sweep.")
        else:
            at = (
                f"{where['rate']:.2f} req/s ({where['factor']:g} x capacity)"
                if sweep["swept"] == "rate"
                else f"concurrency {where['concurrency']} ({where['factor']:g} x)"
            )
            lines.append(f"The {head} regression appears from {at} on.")
        rows = [
            (
                (f"{p['rate']:.2f} req/s" if "rate" in p else f"{p['concurrency']} concurrent")
                + f" ({p['factor']:g}x)",
                *(f"{p['change_pct'][k]:+.1f}%" for k in METRICS),
            )
            for p in sweep["points"]
        ]
        lines += ["", md_table(rows, ("load", *(NAMES[k][0] for k in METRICS)))]
    lines += ["", "## Unexplained by configuration", ""]
    if s["unexplained_pct"] is None:
        lines.append(
            "No real results of both versions were given (`upgrade.measured_before=PATH "
            "upgrade.measured_after=PATH`, run dirs or vllm bench serve JSON), so the part of a "
            "real change that configuration does not explain cannot be computed."
        )
    else:
        meas = s["measured"]
        rows = [
            (
                NAMES[k][0],
                f"{meas['change_pct'][k]:+.1f}%",
                f"{s['change_pct'][k]:+.1f}%",
                f"{v:+.1f}",
            )
            for k, v in s["unexplained_pct"].items()
        ]
        lines.append(
            md_table(
                rows, ("metric", "measured change", "simulated change", "unexplained (points)")
            )
        )
        worst = max(s["unexplained_pct"].items(), key=lambda kv: abs(kv[1]))
        lines += ["", next_steps(worst[0], worst[1])]
    rc = s["restore_command"]
    lines += [
        "",
        "## Restoring the old behaviour on the new version",
        "",
        *(
            [
                f"{a} with the minimal set set back ({', '.join(s['minimal_set'])}):",
                "",
                "```bash",
                rc["minimal_command"],
                "```",
            ]
            if rc["minimal_command"]
            else [
                f"No engine flag sets the minimal set ({', '.join(s['minimal_set']) or 'empty'}) "
                "back; see below."
            ]
        ),
        "",
        "Every changed setting set back (those that matter first):",
        "",
        "```bash",
        rc["command"],
        "```",
    ]
    if rc["not_restorable"]:
        lines += ["", "No flag restores:", ""]
        lines += [f"- `{x['setting']}`: {x['why']}" for x in rc["not_restorable"]]
    lines += [
        "",
        "## Method",
        "",
        f"{s['simulations_run']} simulations ({sh['attribution_simulations']} for the "
        f"attribution over {len(sh['seeds'])} seeds, the rest for the load sweep; the wall "
        "time is in summary.json). Each mixture is the before version's resolved settings "
        "with some changes applied; settings the engine derives from its KV pool at start-up "
        "are re-derived for each. See docs/upgrade_diff.md.",
        "",
    ]
    return "\n".join(lines)


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
