"""scenario=long_context's report.md, its last two sections: how the numbers were computed, and
what they leave out, one sentence per feature not modelled that bears on this study, each
saying which way it leans the answer (optimistic: times too short or contexts too long;
pessimistic: the reverse)."""

from __future__ import annotations

from sim.report.escape import md_text
from sim.scenarios.long_context.architectures import Architecture
from sim.scenarios.long_context.sparse_prefill import SEARCH_QUERIES, dual_chunk_config
from sim.scenarios.long_context.study import Study

PRIORED = ("mla", "linear")  # attention kinds priced by the roofline prior (and the indexer,
# which comes with MLA)


def how_section(study: Study) -> list[str]:
    return [
        "## How these numbers were computed",
        "",
        "- The long request is simulated through the engine (its scheduler, block pool and "
        "step cost model) alone, and among the workload's traffic for each budget; the TTFT "
        "split and the lengths from 4K up walk the same step cost chunk by chunk.",
        "- Times are priced per kernel from this GPU's calibrated profile where measured "
        "tables exist (GEMM, FlashAttention); MLA, the sparse indexer and linear attention "
        "use the roofline prior (no measured tables yet).",
        "- Windowed (sliding-window, chunked-local) layers are sized as the simulated "
        "release's allocator sizes them (sim/engines/windows.py): a slot per token before vLLM's "
        "hybrid KV cache manager, only the window after it, the same in the memory plan, "
        "the longest context and the run's blocks per request. Context parallelism, sparse "
        "prefill and the separate prefill pool are priced from the same components (not "
        "simulated step by step).",
        f"- Wall time of this scenario: {study.wall_time_s:.1f} s.",
        "",
    ]


def unmodelled(study: Study) -> list[str]:
    """One sentence per feature this study's answer depends on and the simulator leaves out,
    with the way it leans."""
    r, m = study.remedies, study.memory
    sp = r.sparse_prefill
    out = []
    if sp.full_layers and sp.density < 1.0:
        out += [
            "Sparse prefill's tiles: the kernel computes whole 64 x 64 blocks around the "
            "pattern's keys, more than the keys themselves where its diagonals lie apart; "
            "priced at the keys alone, its TTFT is optimistic.",
            f"Sparse prefill's pattern search: each chunk's last {SEARCH_QUERIES} queries are "
            f"scored against every earlier key (fp32 scores, summed by column and diagonal) "
            f"before the sparse kernel runs, {sp.search_flops_share:.0%} more attention FLOPs "
            "than the pattern keeps at this length, not priced: optimistic.",
            "Sparse prefill's kernel: priced with this GPU's dense FlashAttention efficiency at "
            "the same keys per query, where a sparse kernel gathers its keys: optimistic.",
            "Sparse prefill's answers: what dropping the other keys does to the output is not "
            "something a simulator can say.",
        ]
    dca = dual_chunk_config(study.model) if sp.dual_chunk else None
    if dca:
        span = dca.get("chunk_size", 0) - dca.get("local_size", 0)
        out.append(
            f"Dual Chunk Attention's position remapping ({md_text(study.model)}'s config: "
            "chunks of "
            f"{dca.get('chunk_size', 0):,} tokens, {dca.get('local_size', 0):,} local): the "
            f"engine attends in three passes (within a {span:,}-token chunk, to the chunk "
            "before, to all earlier ones), each with its own rotated queries, and merges them; "
            "priced as one pass over the same pairs: TTFT slightly optimistic."
        )
    out.append(
        "Prefill context parallelism: priced from the walk's parts, with the causal work "
        "split evenly over the ranks and each ring hop hidden behind attention wherever it is "
        "shorter, without the ring's own launches and synchronisation: optimistic."
    )
    if r.decode_context_parallel is not None:
        out.append(
            "Decode context parallelism: the exchange of each rank's partial attention "
            "(outputs and softmax statistics) every layer is not priced: optimistic."
        )
    if r.disaggregated.supported:
        out.append(
            "The separate prefill pool: the KV crosses at the NIC's full bandwidth, sharing it "
            "with nothing, and the decode pool admits it at once: optimistic."
        )
    if m.windows and m.windows_bounded:
        out.append(
            "Windowed layers holding their window: the engine also keeps the chunk being "
            "computed (up to one token budget more), not counted: the longest context is "
            "slightly optimistic."
        )
    kinds = {study.model: " ".join(m.kv_bytes_per_token_by_kind)} | {
        a.model: a.attention for a in study.architectures if isinstance(a, Architecture)
    }
    priored = [name for name, k in kinds.items() if any(p in k for p in PRIORED)]
    if priored:
        out.append(
            f"MLA, the sparse indexer and linear attention ({md_text(', '.join(priored))}): "
            "priced by "
            "the roofline prior, without measured kernel tables: it may lean either way."
        )
    if study.prompt_tokens + study.output_tokens > study.trained_context_tokens:
        out.append(
            f"Beyond {study.trained_context_tokens:,} positions, {md_text(study.model)}'s "
            "answers: RoPE "
            "scaling changes no work, so the times stand, but what the model's output is worth "
            "is not something a simulator can say."
        )
    out.append(
        "FP8 KV's answers: its memory and time are priced, what quantising the cache does to "
        "the output is not."
    )
    return ["## What is not modelled, and which way it leans", "", *(f"- {x}" for x in out), ""]
