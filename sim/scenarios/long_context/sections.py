"""scenario=long_context's report.md, the later sections: everyone else (the traffic runs) and
the architectures (the remedies: sim/scenarios/long_context/remedy_text.py; how the numbers
were computed and what they leave out: caveats.py). Every figure is read from the study the
run produced."""

from __future__ import annotations

from sim.report.escape import md_text
from sim.report.figures import md_table
from sim.scenarios.long_context.architectures import Architecture
from sim.scenarios.long_context.study import Study
from sim.scenarios.long_context.text import dur, gib, ms, pct, tok
from sim.scenarios.long_context.traffic import BudgetRun


def cotenant_section(study: Study, plots: dict) -> list[str]:
    lines = ["## 4. Everyone else", ""]
    traffic = study.traffic
    if traffic is None:
        return [*lines, "No background traffic was simulated.", ""]
    rows = []
    for r in traffic.by_budget:
        w, wo, v = r.with_long, r.without_long, r.variant
        label = f"{v.budget:,}" + (" (engine)" if r.engine_default else "")
        rows.append(
            (
                label,
                tok(v.long_prefill_token_threshold or None),
                dur(r.long_ttft_s),
                f"{ms(wo.p50_ttft_ms)} → {ms(w.p50_ttft_ms)}",
                f"{ms(wo.p99_ttft_ms)} → {ms(w.p99_ttft_ms)}",
                f"{ms(wo.p50_tpot_ms)} → {ms(w.p50_tpot_ms)}",
                f"{ms(wo.p99_tpot_ms)} → {ms(w.p99_tpot_ms)}",
                dur(r.max_step_s),
            )
        )
    lines += [
        f"Background: {md_text(traffic.background)}. Co-tenants are the requests that "
        "arrive between the "
        "long request's arrival and its last token; each cell is without → with it (the same "
        "requests, the same arrival times).",
        "",
        md_table(
            rows,
            (
                "budget",
                "long_prefill_token_threshold",
                "long TTFT",
                "p50 TTFT",
                "p99 TTFT",
                "p50 TPOT",
                "p99 TPOT",
                "longest step",
            ),
        ),
        "",
        budget_lesson(traffic.by_budget),
        "",
    ]
    for why in traffic.not_run:
        lines += [f"Not run, as the engine would refuse it at start-up: {md_text(why)}.", ""]
    if plots.get("timeline"):
        lines += [f"![Step times and co-tenant latencies]({plots['timeline']})", ""]
    return lines


def budget_lesson(rows: tuple[BudgetRun, ...]) -> str:
    """What the budget rows show, in words, from their numbers."""
    plain = [r for r in rows if not r.variant.long_prefill_token_threshold]
    small, large = plain[0], plain[-1]
    text = (
        "A fixed token budget is not a fixed time budget: a chunk of the long prompt costs "
        "its tokens' linear work plus attention over everything before it, so late chunks "
        f"stretch every step they share (the longest step: {dur(small.max_step_s)} at "
        f"{small.variant.budget:,} tokens, {dur(large.max_step_s)} at "
        f"{large.variant.budget:,}). The budget barely moves the long request's TTFT "
        f"({dur(small.long_ttft_s)} vs {dur(large.long_ttft_s)}): the attention work is the "
        "same however it is cut."
    )
    engine = next((r for r in rows if r.engine_default), None)
    capped = next((r for r in rows if r.variant.long_prefill_token_threshold), None)
    if engine is None or capped is None:
        return text
    before, after = engine.with_long, capped.with_long
    cap = f"{capped.variant.long_prefill_token_threshold:,}"
    if after.p99_ttft_ms < 0.5 * before.p99_ttft_ms:
        return text + (
            f" Capping one request's chunk at {cap} tokens (long_prefill_token_threshold) "
            f"lets new prompts in beside it: their p99 TTFT {ms(before.p99_ttft_ms)} → "
            f"{ms(after.p99_ttft_ms)}, paid for in decoding (p99 TPOT "
            f"{ms(before.p99_tpot_ms)} → {ms(after.p99_tpot_ms)}) and in the long "
            f"request's TTFT ({dur(engine.long_ttft_s)} → {dur(capped.long_ttft_s)})."
        )
    return text + (
        f" Capping one request's chunk at {cap} tokens (long_prefill_token_threshold) does "
        f"not rescue the newcomers here (p99 TTFT {ms(after.p99_ttft_ms)} against "
        f"{ms(before.p99_ttft_ms)}): beside the long chunks the GPUs have too little time "
        "left for this traffic, so its queue grows anyway."
    )


def architecture_note(r: Architecture, base: Architecture | None) -> str:
    kind = r.attention
    kv = r.kv_bytes_sequence
    ratio = ""
    if base:  # two decimals, or two significant digits below 0.1 (never "0.00×")
        times = kv / base.kv_bytes_sequence
        ratio = f"{times:.2f}×" if times >= 0.1 else f"{times:.2g}×"
        ratio += f" the KV of {base.model}"
    share = pct(r.ttft_attention_share)
    if "sparse" in kind:
        return (
            f"attention per query capped at top-k positions, but the indexer still scores "
            f"every position (n², replicated on every TP rank) and all KV plus indexer keys "
            f"stay cached ({ratio}); attention is {share} of TTFT"
        )
    if "linear" in kind:
        return (
            f"linear layers keep a fixed state; the remaining attention layers still grow: "
            f"{ratio}, attention {share} of TTFT"
        )
    if ("sliding" in kind or "chunked" in kind) and r.windows_bounded:
        return (
            f"windowed layers hold only their window (this release frees the rest); full "
            f"layers still hold everything and scan it: {ratio}, attention {share} of TTFT"
        )
    if "sliding" in kind or "chunked" in kind:
        return (
            f"windowed layers compute over their window only, but this release keeps a slot "
            f"for every token in them too: {ratio}, attention {share} of TTFT"
        )
    if "mla" in kind:
        return (
            f"a small latent per token ({ratio}) but replicated on every TP rank, and "
            f"attention compute is still n² ({share} of TTFT)"
        )
    return f"{ratio or 'the reference'}; attention {share} of TTFT"


def architecture_section(study: Study, plots: dict) -> list[str]:
    arch = study.architectures
    if not arch:
        return []
    answered = [r for r in arch if isinstance(r, Architecture)]
    base = next((r for r in answered if r.attention == "full"), None)
    rows, errors = [], []
    for r in arch:
        if not isinstance(r, Architecture):
            errors.append(f"- {md_text(r.model)}: {md_text(r.error)}")
            continue
        rows.append(
            (
                r.model,
                r.attention,
                r.tp,
                f"{r.kv_bytes_per_token:,}",
                gib(r.kv_bytes_sequence),
                gib(r.kv_bytes_sequence_per_gpu),
                "yes" if r.fits else "no",
                dur(r.ttft_s),
                ms(r.decode_ms_per_token),
                architecture_note(r, base if r is not base else None),
            )
        )
    lines = [
        "## 5. What the architecture already does",
        "",
        f"The same {study.prompt_tokens:,}-token request on the same GPUs (each model at the "
        "largest tensor parallelism it allows up to the one given), alone:",
        "",
        md_table(
            rows,
            (
                "model",
                "attention",
                "tp",
                "KV B/token",
                "KV sequence",
                "KV per GPU",
                "fits",
                "TTFT",
                "decode",
                "what it fixes, what it does not",
            ),
        ),
        "",
        "None of them touches the linear part (GEMMs grow with the prompt whatever the "
        "attention); the sparse indexer and every remaining full-attention layer still grow "
        "with the square of the prompt.",
        "",
        *errors,
    ]
    if plots.get("architectures"):
        lines += ["", f"![Architectures]({plots['architectures']})", ""]
    return lines
