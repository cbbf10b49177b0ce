"""scenario=long_context's sparse prefill remedy: MInference-style vertical + slash patterns,
which Qwen2.5-1M's recommended deployment runs in vLLM with Dual Chunk Attention, and which is
what people reach for at a million tokens.

Each attention head keeps, per query, its `vertical` columns (keys every query attends to)
and its `slash` diagonals (keys at fixed distances): at most v + s keys, whatever the context,
picked from a dense pass of the chunk's last queries. Only full-attention layers are
sparsified; the GEMMs, windowed layers and decode are unchanged. The pricing is the cost
model's own (AttentionShape.density, sim/cost/roofline.py's `sparse`):

    a query at position i attends  min(i, v + s)  keys instead of  i
    density  = (kept pairs - n) / (causal pairs - n)  over a prompt of n tokens, each query's
               own key always kept, averaged over every head of the pattern (the heads of a
               layer run side by side, and every full layer has the same shape)

so the walk's attention FLOPs and KV read sum to the pattern's. The pattern's budgets:

    a model with a searched pattern  each head's v + s from MInference's pattern file for it
                                     (PATTERNS: their sums, heads counted by budget)
    any other                        MInference's default, 1,000 + 6,096 keys for every head
    long_context.sparse_prefill_density  a density stated directly, instead of either

Prompts up to SPARSE_FROM_TOKENS are prefilled dense (vLLM's dual-chunk backend's default
sparse_attention_threshold). What this leaves out (the tiles the kernel computes, the pattern
search, the kernel's own efficiency) is said by sim/scenarios/long_context/caveats.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sim.paths import MODEL_CATALOG_DIR
from sim.scenarios.long_context.arithmetic import Fit, Prefill, walk_prefill
from sim.scenarios.long_context.runs import Context
from sim.specs.model import Attention

SPARSE_FROM_TOKENS = 32_768  # vLLM DualChunkFlashAttentionImpl: sparse_attention_threshold
SEARCH_QUERIES = 64  # the last queries of a chunk scored densely to pick the pattern
# (sparse_attention_last_q in vLLM's dual-chunk backend, last_q in MInference)
MINFERENCE = "MInference (github.com/microsoft/MInference, commit fb56c91)"


@dataclass(frozen=True, slots=True)
class Pattern:
    """A vertical + slash pattern's budgets: (v + s keys per query, heads with that budget)
    over every layer and head of the model; `source`: where they were read."""

    source: str
    budgets: tuple[tuple[int, int], ...]

    @property
    def heads(self) -> int:
        return sum(count for _, count in self.budgets)

    @property
    def keys_per_query(self) -> float:
        """The mean budget over the heads."""
        return sum(keys * count for keys, count in self.budgets) / self.heads

    def kept_pairs(self, n: int) -> float:
        """Query-key pairs a prompt of n tokens keeps, averaged over the heads: a query at
        position i keeps min(i, budget) keys."""
        kept = 0
        for keys, count in self.budgets:
            b = min(keys, n)
            kept += count * (b * (b + 1) // 2 + (n - b) * b)
        return kept / self.heads


def _searched(file: str, searched_on: str, budgets) -> Pattern:
    return Pattern(
        f"{MINFERENCE}'s searched pattern for {searched_on} (minference/configs/{file}: each "
        "head's vertical + slash keys)",
        budgets,
    )


PATTERNS = {  # catalogue model -> its searched pattern (v + s per head, heads counted)
    "qwen2.5-7b-instruct-1m": _searched(
        "Qwen2.5_7B_Instruct_1M.json", "Qwen2.5-7B-Instruct-1M",
        ((830, 72), (900, 19), (1200, 17), (3600, 7), (7096, 321), (7696, 6), (9022, 1),
         (9092, 10), (9392, 2), (11192, 68), (11792, 14), (13218, 7), (13288, 7), (15288, 39),
         (15988, 9), (17284, 1), (17384, 1), (19384, 2), (19484, 49), (19984, 3), (21410, 5),
         (21480, 3), (21780, 1), (23480, 30), (23580, 5), (24180, 4), (27676, 48),
         (28176, 1), (28276, 1), (31772, 16), (32372, 2), (35868, 9), (40564, 1),
         (44060, 3)),
    ),
    "qwen2.5-14b-instruct-1m": _searched(
        "Qwen2.5_14B_Instruct_1M.json", "Qwen2.5-14B-Instruct-1M",
        ((830, 128), (900, 34), (1200, 73), (3600, 145), (4996, 3), (7096, 1002), (7696, 19),
         (9022, 1), (9092, 2), (11192, 264), (11792, 11), (15288, 113), (17284, 2),
         (19984, 7), (23480, 65), (28088, 5), (31584, 46)),
    ),
    "llama-3.1-8b": _searched(
        "Llama_3.1_8B_Instruct_128k_kv_out_v32_fit_o_best_pattern_v2.json",
        "Llama-3.1-8B-Instruct, the same architecture", ((2560, 1024),),
    ),
    "llama-3.1-70b": _searched(
        "Llama_3.1_70B_Instruct_128k_kv_out_v32_fit_o_best_pattern_v2.json",
        "Llama-3.1-70B-Instruct, the same architecture",
        ((830, 777), (850, 116), (900, 380), (1200, 698), (3600, 2331), (7096, 818)),
    ),
}  # fmt: skip
DEFAULT_PATTERN = Pattern(
    f"{MINFERENCE}'s default pattern, 1,000 vertical + 6,096 slash keys for every head (no "
    "searched pattern for this model)",
    ((7096, 1),),
)


def pattern_for(model_name: str) -> Pattern:
    return PATTERNS.get(model_name, DEFAULT_PATTERN)


def pattern_density(pattern: Pattern, n: int) -> float:
    """The share of a prompt's causal pairs beyond each query's own that the pattern keeps
    (1.0 up to SPARSE_FROM_TOKENS: prefilled dense)."""
    if n <= SPARSE_FROM_TOKENS:
        return 1.0
    causal = n * (n + 1) / 2
    return min(1.0, (pattern.kept_pairs(n) - n) / (causal - n))


def search_share(pattern: Pattern, n: int, chunk: int, density: float) -> float:
    """The pattern search's attention FLOPs over the sparse attention's: each chunk's last
    SEARCH_QUERIES queries scored against every key before it (scores only: half a pair's
    FLOPs), against the pairs the pattern keeps."""
    search, done = 0.0, 0
    while done < n:
        q = min(chunk, n - done)
        done += q
        search += min(q, SEARCH_QUERIES) * done / 2
    return search / (n + density * (n * (n + 1) / 2 - n))


def dual_chunk_config(model_name: str) -> dict | None:
    """The model's published dual_chunk_attention_config (Qwen2.5-1M), else None."""
    path = MODEL_CATALOG_DIR / f"{model_name}.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8")).get("dual_chunk_attention_config")


@dataclass(frozen=True, slots=True)
class SparsePrefill:
    """The sparse prefill remedy at the study's parallelism (summary.json's
    remedies.sparse_prefill: these fields)."""

    density: float
    density_from: str  # "pattern" or "long_context.sparse_prefill_density"
    pattern: str  # where the budgets were read
    keys_per_query: float  # the pattern's mean v + s over its heads
    full_layers: int  # the layers it sparsifies
    layers: int
    ttft_dense_s: float
    ttft_sparse_s: float
    attention_dense_s: float
    attention_sparse_s: float
    linear_s: float  # the same either way
    search_flops_share: float  # the pattern search, not priced: over the sparse attention
    dual_chunk: bool  # the model's config asks for Dual Chunk Attention


def sparse_prefill(ctx: Context, at: Fit, dense: Prefill) -> SparsePrefill:
    """The prompt walked with its full-attention layers sparse, at `at`; `dense`: its walk
    there (the study's)."""
    lc, m = ctx.cfg.long_context, ctx.model
    pattern, n = pattern_for(m.name), lc.prompt_tokens
    density = lc.sparse_prefill_density or pattern_density(pattern, n)
    full = sum(1 for layer in m.layers if layer.attention is Attention.FULL)
    walk = dense
    if full and density < 1.0:
        cost = ctx.cost_model(at.tp, at.pp)
        cost.attention.set_prefill_density(density)
        walk = walk_prefill(cost, n, dense.budget)
    searched = search_share(pattern, n, dense.budget, density) if density < 1.0 else 0.0
    return SparsePrefill(
        density=density,
        density_from="long_context.sparse_prefill_density"
        if lc.sparse_prefill_density
        else "pattern",
        pattern=pattern.source,
        keys_per_query=pattern.keys_per_query,
        full_layers=full,
        layers=m.num_layers,
        ttft_dense_s=dense.total_s,
        ttft_sparse_s=walk.total_s,
        attention_dense_s=dense.attention_s,
        attention_sparse_s=walk.attention_s,
        linear_s=dense.linear_s,
        search_flops_share=searched,
        dual_chunk=dual_chunk_config(m.name) is not None,
    )
