"""scenario=long_context: what a user can turn, each priced with the same cost model.

tensor parallelism        every valid TP in one node: fit, TTFT and decode (walked)
decode context parallel   KV that TP replicates (MLA latents, fewer KV heads than ranks)
                          sharded across the TP group instead: memory only, no more GPUs
prefill context parallel  ring attention over cp groups of tp GPUs: each holds 1/cp of the
                          tokens; per layer its KV shard travels the ring (cp - 1 hops)
                          behind that layer's attention, over NVLink inside a node, else
                          the network; exposed where the hop outlasts the attention
FP8 KV                    half the KV bytes: the longest context and decode's KV read
prefill budget            from the traffic runs: the long request's TTFT against the
                          co-tenants' p99 TPOT, per budget
separate prefill pool     the prefill alone, then each GPU's KV shard over its NIC; the
                          co-tenants decode in another pool, beside the long decode only
"""

from __future__ import annotations

from sim.scenarios.long_context.arithmetic import (
    NODE_GPUS,
    Decode,
    Fit,
    decode_at,
    kv_bytes_sequence_per_gpu,
    tp_choices,
    walk_prefill,
)
from sim.scenarios.long_context.runs import Context, chunk_tokens
from sim.specs.model import Attention

DISAGGREGATION = {  # how each engine family runs a separate prefill pool
    "vllm": "vLLM: a KV connector between a prefill and a decode instance (--kv-transfer-config)",
    "sglang": "SGLang: --disaggregation-mode prefill / decode with a transfer backend",
    "trtllm": "TensorRT-LLM: disaggregated serving (context and generation servers)",
}


def remedies(ctx: Context, at: Fit, split: dict, dec: Decode, s: dict) -> dict:
    return {
        "tensor_parallel": [_tp_row(ctx, tp) for tp in tp_choices(ctx.model)],
        "decode_context_parallel": _dcp(ctx, at, dec),
        "prefill_context_parallel": [_pcp(ctx, at, split, dec, cp) for cp in (2, 4, 8)],
        "fp8_kv": _fp8(ctx, at),
        "prefill_budget": [
            {
                "budget": r["budget"],
                "long_prefill_token_threshold": r["long_prefill_token_threshold"],
                "long_ttft_s": r["long_ttft_s"],
                "cotenant_p99_tpot_ms": r["with"]["p99_tpot_ms"],
                "cotenant_p99_ttft_ms": r["with"]["p99_ttft_ms"],
            }
            for r in s.get("cotenant_by_budget", [])
        ],
        "disaggregated": _disagg(ctx, at, s, dec),
    }


def _time_at(ctx: Context, fit: Fit, **changes) -> tuple[float, float]:
    """(TTFT s, decode ms per token) of the request alone at fit's parallelism."""
    lc = ctx.cfg.long_context
    cost = ctx.cost_model(fit.tp, fit.pp, **changes)
    chunk = chunk_tokens(cost.settings, lc.prompt_tokens)
    w = walk_prefill(cost, lc.prompt_tokens, chunk)
    d = decode_at(cost, lc.prompt_tokens, fit.kv_bytes_sequence_per_gpu, fit.weights_bytes_per_gpu)
    return w.total_s, d.total_s * 1e3


def _tp_row(ctx: Context, tp: int) -> dict:
    fit = ctx.fit(tp)
    ttft, decode = _time_at(ctx, fit)
    return {
        "tp": tp,
        "gpus": tp,
        "fits": fit.fits,
        "kv_bytes_sequence_per_gpu": fit.kv_bytes_sequence_per_gpu,
        "weights_bytes_per_gpu": fit.weights_bytes_per_gpu,
        "max_context_tokens": fit.max_context_tokens,
        "ttft_s": ttft,
        "decode_ms_per_token": decode,
    }


def _dcp(ctx: Context, at: Fit, dec: Decode) -> dict | None:
    """Decode context parallelism (vLLM --decode-context-parallel-size, SGLang --dcp-size):
    only where TP keeps copies of the same KV."""
    m = ctx.model
    mla = any(layer.attention is Attention.MLA for layer in m.layers)
    copies = at.tp if mla else max(1, at.tp // m.num_kv_heads)
    if copies == 1:
        return None
    fit = ctx.fit(at.tp, at.pp, copies)
    return {
        "dcp": copies,
        "why": "MLA latents are replicated on every TP rank"
        if mla
        else f"{m.num_kv_heads} KV heads over {at.tp} ranks: each head kept {copies} times",
        "fits": fit.fits,
        "kv_bytes_sequence_per_gpu": fit.kv_bytes_sequence_per_gpu,
        "max_context_tokens": fit.max_context_tokens,
        "decode_ms_per_token": (dec.total_s - dec.kv_s * (1 - 1 / copies)) * 1e3,
    }


def _pcp(ctx: Context, at: Fit, split: dict, dec: Decode, cp: int) -> dict:
    m, hw, lc = ctx.model, ctx.hardware, ctx.cfg.long_context
    gpus = at.num_gpus * cp
    inside = at.tp * cp <= NODE_GPUS
    link = hw.peer_bytes_per_s if inside else lc.network_bytes_per_s
    b = split["breakdown_s"]
    layers = m.num_layers
    shard = kv_bytes_sequence_per_gpu(m, lc.prompt_tokens, "auto", at.tp, at.pp, cp) / layers
    hop_s = (cp - 1) * shard / link  # one layer's ring, per GPU
    attention_layer_s = b["attention"] / cp / layers
    exposed = layers * max(0.0, hop_s - attention_layer_s)
    ttft = (b["linear"] + b["attention"] + b["communication"]) / cp + b["overhead"] + exposed
    fit = ctx.fit(at.tp, at.pp, cp)
    return {
        "cp": cp,
        "gpus": gpus,
        "link": "NVLink" if inside else "network",
        "ttft_s": ttft,
        "ring_exposed_s": exposed,
        "ring_total_s": layers * hop_s,
        "fits": fit.fits,
        "kv_bytes_sequence_per_gpu": fit.kv_bytes_sequence_per_gpu,
        "max_context_tokens": fit.max_context_tokens,
        "decode_ms_per_token": (dec.total_s - dec.kv_s * (1 - 1 / cp)) * 1e3,
    }


def _fp8(ctx: Context, at: Fit) -> dict:
    fit = ctx.fit(at.tp, at.pp, kv_cache_dtype="fp8")
    ttft, decode = _time_at(ctx, fit, kv_cache_dtype="fp8")
    return {
        "fits": fit.fits,
        "kv_bytes_sequence_per_gpu": fit.kv_bytes_sequence_per_gpu,
        "max_context_tokens": fit.max_context_tokens,
        "ttft_s": ttft,
        "decode_ms_per_token": decode,
    }


def _disagg(ctx: Context, at: Fit, s: dict, dec: Decode) -> dict:
    lc = ctx.cfg.long_context
    transfer = at.kv_bytes_sequence_per_gpu / lc.network_bytes_per_s
    without = (s.get("cotenant") or {}).get("without") or {}
    p99 = without.get("p99_tpot_ms")
    return {
        "supported": ctx.engine_name in DISAGGREGATION,
        "how": DISAGGREGATION.get(ctx.engine_name, "not offered by this engine"),
        "kv_transfer_s": transfer,
        "kv_transfer_layerwise_exposed_s": transfer / ctx.model.num_layers,
        "ttft_s": s["ttft_s"] + transfer,
        "cotenant_p99_tpot_ms": None if p99 is None else p99 + dec.kv_s * 1e3,
        "prefill_gpus": at.num_gpus,
    }
