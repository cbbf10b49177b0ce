"""Attention seconds of a step, every layer kind's: prefill chunks and decodes.

Prefill: each chunk (q new tokens after c cached, beside n - 1 other chunks) is priced alone,
once, and remembered (KernelPricer.prefill_chunk_s). Decode: a sequence's attention depends on
its context alone for a given batch, so it is looked up in a ContextTable per (layer kind,
batch size, beside a prefill or not) and summed in order; decode() prices many steps at once
(rows of a steps x sequences matrix, for fast-forwarded runs), decode_rows() the same rows in
plain Python (short runs) and decode_one() one step, with the same operations in the same
order, hence the same bits. MLA, sparse
attention's indexer and linear attention are priced by the roofline prior (sim/cost/kernels.py).

vLLM's Triton attention (TRITON_ATTN: gpt-oss's attention sinks, FP8 KV caches on GPUs other
than Hopper) has no measured prefill table; it is priced by the nearest backend's (FlashAttention
2 on an A100), and no faster than the keys and values its kernel streams through the L2 cache
(triton_stream_s): vLLM 0.11.0's attention/ops/triton_unified_attention.py (unified_attention,
kernel_unified_attention_2d) runs one program per BLOCK_Q query tokens of a sequence and KV
head, BLOCK_Q = BLOCK_M / (query heads per KV head), BLOCK_M = 16 up to 16 of them, and each
program reads every key and value up to its last query's causal limit (its window, for sliding
layers) in tiles of 32: gpt-oss (64 query heads over 8 KV heads) re-reads the cache once per
two prompt tokens. Those bytes over the L2
cache's bandwidth bound the time from below (A100: 5,120 bytes per clock at 1.41 GHz, 7,219
GB/s, Table 3 of PMC10448217, https://pmc.ncbi.nlm.nih.gov/articles/PMC10448217/; other GPUs:
no bound).
"""

from __future__ import annotations

from dataclasses import replace
from functools import reduce
from operator import add, itemgetter

import numpy as np

from sim.cost.context_table import ContextTable
from sim.cost.kernels import AttentionShape, KernelPricer
from sim.cost.roofline import ACT_BYTES
from sim.kv.memory import kv_heads_per_gpu
from sim.specs.model import Attention, Layer, ModelSpec

# Decode tables shared by every cost model of this process whose pricer has the same
# fingerprint (a table depends on the pricer, the kernel shape, the batch size and `mixed`
# only, and each value is computed in a fixed page: sharing changes no bit). Runs after the
# first (upgrade_diff's mixtures, a sweep's points in one worker) skip most of the pricing.
SHARED_TABLES_MAX = 2048  # tables kept; beyond, the oldest are forgotten (not the run's own)
_SHARED: dict[tuple, ContextTable] = {}
L2_BYTES_PER_S = {"a100-80gb": 7.219e12, "a100-40gb": 7.219e12}  # see above
TRITON_TILE_ROWS = 16  # BLOCK_M of vLLM's unified Triton attention (up to 16 heads per KV head)


class AttentionCost:
    def __init__(
        self,
        model: ModelSpec,
        pricer: KernelPricer,
        layers: list[tuple[Layer, int]],
        tp: int,
        kv_cache_dtype: str,
        backend: str,
    ):
        self.model, self.pricer, self.layers, self.tp = model, pricer, layers, tp
        self.kv_cache_dtype = kv_cache_dtype
        self.kv_dtype = "fp8" if kv_cache_dtype == "fp8" else "bf16"
        self.heads = model.num_q_heads // tp
        # MLA: the latent each cached token keeps (the sparse indexer's keys are priced apart);
        # sparse attention (DeepSeek V3.2) attends to at most topk positions per query, while
        # its indexer, replicated on every TP rank, still scores every position
        mla = model.mla
        self.latent_bytes = int(mla.latent_dim * model.kv_dtype_bytes(kv_cache_dtype)) if mla else 0
        self.topk = model.indexer.topk_tokens if model.indexer else 0
        self.shapes = {  # the attention kernel of each layer kind, for the pricer
            id(layer): AttentionShape(
                self.heads,
                kv_heads_per_gpu(model, tp),
                model.head_dim,
                layer.window_tokens or 0,
                layer.attention is Attention.CHUNKED,
                self.kv_dtype,
                backend,
            )
            for layer, _ in layers
        }
        self._prefill: dict[tuple[int, int, int, int], float] = {}  # see _prefill_chunks
        self._prefill_one: dict[tuple[int, int] | None, float] = {}  # a lone chunk's prefill()
        self._tables: dict[tuple[int, int, bool], ContextTable] = {}  # see _table
        self._floors: dict[tuple[str, AttentionShape], float] = {}
        self._decode_info: list | None = None  # see _decode_terms
        self._plans: dict[tuple[int, bool], list] = {}  # see _decode_plan
        self._prefill_plan: list | None = None  # see prefill
        # the L2 bandwidth bounding vLLM's Triton prefill (None: another backend or GPU)
        self.l2_bytes_per_s = (
            L2_BYTES_PER_S.get(pricer.hardware.name) if backend == "TRITON_ATTN" else None
        )

    def set_prefill_density(self, density: float) -> None:
        """Sparse prefill (the long-context remedy, sim/scenarios/long_context/
        sparse_prefill.py): each full-attention layer's prefill attends to `density` of its
        causal pairs beyond each query's own (AttentionShape.density, in `shapes`, which the
        cost model shares); windowed, MLA and linear-attention layers keep theirs, decode is
        unchanged. The prefill memos start afresh."""
        for layer, _ in self.layers:
            if layer.attention is Attention.FULL:
                key = id(layer)
                self.shapes[key] = replace(self.shapes[key], density=density)
        self._prefill.clear()
        self._prefill_one.clear()
        self._prefill_plan = None

    def prefill(self, pre_q: list[int], pre_c: list[int]) -> float:
        """Seconds of every layer's prefill attention for the step's chunks, launch floors
        included."""
        plan = self._prefill_plan
        if plan is None:  # standard attention in every layer kind: (index, count, shape, floor)
            plan = self._prefill_plan = []
            if all(a not in (Attention.LINEAR, Attention.MLA) for a in self._attentions()):
                for index, (layer, count) in enumerate(self.layers):
                    shape = self.shapes[id(layer)]
                    plan.append((index, count, shape, self._floor("attention_prefill", shape)))
        if plan:  # the loop below for these kinds, with its lookups done once
            one = (pre_q[0], pre_c[0]) if len(pre_q) == 1 else None  # (most steps: one chunk)
            total = self._prefill_one.get(one)
            if total is not None:
                return total
            total = 0.0
            for index, count, shape, floor in plan:
                pre = self._prefill_chunks(index, shape, pre_q, pre_c)
                pre += floor
                total += count * pre
            if one is not None:
                self._prefill_one[one] = total
            return total
        m, pr = self.model, self.pricer
        n_pre = len(pre_q)
        total = 0.0
        for index, (layer, count) in enumerate(self.layers):
            if layer.attention is Attention.LINEAR:
                flops, state = self._linear_terms()
                pre = pr.linear_attention_s(float(sum(pre_q)), n_pre, flops, state)
            elif layer.attention is Attention.MLA:
                a = m.mla
                qk = a.qk_nope_head_dim + a.qk_rope_head_dim
                q, c = np.array(pre_q, dtype=np.int64), np.array(pre_c, dtype=np.int64)
                if self.topk:
                    per_seq = pr.sparse_mla_prefill_s(
                        q, c, self.heads, a.latent_dim, a.kv_lora_rank, self.latent_bytes, self.topk
                    )
                else:
                    per_seq = pr.mla_prefill_s(
                        q, c, self.heads, qk, a.v_head_dim, a.kv_lora_rank, self.latent_bytes
                    )
                pre = float(per_seq.sum())
                if m.indexer is not None:
                    ix = m.indexer
                    pre += float(
                        pr.indexer_s(q, c, ix.num_heads, ix.head_dim, ix.bytes_per_token).sum()
                    )
            else:
                shape = self.shapes[id(layer)]
                pre = self._prefill_chunks(index, shape, pre_q, pre_c)
                pre += self._floor("attention_prefill", shape)
            total += count * pre
        return total

    def _attentions(self) -> list[Attention]:
        return [layer.attention for layer, _ in self.layers]

    def _prefill_chunks(self, index: int, shape, pre_q: list[int], pre_c: list[int]) -> float:
        """Sum over the step's chunks of their attention seconds, each chunk (q new tokens
        after c cached, beside n - 1 other chunks) priced alone, once, and remembered."""
        n = len(pre_q)
        memo = self._prefill
        total = 0.0
        for q, c in zip(pre_q, pre_c, strict=True):
            key = (index, q, c, n)
            value = memo.get(key)
            if value is None:
                value = self.pricer.prefill_chunk_s(q, c, n, shape)
                if self.l2_bytes_per_s is not None:
                    value = max(value, triton_stream_s(q, c, shape, self.l2_bytes_per_s))
                memo[key] = value
            total += value
        return total

    def _linear_terms(self) -> tuple[float, float]:
        """(FLOPs per token, state bytes per sequence) of a linear-attention layer on one GPU."""
        lin = self.model.linear
        flops = 4 * lin.num_value_heads / self.tp * lin.key_head_dim * lin.value_head_dim
        state = lin.state_values * (1 if self.kv_dtype == "fp8" else ACT_BYTES) / self.tp
        return flops, state

    def _floor(self, kind: str, shape: AttentionShape) -> float:
        key = (kind, shape)
        if key not in self._floors:
            self._floors[key] = self.pricer.attention_floor_s(kind, shape)
        return self._floors[key]

    def _table(self, index: int, num_seqs: int, mixed: bool) -> ContextTable:
        """Per-sequence decode attention seconds of layer kind `index` by context, for a step
        that decodes `num_seqs` sequences (beside a prefill chunk when `mixed`)."""
        layer = self.layers[index][0]
        mla = layer.attention is Attention.MLA  # priced per sequence alone
        key = (index, 0, False) if mla else (index, num_seqs, mixed)
        table = self._tables.get(key)
        if table is None:
            m, pr = self.model, self.pricer
            if layer.attention is Attention.MLA:
                a, ix = m.mla, m.indexer
                latent, topk = self.latent_bytes, self.topk

                def per_sequence(c):
                    t = pr.mla_decode_s(c, self.heads, a.latent_dim, a.kv_lora_rank, latent, topk)
                    if ix is None:
                        return t
                    return t + pr.indexer_s(1, c, ix.num_heads, ix.head_dim, ix.bytes_per_token)

                table = ContextTable(per_sequence)
            else:
                table = self._shared_table(self.shapes[id(layer)], num_seqs, mixed)
            self._tables[key] = table
        return table

    def _shared_table(self, shape: AttentionShape, num_seqs: int, mixed: bool) -> ContextTable:
        pr = self.pricer

        def per_sequence(c):
            return pr.decode_s(c, num_seqs, shape, mixed=mixed)

        if pr.fingerprint is None:
            return ContextTable(per_sequence)
        key = (pr.fingerprint, shape, num_seqs, mixed)
        table = _SHARED.get(key)
        if table is None:
            if len(_SHARED) >= SHARED_TABLES_MAX:
                del _SHARED[next(iter(_SHARED))]
            table = _SHARED[key] = ContextTable(per_sequence)
        else:
            pr.decode_surface(shape, mixed)  # record what priced it, as decode_s would
        return table

    def decode(self, contexts: np.ndarray, mixed: bool) -> np.ndarray:
        """Seconds of every layer's decode attention for each row of `contexts` (steps x
        sequences, each row one step's decodes), launch floors included."""
        steps, num_seqs = contexts.shape

        def layer_sum(table: ContextTable) -> np.ndarray:
            # sequential row sums: np.sum's order depends on the array's shape
            return np.cumsum(table(contexts), axis=1)[:, -1]

        return self._decode_total(num_seqs, mixed, layer_sum, np.zeros(steps))

    def decode_one(self, contexts: list[int] | np.ndarray, mixed: bool) -> float:
        """decode() of one step: the same operations in the same order, so the same bits; in
        plain Python for a list (a step alone is cheaper this way than through numpy, unless
        its contexts are an int64 array already, vLLM V1's lane's)."""

        if isinstance(contexts, np.ndarray):

            def layer_sum(table: ContextTable) -> float:  # sequential, as np.cumsum
                return float(np.add.accumulate(table(contexts))[-1])

        else:  # a list: in plain Python, decode_rows' one row
            rows = self.decode_rows(contexts, 1, mixed)
            if rows is not None:
                return rows[0]

            def layer_sum(table: ContextTable) -> float:  # beyond the dense pages
                return reduce(add, table.row(contexts))  # (sequential, as np.cumsum)

        return self._decode_total(len(contexts), mixed, layer_sum, 0.0)

    def _decode_plan(self, num_seqs: int, mixed: bool) -> list:
        """Per layer kind, in order: (count, its ContextTable or None for linear attention,
        the launch floor a decode-only step adds or None, linear attention's seconds)."""
        plan = []
        for index, count, attention, floor in self._decode_terms():
            if attention is Attention.LINEAR:
                flops, state = self._linear_terms()
                dec = self.pricer.linear_attention_s(num_seqs, num_seqs, flops, state)
                plan.append((count, None, None, dec))
            else:
                table = self._table(index, num_seqs, mixed)
                plan.append((count, table, None if mixed else floor, 0.0))
        self._plans[(num_seqs, mixed)] = plan
        return plan

    def decode_rows(self, contexts: list[int], steps: int, mixed: bool) -> list[float] | None:
        """decode_one(contexts + k, mixed) for k = 0 .. steps - 1, in plain Python: the same
        operations in the same order (each step's sum over its sequences in running order,
        as decode_one's loop and decode's np.cumsum), so the same bits; None where a context
        lies beyond a table's dense pages (decode() then)."""
        num_seqs = len(contexts)
        totals = [0.0] * steps
        if num_seqs == 0:
            return totals
        top = max(contexts) + steps - 1
        plan = self._plans.get((num_seqs, mixed)) or self._decode_plan(num_seqs, mixed)
        if len(plan) == 1 and plan[0][1] is not None:  # one layer kind: the loop below, fused
            count, table, floor, _ = plan[0]
            values = table.values_upto(top)
            if values is None:
                return None
            if floor is None:
                return [0.0 + count * x for x in _row_sums(values, contexts, steps)]
            return [0.0 + count * (x + floor) for x in _row_sums(values, contexts, steps)]
        for count, table, floor, fixed in plan:
            if table is None:
                totals = [t + count * fixed for t in totals]
                continue
            values = table.values_upto(top)
            if values is None:
                return None
            sums = _row_sums(values, contexts, steps)
            if floor is not None:
                sums = [s + floor for s in sums]
            totals = [t + count * s for t, s in zip(totals, sums, strict=True)]
        return totals

    def _decode_total(self, num_seqs: int, mixed: bool, layer_sum, total):
        """Sum over layer kinds of count x (the kind's per-sequence sum + its launch floor),
        starting from `total` (0.0, or zeros per step), by the batch size's plan."""
        if num_seqs == 0:
            return total
        plan = self._plans.get((num_seqs, mixed)) or self._decode_plan(num_seqs, mixed)
        for count, table, floor, fixed in plan:
            if table is None:
                dec = fixed
            else:
                dec = layer_sum(table)
                if floor is not None:
                    dec = dec + floor
            total += count * dec
        return total

    def _decode_terms(self) -> list[tuple[int, int, Attention, float | None]]:
        """Per layer kind: (index, layer count, attention, decode launch floor or None)."""
        if self._decode_info is None:
            self._decode_info = [
                (
                    index,
                    count,
                    layer.attention,
                    None
                    if layer.attention in (Attention.LINEAR, Attention.MLA)
                    else self._floor("attention_decode", self.shapes[id(layer)]),
                )
                for index, (layer, count) in enumerate(self.layers)
            ]
        return self._decode_info


def triton_stream_s(q: int, c: int, shape, l2_bytes_per_s: float) -> float:
    """Least seconds of vLLM's unified Triton attention over one prefill chunk (q new tokens
    after c cached) in one layer: the keys and values each program streams through the L2
    cache (see the module's docstring). 0 for chunked-local and sparse attention."""
    if shape.chunked or shape.density != 1.0 or q <= 0:
        return 0.0
    per_kv = max(1, int(shape.heads // shape.kv_heads))  # query heads per KV head
    rows = TRITON_TILE_ROWS if per_kv <= TRITON_TILE_ROWS else 1 << (per_kv - 1).bit_length()
    block_q = max(1, rows // per_kv)
    programs = -(-q // block_q)
    keys = c + (q + block_q) / 2  # the mean prefix a program reads
    if shape.window:
        keys = min(keys, float(shape.window) + block_q - 1)
    nbytes = programs * keys * float(shape.kv_heads) * float(shape.head_dim) * 2 * shape.kv_bytes
    return nbytes / l2_bytes_per_s


def _row_sums(values, contexts: list[int], steps: int) -> list[float]:
    """For k = 0 .. steps - 1, the sum over the sequences in order of values[c + k] (a table's
    dense values), each sequential as np.cumsum adds them (functools.reduce)."""
    if len(contexts) == 1:  # (itemgetter of one index gives a value, not a tuple)
        c = contexts[0]
        return values[c : c + steps].tolist()
    get = itemgetter(*contexts)
    if steps == 1:
        return [reduce(add, get(values))]
    if steps <= 10:  # step k's values gathered in one call from a view starting at k
        with memoryview(values) as view:
            return [reduce(add, get(view[k:])) for k in range(steps)]
    # row k of zip(*slices): step k's values, sequence by sequence
    rows = zip(*[values[c : c + steps] for c in contexts], strict=True)
    return [reduce(add, row) for row in rows]
