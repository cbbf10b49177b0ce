"""scenario=long_context's tensor-parallel degree: the one given, or, where it is only the
scenario file's default (long_context.adapt_tp) and the model's heads refuse it, a valid one:
the smallest valid degree whose memory plan holds the sequence, else the largest valid one up
to a node's 8 GPUs. The choice and its reason go into the output (brief, report, summary).
A parallel.tp the user gave is never replaced: an invalid one is refused, naming the valid
degrees (ModelSpec.tp_error)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.config import SimConfig
from sim.scenarios.long_context.arithmetic import NODE_GPUS
from sim.scenarios.long_context.runs import Context


@dataclass(frozen=True, slots=True)
class TpChoice:
    given: int  # the config's parallel.tp
    chosen: int  # the degree the study runs at
    why: str  # "" where the given degree stands

    @property
    def summary(self) -> dict:
        return {"given_tp": self.given, "chosen_tp": self.chosen, "why": self.why}


def choose_tp(cfg: SimConfig) -> tuple[SimConfig, TpChoice]:
    """(the config at the degree the study runs at, the choice)."""
    tp = cfg.parallel.tp
    ctx = Context.of(cfg)
    refused = ctx.model.tp_error(tp)
    if not cfg.long_context.adapt_tp or refused is None:
        return cfg, TpChoice(tp, tp, "")
    valid = ctx.model.tp_degrees(NODE_GPUS)
    fits = [t for t in valid if ctx.fit(t, cfg.parallel.pp).fits]
    if fits:
        chosen = fits[0]
        how = f"the smallest valid degree whose memory plan holds the {ctx.total_tokens:,} tokens"
    else:
        chosen = valid[-1]
        how = (
            f"no valid degree up to {NODE_GPUS} holds the {ctx.total_tokens:,} tokens, so the "
            "largest"
        )
    why = (
        f"the scenario's default parallel.tp={tp} does not suit {ctx.model.name} ({refused}); "
        f"the study runs at tp={chosen}, {how} (give parallel.tp to choose)"
    )
    return replace(cfg, parallel=replace(cfg.parallel, tp=chosen)), TpChoice(tp, chosen, why)
