"""scenario=long_context's report.md: the four breaks, one sentence each, then the evidence.

Every figure in the text is read from the summary the run produced."""

from __future__ import annotations

from sim.kv.memory import GIB
from sim.report.figures import md_table

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


# ---- the four breaks -----------------------------------------------------------------------
def memory_sentence(s: dict) -> str:
    n, gpus = s["prompt_tokens"], f"{s['hardware']} at {s['given_parallel']}"
    head = (
        f"One {n:,}-token sequence holds {gib(s['kv_bytes_sequence'])} of KV cache "
        f"({s['kv_bytes_per_token']:,} bytes per token at the model's dtype); on {gpus} that is "
        f"{gib(s['kv_bytes_sequence_per_gpu'])} per GPU beside {gib(s['weights_bytes_per_gpu'])} "
        f"of weights, "
    )
    if s["fits"]:
        return head + (
            f"within the {gib(s['kv_pool_bytes_per_gpu'])} the engine's memory plan leaves for "
            f"KV: it fits, up to {tok(s['max_context_tokens'])} tokens "
            f"({tok(s['max_context_tokens_fp8_kv'])} with FP8 KV)."
        )
    where = (
        f"The smallest configuration that holds it is {s['min_fit_parallel']} "
        f"({s['min_gpus_to_fit']} GPUs), where the rest of this report is simulated."
        if s["min_gpus_to_fit"]
        else "No configuration up to 8-way tensor parallelism (with pipeline stages) holds it; "
        "the times below are what it would take were memory no object."
    )
    pool = s["kv_pool_bytes_per_gpu"]
    if pool:
        short = (
            f"more than the {gib(pool)} the memory plan leaves: it does not fit (the longest "
            f"that fits is {tok(s['max_context_tokens'])} tokens)"
        )
    else:
        short = f"and the weights alone do not fit ({s['why_not']})"
    return head + f"{short}. {where}"


def ttft_sentence(s: dict) -> str:
    b, total = s["ttft_breakdown_s"], s["ttft_s"]
    verb = "comes" if s["simulated"] else "would come"
    return (
        f"Alone, its first token {verb} after {dur(total)}; {pct(b['attention'] / total)} of "
        f"it, {dur(b['attention'])}, is attention, which grows with the square of the "
        f"prompt, against {dur(b['linear'])} for the linear layers, which grow with its length "
        f"(communication {dur(b['communication'])}, overhead {dur(b['overhead'])}); attention "
        f"FLOPs overtake the linear layers' from {tok(s['flops_crossover_tokens'])} tokens."
    )


def decode_sentence(s: dict) -> str:
    d = s["decode"]
    bound = "the KV cache" if d["kv_ms"] > d["weights_ms"] else "the weights"
    return (
        f"Each further token then takes {ms(s['decode_ms_per_token'])}: "
        f"{pct(d['kv_ms'] / d['total_ms'])} of a step reads the sequence's "
        f"{gib(d['kv_bytes_per_gpu'])} of KV per GPU and {pct(d['weights_ms'] / d['total_ms'])} "
        f"reads {gib(d['weights_bytes_per_gpu'])} of weights: decode at this context is bound "
        f"by {bound}."
    )


def cotenant_sentence(s: dict) -> str:
    p = s["prefill"]
    ratio = p["last_chunk_s"] / p["first_chunk_s"]
    chunk = (
        f"While it prefills, every step carries a {p['chunk_tokens']:,}-token chunk of it whose "
        f"attention reads the whole prefix: the last chunk takes {dur(p['last_chunk_s'])} "
        f"against {dur(p['first_chunk_s'])} for the first, {ratio:.0f}× for the same token "
        f"budget. "
    )
    if not s["simulated"]:
        return chunk + "Nothing was simulated around it: no configuration holds it."
    if "cotenant" not in s:
        return chunk + "No traffic was simulated around it (long_context.background=false)."
    w, wo = s["cotenant"]["with"], s["cotenant"]["without"]
    text = chunk + (
        f"The {w['num_requests']:,} requests that arrive meanwhile see p99 TPOT "
        f"{ms(wo['p99_tpot_ms'])} → {ms(w['p99_tpot_ms'])} and p99 TTFT "
        f"{ms(wo['p99_ttft_ms'])} → {ms(w['p99_ttft_ms'])}"
    )
    if w["p99_ttft_ms"] > 10 * max(wo["p99_ttft_ms"], 1e-9):
        text += (
            ": new prompts wait for the whole long prefill, which takes the step's entire "
            "token budget"
        )
    return text + "."


# ---- the report ----------------------------------------------------------------------------
def memory_section(s: dict) -> list[str]:
    kinds = ", ".join(f"{k} {v:,} B" for k, v in s["kv_bytes_per_token_by_kind"].items())
    rows = [
        ("KV per token (all layers)", f"{s['kv_bytes_per_token']:,} B ({kinds})"),
        ("KV per token, FP8 KV", f"{s['kv_bytes_per_token_fp8']:,} B"),
        ("KV of the sequence", gib(s["kv_bytes_sequence"])),
        ("KV of the sequence, FP8 KV", gib(s["kv_bytes_sequence_fp8"])),
        ("KV per GPU (prompt + output)", gib(s["kv_bytes_sequence_per_gpu"])),
        ("weights per GPU", gib(s["weights_bytes_per_gpu"])),
        ("activations of a prefill chunk (profile run)", gib(s["activation_bytes_per_gpu"])),
        ("KV pool the memory plan leaves per GPU", gib(s["kv_pool_bytes_per_gpu"])),
        ("fits", "yes" if s["fits"] else "no"),
        ("fits with FP8 KV", "yes" if s["fits_fp8_kv"] else "no"),
        ("longest context that fits (max_context_tokens)", tok(s["max_context_tokens"])),
        ("... with FP8 KV", tok(s["max_context_tokens_fp8_kv"])),
        ("smallest configuration that fits", s["min_fit_parallel"] or "none"),
    ]
    return ["## 1. Memory", "", md_table(rows, ("", "")), ""]


def prefill_section(s: dict, plots: dict) -> list[str]:
    b, total, p = s["ttft_breakdown_s"], s["ttft_s"], s["prefill"]
    rows = [(part, dur(b[part]), pct(b[part] / total)) for part in PARTS]
    lines = [
        "## 2. Prefill = time to first token",
        "",
        f"Simulated at {s['simulated_parallel']} with chunked prefill: {p['num_chunks']} chunks "
        f"of {p['chunk_tokens']:,} tokens; the engine's TTFT for the request alone is "
        f"{dur(total)} (the chunk-by-chunk walk below sums to {dur(p['walk_ttft_s'])}).",
        "",
        md_table(rows, ("part", "seconds", "share")),
        "",
        f"Attention FLOPs equal the linear layers' at {tok(s['flops_crossover_tokens'])} "
        f"tokens; in time (measured kernel efficiencies) attention leads from "
        f"{tok(s['time_crossover_tokens'])} tokens.",
        "",
    ]
    if plots.get("scaling"):
        lines += [f"![TTFT by part and prompt length]({plots['scaling']})", ""]
    return lines


def decode_section(s: dict) -> list[str]:
    d = s["decode"]
    rows = [
        (
            "weights read (GEMMs, experts, LM head)",
            ms(d["weights_ms"]),
            gib(d["weights_bytes_per_gpu"]),
        ),
        ("KV read (attention)", ms(d["kv_ms"]), gib(d["kv_bytes_per_gpu"])),
        ("all-reduce, norms, launches, CPU", ms(d["other_ms"]), ""),
        ("one step alone", ms(d["total_ms"]), ""),
    ]
    return [
        "## 3. Decode",
        "",
        f"One decode step of the request alone at {d['context']:,} tokens of context; the "
        f"engine's TPOT over its {s['output_tokens']} tokens: {ms(s['decode_ms_per_token'])}.",
        "",
        md_table(rows, ("part", "time", "bytes per GPU")),
        "",
    ]
