"""scenario=long_context, other architectures: the same request asked of another model at the
same length, on the same GPUs, alone (walked, not simulated)."""

from __future__ import annotations

from dataclasses import dataclass

from sim.config import SimConfig
from sim.errors import UserError
from sim.scenarios.long_context.arithmetic import (
    tp_choices,
    walk_prefill,
)
from sim.scenarios.long_context.decode import decode_at, kv_read_bytes_per_gpu
from sim.scenarios.long_context.runs import Context, chunk_tokens


@dataclass(frozen=True, slots=True)
class Architecture:
    """One model's answer (summary.json's architectures[i]: these fields, in this order)."""

    model: str
    attention: str  # its layers' attention kinds, "+"-joined
    tp: int
    kv_bytes_per_token: int
    kv_bytes_sequence: int
    kv_bytes_sequence_per_gpu: int
    weights_bytes_per_gpu: int
    ttft_s: float
    ttft_attention_share: float
    decode_ms_per_token: float
    decode_kv_share: float
    fits: bool
    max_context_tokens: int
    trained_context_tokens: int
    why_not: str
    windows_bounded: bool | None  # windowed layers held to their window (None: it has none)


@dataclass(frozen=True, slots=True)
class ArchitectureError:
    """A model that could not be asked (not served by the engine, ...): why, in one line."""

    model: str
    error: str


def architecture_row(cfg: SimConfig, name: str) -> Architecture | ArchitectureError:
    """The same questions for another model at the same length, on the same GPUs (the
    largest tensor parallelism the model allows up to the given one)."""
    try:
        ctx = Context.of(cfg, name)
        tp = max(t for t in tp_choices(ctx.model, cfg.parallel.tp))
        settings = ctx.settings(tp)
        fit = ctx.fit(tp)
        cost = ctx.cost_model(tp)
    except UserError as exc:
        return ArchitectureError(name, str(exc))
    m, lc = ctx.model, cfg.long_context
    w = walk_prefill(cost, lc.prompt_tokens, chunk_tokens(settings, lc.prompt_tokens))
    read = kv_read_bytes_per_gpu(m, fit, settings.kv_cache_dtype)
    dec = decode_at(cost, lc.prompt_tokens, read, fit.weights_bytes_per_gpu)
    kinds = sorted({layer.attention.value for layer in m.layers})
    bounded = settings.windows_bounded
    return Architecture(
        model=name,
        attention="+".join(kinds) + (" (sparse top-k)" if m.indexer else ""),
        tp=tp,
        kv_bytes_per_token=m.kv_bytes_per_token(),
        kv_bytes_sequence=m.kv_bytes_for_sequence(lc.prompt_tokens, "auto", bounded),
        kv_bytes_sequence_per_gpu=fit.kv_bytes_sequence_per_gpu,
        weights_bytes_per_gpu=fit.weights_bytes_per_gpu,
        ttft_s=w.total_s,
        ttft_attention_share=w.attention_s / w.total_s,
        decode_ms_per_token=dec.total_s * 1e3,
        decode_kv_share=dec.kv_s / dec.total_s,
        fits=fit.fits,
        max_context_tokens=fit.max_context_tokens,
        trained_context_tokens=ctx.trained_tokens,
        why_not=fit.why,
        windows_bounded=bounded if any(x.window_tokens for x in m.layers) else None,
    )
