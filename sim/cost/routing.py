"""Which experts a batch's tokens are routed to: the distinct experts one GPU reads in a step.

A step's routed experts cost their weights' bytes at small batches (each expert a token picks
is read once) and their FLOPs, spread unevenly, at large ones (the most loaded expert sets the
grouped GEMM's time). Both depend on how the router spreads tokens, which no row of a benchmark
records, so the cost model takes the routing AIConfigurator prices served MoE models with:

- **Power law, exponent 1.2.** AIConfigurator's SDK builds the MoE ops of every generic MoE
  model (Qwen3-MoE, gpt-oss, Mixtral: sdk/models/moe.py, `_power_law_alpha = 1.2`, both phases
  without EPLB) from its tables' `power_law_1.2` rows, and its gap analysis holds those
  predictions to the silicon runs this project validates against (ai-dynamo/aiconfigurator
  @095f58a). Its collectors draw that routing (collector/helper.py
  `_generate_power_law_distribution`): each expert's load is drawn from a power law of that
  exponent on [1, 0.8 x tokens] (on [0.01, 2] when the batch makes no more picks than there
  are experts), scaled to the batch's tokens x top-k picks and rounded; what rounding and the
  per-expert cap (one pick per token) leave over goes one pick at a time to the least loaded
  expert, so an untouched expert takes it first. Every table of every release measured it
  (`balanced` is missing from A100's and SGLang 0.5.6's), and it is what the measured tables
  say a decode step (fewer distinct experts than independent picks touch: gpt-oss-120b's 32
  tokens read 0.39 ms on the H200's vLLM 0.18 table against 0.72 ms balanced) and a long
  prefill (the hot expert: 4,096 tokens take 2.78 ms against 1.70 balanced) cost.
- **Expert parallelism** (spread > 1): a rank holds experts / spread whole experts and sees
  the picks routed to them; priced by independent picks (experts_touched), as no table of an
  expert-parallel rank is fitted (sim/calibrate/kernel_tables.py).

The expected touched count under the power law is computed by drawing the routing as the
collectors do (a seeded generator, so it is deterministic) at a grid of token counts for each
(top-k, experts) pair, and interpolated in log tokens in between.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

ROUTING = "power_law_1.2"  # the distribution the MoE tables are fitted on (kernel_tables.py)
ALPHA = 1.2
DRAWS = 48  # routings drawn per grid point: the mean's standard error is under 1% of it
GRID = np.unique(np.concatenate([np.arange(1, 65), np.round(2 ** np.arange(6.25, 20.01, 0.25))]))


def experts_touched(tokens, topk, experts, spread=1) -> np.ndarray:
    """Expected distinct experts, of the `experts` one GPU holds, that a batch routes to when
    each token picks independently: with expert parallelism the GPU holds 1/spread of them and
    sees 1/spread of the token-expert choices (tokens = the batch's tokens / spread): each of
    its experts is picked by some token with probability 1 - (1 - topk / all)^all tokens."""
    tokens, topk, experts, spread = (
        np.asarray(v, dtype=np.float64) for v in (tokens, topk, experts, spread)
    )
    missed = np.clip(1 - topk / (experts * spread), 0, 1)
    return experts * (1 - np.power(missed, tokens * spread))


def _power_law(rng, size, lo, hi, alpha=ALPHA) -> np.ndarray:
    """Draws from a power law of exponent `alpha` on [lo, hi] by its inverse CDF."""
    u = rng.random(size)
    a = 1.0 - alpha
    return ((hi**a - lo**a) * u + lo**a) ** (1.0 / a)


def _drawn_touched(tokens: int, topk: int, experts: int, rng) -> float:
    """Mean distinct experts over DRAWS routings of `tokens` tokens drawn as the collectors
    draw them (module docstring)."""
    picks = tokens * topk
    lo, hi = (1.0, 0.8 * tokens) if picks > experts else (0.01, 2.0)
    load = _power_law(rng, (DRAWS, experts), lo, max(hi, lo * (1 + 1e-9)))
    counts = np.minimum(np.round(load / load.sum(1, keepdims=True) * picks), tokens)
    left = picks - counts.sum(1)  # rounding and the cap: one at a time to the least loaded
    untouched = (counts == 0).sum(1)
    touched = experts - untouched + np.minimum(np.maximum(left, 0), untouched)
    return float(np.minimum(touched, min(experts, picks)).mean())


@lru_cache(maxsize=64)
def _grid(topk: int, experts: int) -> np.ndarray:
    rng = np.random.default_rng(topk * 100_003 + experts)
    return np.array([_drawn_touched(int(t), topk, experts, rng) for t in GRID])


def power_law_touched(tokens, topk, experts) -> np.ndarray:
    """Expected distinct experts a batch of `tokens` tokens touches under the power-law routing
    (module docstring), for arrays of tokens, top-k and expert counts."""
    tokens, topk, experts = np.broadcast_arrays(
        *(np.asarray(v, dtype=np.float64) for v in (tokens, topk, experts))
    )
    out = np.empty(tokens.shape)
    pairs = np.stack([topk.ravel(), experts.ravel()], 1)
    flat_tokens, flat_out = tokens.ravel(), out.reshape(-1)
    for k, e in np.unique(pairs, axis=0):
        at = (pairs[:, 0] == k) & (pairs[:, 1] == e)
        t = np.maximum(flat_tokens[at], 1.0)
        touched = np.interp(np.log2(t), np.log2(GRID), _grid(int(k), int(e)))
        flat_out[at] = np.minimum(touched, np.minimum(e, t * k))
    return out


def routed_experts(tokens, topk, experts, spread=1) -> np.ndarray:
    """Distinct experts, of those one GPU holds, a batch reads: power-law routing over every
    expert without expert parallelism, independent picks over an expert-parallel rank's."""
    if np.all(np.asarray(spread) <= 1):
        return power_law_touched(tokens, topk, experts)
    return experts_touched(tokens, topk, experts, spread)
