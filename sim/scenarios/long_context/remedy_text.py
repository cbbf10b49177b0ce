"""scenario=long_context's report.md, section 6: the remedies, each priced with the same cost
model (sim/scenarios/long_context/remedies.py). Every figure is read from the study the run
produced."""

from __future__ import annotations

from sim.report.escape import md_text
from sim.report.figures import md_table
from sim.scenarios.long_context.remedies import BudgetChoice, Disaggregated, Fp8Kv
from sim.scenarios.long_context.sparse_prefill import SPARSE_FROM_TOKENS, SparsePrefill
from sim.scenarios.long_context.study import Study
from sim.scenarios.long_context.text import dur, gib, ms, tok


def remedy_section(study: Study) -> list[str]:
    r = study.remedies
    tp_rows = [
        (
            x.tp,
            "yes" if x.fits else "no",
            gib(x.kv_bytes_sequence_per_gpu),
            tok(x.max_context_tokens),
            dur(x.ttft_s),
            ms(x.decode_ms_per_token),
        )
        for x in r.tensor_parallel
    ]
    cp_rows = [
        (
            x.cp,
            x.gpus,
            x.link,
            "yes" if x.fits else "no",
            dur(x.ttft_s),
            dur(x.ring_exposed_s),
            gib(x.kv_bytes_sequence_per_gpu),
            ms(x.decode_ms_per_token),
        )
        for x in r.prefill_context_parallel
    ]
    f, d = r.fp8_kv, r.disaggregated
    lines = [
        "## 6. Remedies",
        "",
        "**More GPUs (tensor parallelism)** splits the weights, the KV heads and the work:",
        "",
        md_table(tp_rows, ("tp", "fits", "KV per GPU", "longest", "TTFT", "decode")),
        "",
        "**Prefill context parallelism** (ring attention: vLLM --prefill-context-parallel-size)"
        " gives each group of GPUs 1/cp of the tokens; each layer's KV shard travels the ring "
        "behind that layer's attention:",
        "",
        md_table(
            cp_rows,
            ("cp", "GPUs", "ring link", "fits", "TTFT", "ring exposed", "KV per GPU", "decode"),
        ),
        "",
    ]
    if r.decode_context_parallel:
        x = r.decode_context_parallel
        lines += [
            f"**Decode context parallelism** (vLLM --decode-context-parallel-size {x.dcp}, "
            f"SGLang --dcp-size): {md_text(x.why)}; sharding them instead leaves "
            f"{gib(x.kv_bytes_sequence_per_gpu)} per GPU (fits: "
            f"{'yes' if x.fits else 'no'}; longest {tok(x.max_context_tokens)}), decode "
            f"{ms(x.decode_ms_per_token)}, on the same GPUs.",
            "",
        ]
    lines += [
        fp8_paragraph(f),
        "",
        sparse_paragraph(r.sparse_prefill, study.prompt_tokens),
        "",
    ]
    if r.prefill_budget:
        tpot = min(r.prefill_budget, key=lambda x: x.cotenant_p99_tpot_ms or 0)
        ttft = min(r.prefill_budget, key=lambda x: x.cotenant_p99_ttft_ms or 0)
        worst = max(x.cotenant_p99_ttft_ms or 0 for x in r.prefill_budget)
        text = (
            f"**The prefill budget** (section 4): the co-tenants' p99 TPOT is lowest at "
            f"{budget_label(tpot)} ({ms(tpot.cotenant_p99_tpot_ms)}, long TTFT "
            f"{dur(tpot.long_ttft_s)}); "
        )
        if ttft.cotenant_p99_ttft_ms > 0.8 * worst:
            text += (
                f"their p99 TTFT stays near {ms(worst)} whatever the setting. No budget "
                "removes the stall: only more GPUs, or a prefill instance of the long "
                "request's own."
            )
        else:
            text += (
                f"their p99 TTFT at {budget_label(ttft)} ({ms(ttft.cotenant_p99_ttft_ms)},"
                f" long TTFT {dur(ttft.long_ttft_s)}). No setting protects both: the long "
                "prefill's work has to share the GPUs with someone."
            )
        lines += [text, ""]
    return [*lines, disagg_paragraph(d), ""]


def disagg_paragraph(d: Disaggregated) -> str:
    if not d.supported:
        return f"**A separate prefill pool**: {d.how}."
    gpus = f"{d.prefill_gpus} GPU" + ("s" if d.prefill_gpus > 1 else "")
    cotenants = (
        f" (p99 TPOT about {ms(d.cotenant_p99_tpot_ms)})"
        if d.cotenant_p99_tpot_ms is not None
        else ""
    )
    return (
        f"**A separate prefill pool** ({d.how}): the long prefill runs on its own {gpus}, then "
        f"each GPU's KV shard crosses the network in {dur(d.kv_transfer_s)} "
        f"({dur(d.kv_transfer_layerwise_exposed_s)} exposed where it is sent layer by layer): "
        f"TTFT {dur(d.ttft_s)}; the co-tenants decode in their own pool, beside only the long "
        f"request's decode{cotenants}; their prompts still need a prefill instance the long one "
        "does not hold (a pool of two or more)."
    )


def fp8_paragraph(f: Fp8Kv) -> str:
    head = "**FP8 KV** (kv_cache_dtype=fp8)"
    if f.ttft_s is None:
        return f"{head}: the engine refuses it here. {md_text(f.why_not)}."
    text = (
        f"{head}: {gib(f.kv_bytes_sequence_per_gpu)} per GPU, longest context "
        f"{tok(f.max_context_tokens)}; TTFT {dur(f.ttft_s)}, decode "
        f"{ms(f.decode_ms_per_token)} (priced with this GPU's fp8 attention kernels)"
    )
    return text + (f"; it holds none: {md_text(f.why_not)}." if f.why_not else ".")


def sparse_paragraph(x: SparsePrefill, n: int) -> str:
    """The sparse prefill remedy: where its density comes from, TTFT dense against sparse."""
    head = (
        "**Sparse prefill** (MInference-style vertical + slash patterns, which Qwen2.5-1M's "
        "recommended vLLM deployment runs with Dual Chunk Attention)"
    )
    if not x.full_layers:
        return head + ": no full-attention layer to make sparse here (the patterns are GQA / MHA "
        "attention's); TTFT unchanged."
    if x.density_from == "pattern":
        if x.density >= 1.0:
            return head + (
                f": a {n:,}-token prompt is prefilled dense (sparse only beyond "
                f"{SPARSE_FROM_TOKENS:,} tokens, vLLM's dual-chunk default); TTFT unchanged."
            )
        why = (
            f"{x.pattern}: {x.keys_per_query:,.0f} keys per query on average, "
            f"{pct_fine(x.density)} of a {n:,}-token prompt's causal pairs"
        )
    else:
        why = f"a density of {pct_fine(x.density)} set by long_context.sparse_prefill_density"
    layers = f"{x.full_layers} full-attention layers" + (
        f" of {x.layers}" if x.full_layers < x.layers else ""
    )
    return head + (
        f": {why}. On its {layers}, attention {dur(x.attention_dense_s)} → "
        f"{dur(x.attention_sparse_s)}, TTFT {dur(x.ttft_dense_s)} → {dur(x.ttft_sparse_s)} "
        f"alone; the linear layers ({dur(x.linear_s)}) and decode are unchanged. The sparse "
        "figure is a floor: what it leaves out is listed at the end."
    )


def pct_fine(x: float) -> str:
    """A share with the digits a small one needs: 2.3%, 0.51%."""
    return f"{100 * x:.2g}%" if x < 0.1 else f"{100 * x:.0f}%"


def budget_label(row: BudgetChoice) -> str:
    cap = row.long_prefill_token_threshold
    return f"a budget of {row.budget:,}" + (f" with a {cap:,}-token cap per request" if cap else "")
