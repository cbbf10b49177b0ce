"""Speculative decoding: a proposer drafts k tokens per decoding request, the target model
verifies them in one pass over k + 1 tokens, and the request keeps the drafts up to the first
rejection plus one token of its own (1 to k + 1 tokens a step).

    step n:   [last token | d1 d2 ... dk]   verified together (a prefill-like pass of k + 1)
    accepted:  d1 .. da, then the target's own token:  a + 1 tokens emitted

Proposers (speculative_method): `ngram` (prompt lookup: CPU only), `eagle` (a one-layer head
on the target's hidden states), `mtp` (the model's own multi-token-prediction layer, DeepSeek
V3), `draft_model` (a smaller model of the catalogue, speculative_model). Acceptance is a
per-position profile: spec_acceptance[i] = P(draft i + 1 accepted | drafts before it accepted),
the last value repeating; unset, the method's default below, from published measurements.
"""

from __future__ import annotations

import numpy as np

from sim.engines.versions import version_tuple
from sim.errors import UserError

METHODS = ("none", "ngram", "draft_model", "eagle", "mtp")
KNOBS = ("speculative_method", "num_speculative_tokens", "spec_acceptance", "speculative_model")

# Default acceptance per draft position (conditional on the drafts before it), by method.
#   mtp    DeepSeek-V3 technical report (arXiv:2412.19437, section 5.4.3): the second token
#          predicted by MTP is accepted 85-90% of the time; 0.85, the low end.
#   eagle  EAGLE (arXiv:2401.15077): acceptance of about 0.7-0.8 per draft position on
#          MT-bench with chain drafts; 0.75.
#   draft_model  Leviathan et al. (arXiv:2211.17192): alpha 0.5-0.9 across draft/target
#          pairs and tasks; 0.6 for a small same-family draft on chat.
#   ngram  prompt lookup accepts little on open-ended chat (much more on summarisation or
#          code edits, where the answer copies the prompt); 0.3, set it for your traffic.
DEFAULT_ACCEPTANCE = {"ngram": 0.3, "draft_model": 0.6, "eagle": 0.75, "mtp": 0.85}
DEFAULT_TOKENS = {"ngram": 3, "draft_model": 3, "eagle": 3, "mtp": 1}
SPEC_ON_BY_DEFAULT = (0, 33)  # vLLM: on by default with MTP heads (PR #31998, Jan 2026)


def defaults(engine: str, rule_set: str, model) -> dict[str, tuple[object, str]]:
    """{knob: (value, rule)} before the user's arguments."""
    off = {
        "speculative_method": ("none", f"{engine} {rule_set}: no speculative_config"),
        "num_speculative_tokens": (0, "no speculative decoding"),
        "spec_acceptance": ((), "no speculative decoding"),
        "speculative_model": ("", "no draft model"),
    }
    if engine != "vllm" or version_tuple(rule_set) < SPEC_ON_BY_DEFAULT or not model.mtp_layers:
        return off
    why = (
        f"vllm {rule_set}: speculative decoding on by default for models with an MTP head "
        f"({model.name} has {model.mtp_layers}; PR #31998)"
    )
    return off | {
        "speculative_method": ("mtp", why),
        "num_speculative_tokens": (model.mtp_layers, f"{why}: one draft per MTP layer"),
        "spec_acceptance": ((DEFAULT_ACCEPTANCE["mtp"],), ACCEPTANCE_SOURCE["mtp"]),
    }


ACCEPTANCE_SOURCE = {
    "mtp": "DeepSeek-V3 report: 85-90% of MTP drafts accepted (low end)",
    "eagle": "EAGLE paper: about 0.7-0.8 per draft position on MT-bench",
    "draft_model": "Leviathan et al.: alpha 0.5-0.9 across pairs; 0.6",
    "ngram": "prompt lookup on chat: 0.3 (workload-dependent: set spec_acceptance)",
}


def parse_acceptance(key: str, value) -> tuple[float, ...]:
    """engine_args.spec_acceptance: one probability, or a list of them per draft position."""
    items = value if isinstance(value, (list, tuple)) else [value]
    try:
        probs = tuple(float(x) for x in items)
    except (TypeError, ValueError):
        raise UserError(
            f"engine_args.{key}={value!r}: expected a probability or a list of them"
        ) from None
    if not probs or not all(0.0 <= p <= 1.0 for p in probs):
        raise UserError(f"engine_args.{key}={value!r}: each value must be in [0, 1]")
    return probs


def complete(values: dict, rules: dict, overrides: dict) -> None:
    """Fill what the user left unset once a method is chosen: its token count and profile."""
    method = values["speculative_method"]
    if method not in METHODS:
        raise UserError(f"speculative_method={method!r}: choose one of {', '.join(METHODS)}")
    if method == "none":
        values["num_speculative_tokens"], values["spec_acceptance"] = 0, ()
        return
    if "num_speculative_tokens" not in overrides and not values["num_speculative_tokens"]:
        values["num_speculative_tokens"] = DEFAULT_TOKENS[method]
        rules["num_speculative_tokens"] = f"{method}: {DEFAULT_TOKENS[method]} drafts a step"
    if "spec_acceptance" not in overrides and not values["spec_acceptance"]:
        values["spec_acceptance"] = (DEFAULT_ACCEPTANCE[method],)
        rules["spec_acceptance"] = ACCEPTANCE_SOURCE[method]


def check(settings, model, catalogue_has) -> None:
    """What vLLM refuses at start-up."""
    method, k = settings.speculative_method, settings.num_speculative_tokens
    if method == "none":
        return
    if settings.scheduler != "vllm_v1":
        raise UserError(
            f"speculative_method={method}: speculative decoding is modelled for vLLM's V1 engine "
            f"only, not {settings.engine}@{settings.version}"
        )
    if k < 1:
        raise UserError(f"num_speculative_tokens={k}: must be >= 1 with {method}")
    if method == "mtp" and not model.mtp_layers:
        raise UserError(
            f"speculative_method=mtp: {model.name} has no multi-token-prediction layer; "
            "use eagle, draft_model or ngram"
        )
    if method == "draft_model" and not catalogue_has(settings.speculative_model):
        raise UserError(
            f"speculative_model={settings.speculative_model!r}: speculative_method=draft_model "
            "needs a draft model from the catalogue (engine_args.speculative_model=NAME)"
        )


def drafts_per_step(settings) -> int:
    """The drafts a decoding request verifies per step: 0 unless a method is on. (An upgrade
    study mixes two versions' settings, so any combination of the four can meet here.)"""
    on = settings.speculative_method in DEFAULT_ACCEPTANCE
    return settings.num_speculative_tokens if on else 0


def profile(settings) -> np.ndarray:
    """P(draft i accepted | drafts before it accepted), i = 1..k (unset: the method's
    default)."""
    k = drafts_per_step(settings)
    given = settings.spec_acceptance or (DEFAULT_ACCEPTANCE.get(settings.speculative_method, 0),)
    return np.array([given[min(i, len(given) - 1)] for i in range(k)], dtype=np.float64)


def accepted(rng: np.random.Generator, probs: np.ndarray, drafts: list[int]) -> list[int]:
    """Drafts accepted per row (row r proposed drafts[r]): the leading run of successes of
    one uniform draw per proposed draft, drawn row by row (deterministic for a seed)."""
    out = []
    for d in drafts:
        u = rng.random(d)
        miss = np.flatnonzero(u >= probs[:d])
        out.append(int(miss[0]) if len(miss) else d)
    return out
