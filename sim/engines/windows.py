"""How the simulated release's KV allocator sizes windowed layers (sliding-window and
chunked-local attention): a slot per token for the whole sequence, as for full attention, or
only the window, the slots that slide out handed back.

vLLM, V1 engine (the releases' sources and notes):
    every layer windowed (Mistral-7B-v0.1)   bounded from 0.8.3 (PR #14097, native sliding
                                              window in V1); full length before
    sliding + full layers (Gemma 3, gpt-oss)  full length before 0.9.1: the windowed layers are
                                              regarded as full attention in the KV cache manager
                                              (FullAttentionSpec.sliding_window); bounded from
                                              0.9.1 (the hybrid KV cache manager, PR #17996)
    chunked-local + full (Llama 4)            bounded in 0.10.0 (PR #19351); full length again
                                              from 0.10.1: the hybrid manager is disabled for
                                              chunked-local attention by default (PR #21761,
                                              VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE
                                              off); bounded from 0.14.0 (PR #29627 turned it
                                              on, merged December 2025: the simulator counts it
                                              from the first release after the merge it is
                                              sure of; 0.13.0 is uncertain)
vLLM V0, SGLang and TensorRT-LLM: full length here. V0's block manager bounds a sliding
window only for a model whose every layer slides and not with chunked prefill or prefix
caching; SGLang keeps windowed layers in a separate, smaller pool (its SWA pool, sized by
swa_full_tokens_ratio, and an opt-in hybrid ratio for Llama 4), and TensorRT-LLM gives each
attention window its own pool (VSWA): neither is one shared pool the simulator's block pool can
stand for, so both are sized conservatively, at full length.
Linear-attention layers hold a fixed state per request in every release (sim/kv/memory.py).
Bounded, a windowed layer holds min(tokens, window) tokens (vLLM also keeps the chunk being
computed, at most one token budget more, which is left out here).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.engines.versions import version_tuple
from sim.specs.model import Attention, ModelSpec


@dataclass(frozen=True, slots=True)
class WindowRule:
    """Whether windowed layers are bounded by their window, and the rule that says so ("" for a
    model without windowed layers)."""

    bounded: bool
    why: str


def window_rule(engine: str, version: str, scheduler: str, model: ModelSpec) -> WindowRule:
    """How `engine`@`version` (running `scheduler`) sizes `model`'s windowed layers."""
    kinds = {layer.attention for layer in model.layers if layer.attention is not Attention.LINEAR}
    windowed = kinds & {Attention.SLIDING, Attention.CHUNKED}
    if not windowed:
        return WindowRule(False, "")
    at = f"{engine} {version}"
    if scheduler != "vllm_v1":
        return WindowRule(False, f"{at}: windowed layers at full length (one slot per token)")
    v = version_tuple(version)
    if windowed == kinds:  # every KV layer windowed
        if v >= (0, 8, 3):
            return WindowRule(True, f"{at}: V1 frees what slides out of the window (PR #14097)")
        return WindowRule(False, f"{at}: V1 before 0.8.3 keeps every token (full length)")
    if Attention.CHUNKED in windowed:
        if (0, 10, 0) <= v < (0, 10, 1) or v >= (0, 14, 0):
            again = "" if v < (0, 10, 1) else "; on by default again, PR #29627"
            return WindowRule(
                True,
                f"{at}: the hybrid KV cache manager bounds chunked-local layers (PR #19351{again})",
            )
        why = "before 0.10.0" if v < (0, 10, 0) else "off by default for chunked-local (PR #21761)"
        return WindowRule(False, f"{at}: hybrid KV cache manager {why}: full length")
    if v >= (0, 9, 1):
        return WindowRule(
            True, f"{at}: the hybrid KV cache manager bounds sliding-window layers (PR #17996)"
        )
    return WindowRule(
        False, f"{at}: no hybrid KV cache manager before 0.9.1: windowed layers at full length"
    )
