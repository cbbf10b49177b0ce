"""scenario=long_context's report.md: the four breaks, one sentence each, then the evidence.

Every figure in the text is read from the study the run produced."""

from __future__ import annotations

from sim.kv.memory import GIB
from sim.report.figures import md_table
from sim.scenarios.long_context.decode import Decode
from sim.scenarios.long_context.study import Study

PARTS = ("linear", "attention", "communication", "overhead")


def gib(nbytes: float | None) -> str:
    return "-" if nbytes is None else f"{nbytes / GIB:,.1f} GiB"


def dur(seconds: float | None) -> str:
    """Seconds as a person reads them: ms below a second, then s, min, h, days."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1e3:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min ({seconds:,.0f} s)"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:,.1f} days"


def ms(value: float | None) -> str:
    """Milliseconds, as seconds from 10 s up."""
    if value is None:
        return "-"
    return f"{value:,.1f} ms" if value < 1e4 else f"{value / 1e3:,.1f} s"


def tok(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def ratio_text(value: float, of: str) -> str:
    """`value` times `of` in words, never 0× nor negative: "4.1× as long as the first",
    "62% less than the first", "about the same as the first"."""
    if value >= 1.05:
        return f"{value:.1f}× as long as {of}" if value < 10 else f"{value:,.0f}× as long as {of}"
    if value <= 0.95:
        return f"{100 * (1 - value):.0f}% less than {of}"
    return f"about the same as {of}"


def kv_phrase(study: Study) -> str:
    """What one sequence's KV is made of, so that bytes per token x tokens = the GiB stated."""
    m, n = study.memory, study.prompt_tokens
    kinds = m.kv_bytes_per_token_by_kind
    windowed = {k: v for k, v in kinds.items() if k in m.windows and v}
    bounded = bool(windowed) and m.windows_bounded
    grow = m.kv_bytes_per_token - (sum(windowed.values()) if bounded else 0)
    held = sum(v * min(n, m.windows[k]) for k, v in windowed.items()) if bounded else 0
    state = m.kv_bytes_sequence - n * grow - held
    if bounded:
        parts = [f"{grow:,} bytes per token in the layers that keep every token"] + [
            f"{v:,} in its {k} layers for their last {min(n, m.windows[k]):,} only"
            for k, v in windowed.items()
        ]
        text = ", ".join(parts) + ": this release frees what slides out of a window"
    else:
        text = f"{m.kv_bytes_per_token:,} bytes per token at the model's dtype"
        if windowed:
            text += ", windowed layers included: this release keeps every token in them"
    if state > 0:
        size = gib(state) if state >= GIB else f"{state / 2**20:,.1f} MiB"
        text += f", plus {size} of linear-attention state"
    return text


# ---- the four breaks -----------------------------------------------------------------------
def memory_sentence(study: Study) -> str:
    m = study.memory
    n, gpus = study.prompt_tokens, f"{study.hardware} at {m.given_parallel}"
    head = (
        f"One {n:,}-token sequence holds {gib(m.kv_bytes_sequence)} of KV cache "
        f"({kv_phrase(study)}); on {gpus} that is "
        f"{gib(m.kv_bytes_sequence_per_gpu)} per GPU beside {gib(m.weights_bytes_per_gpu)} "
        f"of weights, "
    )
    fp8 = fp8_phrase(study)
    if m.fits:
        return head + (
            f"within the {gib(m.kv_pool_bytes_per_gpu)} the engine's memory plan leaves for "
            f"KV: it fits, up to {tok(m.max_context_tokens)} tokens ({fp8})."
        )
    where = (
        f"The smallest configuration that holds it is {m.min_fit_parallel} "
        f"({m.min_gpus_to_fit} GPUs), where the rest of this report is simulated."
        if m.min_gpus_to_fit
        else "No configuration up to 8-way tensor parallelism (with pipeline stages) holds it; "
        "the times below are what it would take were memory no object."
    )
    pool = m.kv_pool_bytes_per_gpu
    if pool:
        short = (
            f"more than the {gib(pool)} the memory plan leaves: it does not fit (the longest "
            f"that fits is {tok(m.max_context_tokens)} tokens; {fp8})"
        )
    else:
        short = f"and the weights alone do not fit ({m.why_not})"
    return head + f"{short}. {where}"


def fp8_phrase(study: Study) -> str:
    """The longest context with FP8 KV against the model's dtype, or the real reason for none:
    the engine refuses FP8 KV here, or its memory plan with it leaves no room."""
    m = study.memory
    longest, fp8 = m.max_context_tokens, m.max_context_tokens_fp8_kv
    if fp8:
        times = f", {fp8 / longest:.1f}× as many" if longest else ""
        return f"{tok(fp8)} with FP8 KV{times}"
    if m.fp8_kv_refused:
        return (
            f"none with FP8 KV, which {study.engine} refuses here: section 1 of report.md says why"
        )
    if not m.kv_pool_bytes_per_gpu_fp8_kv:
        return (
            "none with FP8 KV: with it the memory plan leaves no room for the KV cache, "
            "section 1 of report.md says why"
        )
    return f"none with FP8 KV: {m.why_not_fp8_kv}"


def ttft_sentence(study: Study) -> str:
    b, total = study.prefill.breakdown(), study.ttft_s
    verb = "comes" if study.simulated else "would come"
    return (
        f"Alone, its first token {verb} after {dur(total)}; {pct(b['attention'] / total)} of "
        f"it, {dur(b['attention'])}, is attention, which grows with the square of the "
        f"prompt, against {dur(b['linear'])} for the linear layers, which grow with its length "
        f"(communication {dur(b['communication'])}, overhead {dur(b['overhead'])}); attention "
        f"FLOPs overtake the linear layers' from {tok(study.flops_crossover_tokens)} tokens."
    )


def decode_sentence(study: Study) -> str:
    d = study.decode
    bound = "the KV cache" if d.kv_ms > d.weights_ms else "the weights"
    kv = f"the sequence's {gib(d.kv_bytes_per_gpu)} of KV per GPU"
    if study.memory.windows:
        kv = f"{gib(d.kv_bytes_per_gpu)} of its KV per GPU (windowed layers read their window)"
    return (
        f"Each further token then takes {ms(study.decode_ms_per_token)}: "
        f"{pct(d.kv_ms / d.total_ms)} of a step reads {kv} and {pct(d.weights_ms / d.total_ms)} "
        f"reads {weights_phrase(d)}: decode at this context is bound by {bound}."
    )


def weights_phrase(d: Decode) -> str:
    """The weights one decode step reads: all of them for a dense model; for a mixture of
    experts, the dense part and the experts its one token routes to."""
    if not d.num_experts:
        return f"{gib(d.weights_bytes_per_gpu)} of weights"
    return (
        f"{gib(d.weights_bytes_per_gpu)} of the {gib(d.weights_resident_bytes_per_gpu)} of "
        f"weights per GPU (its token's {d.experts_read_per_layer:g} of {d.num_experts} routed "
        "experts in each MoE layer, beside the dense layers)"
    )


def chunk_sentence(study: Study) -> str:
    """The prefill's chunks, first against last: what each reads, and the time ratio."""
    p, windows = study.prefill, study.memory.windows
    reads = "attention reads the whole prefix"
    if windows:
        only = ", ".join(
            f"its {k} layers only their {w:,}-token window" for k, w in windows.items()
        )
        reads = f"full-attention layers read the whole prefix ({only})"
    last_tokens = p.num_tokens - (p.num_chunks - 1) * p.budget
    if p.num_chunks < 2:
        return f"It prefills in one step of {p.num_tokens:,} tokens ({dur(p.last_chunk_s)}). "
    same = " for the same token budget" if last_tokens == p.budget else ""
    last = "the last chunk" + (f" ({last_tokens:,} tokens)" if not same else "")
    if p.first_chunk_s > 0 and p.last_chunk_s > 0:
        versus = ratio_text(p.last_chunk_s / p.first_chunk_s, "the first") + same
    else:
        versus = "no ratio: a chunk took no time"
    return (
        f"While it prefills, every step carries a {p.budget:,}-token chunk of it whose {reads}: "
        f"{last} takes {dur(p.last_chunk_s)} against {dur(p.first_chunk_s)} for the first, "
        f"{versus}. "
    )


def cotenant_sentence(study: Study) -> str:
    chunk = chunk_sentence(study)
    if not study.simulated:
        return chunk + "Nothing was simulated around it: no configuration holds it."
    if study.traffic is None:
        return chunk + "No traffic was simulated around it (long_context.background=false)."
    own = study.traffic.engine_run
    w, wo = own.with_long, own.without_long
    text = chunk + (
        f"The {w.num_requests:,} requests that arrive meanwhile see p99 TPOT "
        f"{ms(wo.p99_tpot_ms)} → {ms(w.p99_tpot_ms)} and p99 TTFT "
        f"{ms(wo.p99_ttft_ms)} → {ms(w.p99_ttft_ms)}"
    )
    if w.p99_ttft_ms > 10 * max(wo.p99_ttft_ms, 1e-9):
        text += (
            ": new prompts wait for the whole long prefill, which takes the step's entire "
            "token budget"
        )
    return text + "."


# ---- the report ----------------------------------------------------------------------------
def memory_section(study: Study) -> list[str]:
    m = study.memory
    kinds = ", ".join(f"{k} {v:,} B" for k, v in m.kv_bytes_per_token_by_kind.items())
    rows = [
        ("KV per token (all layers)", f"{m.kv_bytes_per_token:,} B ({kinds})"),
        ("KV per token, FP8 KV", f"{m.kv_bytes_per_token_fp8:,} B"),
        ("KV of the sequence", gib(m.kv_bytes_sequence)),
        ("KV of the sequence, FP8 KV", gib(m.kv_bytes_sequence_fp8)),
        ("KV per GPU (prompt + output)", gib(m.kv_bytes_sequence_per_gpu)),
        ("weights per GPU", gib(m.weights_bytes_per_gpu)),
        ("activations of a prefill chunk (profile run)", gib(m.activation_bytes_per_gpu)),
        ("KV pool the memory plan leaves per GPU", gib(m.kv_pool_bytes_per_gpu)),
        (
            "... with FP8 KV",
            gib(m.kv_pool_bytes_per_gpu_fp8_kv) if not m.fp8_kv_refused else "- (refused)",
        ),
        ("fits", "yes" if m.fits else "no"),
        ("fits with FP8 KV", "yes" if m.fits_fp8_kv else "no"),
        ("longest context that fits (max_context_tokens)", tok(m.max_context_tokens)),
        ("... with FP8 KV", tok(m.max_context_tokens_fp8_kv)),
        ("smallest configuration that fits", m.min_fit_parallel or "none"),
    ]
    if m.windows:
        held = "their window only" if m.windows_bounded else "every token (full length)"
        rows.insert(1, ("windowed layers hold", f"{held}: {m.window_rule}"))
    if m.why_not_fp8_kv:
        rows.append(("why not with FP8 KV", m.why_not_fp8_kv))
    return ["## 1. Memory", "", md_table(rows, ("", "")), ""]


def prefill_section(study: Study, plots: dict) -> list[str]:
    p, total = study.prefill, study.ttft_s
    b = p.breakdown()
    rows = [(part, dur(b[part]), pct(b[part] / total)) for part in PARTS]
    lines = [
        "## 2. Prefill = time to first token",
        "",
        f"Simulated at {study.at.parallel} with chunked prefill: {p.num_chunks} chunks "
        f"of {p.budget:,} tokens; the engine's TTFT for the request alone is "
        f"{dur(total)} (the chunk-by-chunk walk below sums to {dur(p.total_s)}).",
        "",
        md_table(rows, ("part", "seconds", "share")),
        "",
        f"Attention FLOPs equal the linear layers' at {tok(study.flops_crossover_tokens)} "
        f"tokens; in time (measured kernel efficiencies) attention leads from "
        f"{tok(study.time_crossover_tokens)} tokens.",
        "",
    ]
    if plots.get("scaling"):
        lines += [f"![TTFT by part and prompt length]({plots['scaling']})", ""]
    return lines


def decode_section(study: Study) -> list[str]:
    d = study.decode
    rows = [
        (
            "weights read (GEMMs, the routed experts its token picks, LM head)"
            if d.num_experts
            else "weights read (GEMMs, LM head)",
            ms(d.weights_ms),
            gib(d.weights_bytes_per_gpu),
        ),
        ("KV read (attention)", ms(d.kv_ms), gib(d.kv_bytes_per_gpu)),
        ("all-reduce, norms, launches, CPU", ms(d.other_ms), ""),
        ("one step alone", ms(d.total_ms), ""),
    ]
    lines = [
        "## 3. Decode",
        "",
        f"One decode step of the request alone at {d.context:,} tokens of context; the "
        f"engine's TPOT over its {study.output_tokens} tokens: {ms(study.decode_ms_per_token)}.",
        "",
        md_table(rows, ("part", "time", "bytes per GPU")),
        "",
    ]
    if d.num_experts:
        lines += [
            f"Of the {gib(d.weights_resident_bytes_per_gpu)} of weights each GPU holds, one "
            f"step of one sequence reads {gib(d.weights_bytes_per_gpu)}: every dense layer, "
            f"the shared experts and the router, the {d.experts_read_per_layer:g} of "
            f"{d.num_experts} routed experts its token goes to in each MoE layer, and the LM "
            "head (the embedding table is looked up, not read).",
            "",
        ]
    return lines
