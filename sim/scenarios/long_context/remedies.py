"""scenario=long_context: what a user can turn, each priced with the same cost model.

tensor parallelism        every valid TP in one node: fit, TTFT and decode (walked)
decode context parallel   KV that TP replicates (MLA latents, fewer KV heads than ranks)
                          sharded across the TP group instead: memory only, no more GPUs
prefill context parallel  ring attention over cp groups of tp GPUs: each holds 1/cp of the
                          tokens; per layer its KV shard travels the ring (cp - 1 hops)
                          behind that layer's attention, over NVLink inside a node, else
                          the network; exposed where the hop outlasts the attention
FP8 KV                    half the KV bytes: the longest context and decode's KV read
sparse prefill            vertical + slash patterns: full attention's prefill pairs scaled by
                          the pattern's density (sim/scenarios/long_context/sparse_prefill.py)
prefill budget            from the traffic runs: the long request's TTFT against the
                          co-tenants' p99 TPOT, per budget
separate prefill pool     the prefill alone, then each GPU's KV shard over its NIC; the
                          co-tenants decode in another pool, beside the long decode only
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sim.scenarios.long_context.arithmetic import (
    NODE_GPUS,
    Fit,
    Prefill,
    kv_bytes_sequence_per_gpu,
    tp_choices,
    walk_prefill,
)
from sim.scenarios.long_context.decode import Decode, decode_at, kv_read_bytes_per_gpu
from sim.scenarios.long_context.runs import Context, chunk_tokens
from sim.scenarios.long_context.sparse_prefill import SparsePrefill, sparse_prefill
from sim.scenarios.long_context.traffic import EngineRuns
from sim.specs.model import Attention

DISAGGREGATION = {  # how each engine family runs a separate prefill pool
    "vllm": "vLLM: a KV connector between a prefill and a decode instance (--kv-transfer-config)",
    "sglang": "SGLang: --disaggregation-mode prefill / decode with a transfer backend",
    "trtllm": "TensorRT-LLM: disaggregated serving (context and generation servers)",
}


@dataclass(frozen=True, slots=True)
class TensorParallel:
    tp: int
    gpus: int
    fits: bool
    kv_bytes_sequence_per_gpu: int
    weights_bytes_per_gpu: int
    max_context_tokens: int
    ttft_s: float
    decode_ms_per_token: float


@dataclass(frozen=True, slots=True)
class DecodeContextParallel:
    dcp: int  # the copies TP keeps of each KV, sharded instead
    why: str
    fits: bool
    kv_bytes_sequence_per_gpu: int
    max_context_tokens: int
    decode_ms_per_token: float


@dataclass(frozen=True, slots=True)
class PrefillContextParallel:
    cp: int
    gpus: int
    link: str  # "NVLink" inside a node, else "network"
    ttft_s: float
    ring_exposed_s: float
    ring_total_s: float
    fits: bool
    kv_bytes_sequence_per_gpu: int
    max_context_tokens: int
    decode_ms_per_token: float


@dataclass(frozen=True, slots=True)
class Fp8Kv:
    fits: bool
    kv_bytes_sequence_per_gpu: int
    max_context_tokens: int
    ttft_s: float | None  # None where the engine refuses FP8 KV
    decode_ms_per_token: float | None
    why_not: str  # the engine's refusal, or the plan's line where it holds none ("" if some)


@dataclass(frozen=True, slots=True)
class BudgetChoice:
    """One traffic variant (sim/scenarios/long_context/traffic.py) as a remedy."""

    budget: int
    long_prefill_token_threshold: int
    long_ttft_s: float
    cotenant_p99_tpot_ms: float | None
    cotenant_p99_ttft_ms: float | None


@dataclass(frozen=True, slots=True)
class Disaggregated:
    supported: bool
    how: str
    kv_transfer_s: float
    kv_transfer_layerwise_exposed_s: float
    ttft_s: float
    cotenant_p99_tpot_ms: float | None
    prefill_gpus: int


@dataclass(frozen=True, slots=True)
class Remedies:
    tensor_parallel: tuple[TensorParallel, ...]
    decode_context_parallel: DecodeContextParallel | None  # None where TP keeps no copies
    prefill_context_parallel: tuple[PrefillContextParallel, ...]
    fp8_kv: Fp8Kv
    prefill_budget: tuple[BudgetChoice, ...]  # empty without traffic runs
    disaggregated: Disaggregated
    sparse_prefill: SparsePrefill

    @property
    def summary(self) -> dict:
        """summary.json's `remedies` (lists where the fields are tuples)."""
        return {
            "tensor_parallel": [asdict(x) for x in self.tensor_parallel],
            "decode_context_parallel": None
            if self.decode_context_parallel is None
            else asdict(self.decode_context_parallel),
            "prefill_context_parallel": [asdict(x) for x in self.prefill_context_parallel],
            "fp8_kv": asdict(self.fp8_kv),
            "prefill_budget": [asdict(x) for x in self.prefill_budget],
            "disaggregated": asdict(self.disaggregated),
            "sparse_prefill": asdict(self.sparse_prefill),
        }


def remedies(
    ctx: Context, at: Fit, split: Prefill, dec: Decode, runs: EngineRuns | None, ttft_s: float
) -> Remedies:
    """Each remedy at `at` (the simulated fit, else the given one); `split`: the prompt's walk,
    `dec`: its decode step alone, `ttft_s`: its TTFT alone (the engine's where simulated)."""
    traffic = runs.traffic if runs is not None else None
    budgets = traffic.by_budget if traffic is not None else ()
    return Remedies(
        tensor_parallel=tuple(_tp_row(ctx, tp) for tp in tp_choices(ctx.model)),
        decode_context_parallel=_dcp(ctx, at, dec),
        prefill_context_parallel=tuple(_pcp(ctx, at, split, dec, cp) for cp in (2, 4, 8)),
        fp8_kv=_fp8(ctx, at),
        prefill_budget=tuple(
            BudgetChoice(
                r.variant.budget,
                r.variant.long_prefill_token_threshold,
                r.long_ttft_s,
                r.with_long.p99_tpot_ms,
                r.with_long.p99_ttft_ms,
            )
            for r in budgets
        ),
        disaggregated=_disagg(ctx, at, ttft_s, runs, dec),
        sparse_prefill=sparse_prefill(ctx, at, split),
    )


def _time_at(ctx: Context, fit: Fit, **changes) -> tuple[float, float]:
    """(TTFT s, decode ms per token) of the request alone at fit's parallelism."""
    lc = ctx.cfg.long_context
    cost = ctx.cost_model(fit.tp, fit.pp, **changes)
    chunk = chunk_tokens(cost.settings, lc.prompt_tokens)
    w = walk_prefill(cost, lc.prompt_tokens, chunk)
    read = kv_read_bytes_per_gpu(ctx.model, fit, cost.settings.kv_cache_dtype)
    d = decode_at(cost, lc.prompt_tokens, read, fit.weights_bytes_per_gpu)
    return w.total_s, d.total_s * 1e3


def _tp_row(ctx: Context, tp: int) -> TensorParallel:
    fit = ctx.fit(tp)
    ttft, decode = _time_at(ctx, fit)
    return TensorParallel(
        tp, tp, fit.fits, fit.kv_bytes_sequence_per_gpu, fit.weights_bytes_per_gpu,
        fit.max_context_tokens, ttft, decode,
    )  # fmt: skip


def _dcp(ctx: Context, at: Fit, dec: Decode) -> DecodeContextParallel | None:
    """Decode context parallelism (vLLM --decode-context-parallel-size, SGLang --dcp-size):
    only where TP keeps copies of the same KV."""
    m = ctx.model
    mla = any(layer.attention is Attention.MLA for layer in m.layers)
    copies = at.tp if mla else max(1, at.tp // m.num_kv_heads)
    if copies == 1:
        return None
    fit = ctx.fit(at.tp, at.pp, copies)
    return DecodeContextParallel(
        dcp=copies,
        why="MLA latents are replicated on every TP rank"
        if mla
        else f"{m.num_kv_heads} KV heads over {at.tp} ranks: each head kept {copies} times",
        fits=fit.fits,
        kv_bytes_sequence_per_gpu=fit.kv_bytes_sequence_per_gpu,
        max_context_tokens=fit.max_context_tokens,
        decode_ms_per_token=(dec.total_s - dec.kv_s * (1 - 1 / copies)) * 1e3,
    )


def _pcp(ctx: Context, at: Fit, split: Prefill, dec: Decode, cp: int) -> PrefillContextParallel:
    m, hw, lc = ctx.model, ctx.hardware, ctx.cfg.long_context
    gpus = at.num_gpus * cp
    inside = at.tp * cp <= NODE_GPUS
    link = hw.peer_bytes_per_s if inside else lc.network_bytes_per_s
    layers = m.num_layers
    bounded = ctx.settings(at.tp).windows_bounded
    shard = kv_bytes_sequence_per_gpu(m, lc.prompt_tokens, "auto", at.tp, at.pp, cp, bounded)
    shard /= layers
    hop_s = (cp - 1) * shard / link  # one layer's ring, per GPU
    attention_layer_s = split.attention_s / cp / layers
    exposed = layers * max(0.0, hop_s - attention_layer_s)
    gpu_s = split.linear_s + split.attention_s + split.communication_s
    ttft = gpu_s / cp + split.overhead_s + exposed
    fit = ctx.fit(at.tp, at.pp, cp)
    return PrefillContextParallel(
        cp=cp,
        gpus=gpus,
        link="NVLink" if inside else "network",
        ttft_s=ttft,
        ring_exposed_s=exposed,
        ring_total_s=layers * hop_s,
        fits=fit.fits,
        kv_bytes_sequence_per_gpu=fit.kv_bytes_sequence_per_gpu,
        max_context_tokens=fit.max_context_tokens,
        decode_ms_per_token=(dec.total_s - dec.kv_s * (1 - 1 / cp)) * 1e3,
    )


def _fp8(ctx: Context, at: Fit) -> Fp8Kv:
    fit = ctx.fp8_fit(at.tp, at.pp)
    if isinstance(fit, str):  # the engine refuses it here
        return Fp8Kv(False, 0, 0, None, None, fit)
    ttft, decode = _time_at(ctx, fit, kv_cache_dtype="fp8")
    why = "" if fit.max_context_tokens else fit.why
    return Fp8Kv(fit.fits, fit.kv_bytes_sequence_per_gpu, fit.max_context_tokens, ttft, decode, why)


def _disagg(
    ctx: Context, at: Fit, ttft_s: float, runs: EngineRuns | None, dec: Decode
) -> Disaggregated:
    lc = ctx.cfg.long_context
    transfer = at.kv_bytes_sequence_per_gpu / lc.network_bytes_per_s
    traffic = runs.traffic if runs is not None else None
    p99 = traffic.engine_run.without_long.p99_tpot_ms if traffic is not None else None
    return Disaggregated(
        supported=ctx.engine_name in DISAGGREGATION,
        how=DISAGGREGATION.get(ctx.engine_name, "not offered by this engine"),
        kv_transfer_s=transfer,
        kv_transfer_layerwise_exposed_s=transfer / ctx.model.num_layers,
        ttft_s=ttft_s + transfer,
        cotenant_p99_tpot_ms=None if p99 is None else p99 + dec.kv_s * 1e3,
        prefill_gpus=at.num_gpus,
    )
