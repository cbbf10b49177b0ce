"""The likely causes of a large error: the facts of a case and of its simulation that most
plausibly explain it, as the report's worst-cases table states them."""

from __future__ import annotations

from sim.scenarios.validate.cases import Case
from sim.scenarios.validate.runs import Facts

# Data-quality flags an importer may set on a case, and what each means.
FLAG_MEANINGS = {
    "prefill_above_peak": "the measured rate needs more prefill compute than the GPUs have: "
    "cached prompt prefixes the source does not record",
    "decode_below_floor": "the measured TPOT is below the time to read the sequences' KV and the "
    "weights they touch once: fewer requests ran at a time than the concurrency",
}


def likely_causes(case: Case, facts: Facts | None, metric: str, error_pct: float) -> str:
    """The facts of this case that most plausibly explain a large error (`facts` None: a
    result that carries none, only the case's own marks)."""
    why = [FLAG_MEANINGS.get(flag, flag) for flag in case.flags]
    kind = case.slices["workload"]
    if error_pct == -100.0:
        why.append(f"the simulation's {metric} is 0 (nothing completed in its window?)")
    if "ttft" in metric and kind == "closed_loop":
        why.append(
            "closed-loop TTFT turns on how the clients' prompts group into prefill steps "
            "(all at once or one at a time), which the source does not record"
        )
    if facts is None:
        return "; ".join(why) or "no facts of the simulation recorded"
    if not facts.calibrated:
        why.append(f"no measured kernel tables for {case.data.get('hardware')}: roofline prior")
    # elementwise kernels are small beside GEMMs and attention: listed last
    prior = sorted(
        (k for k, v in facts.priced_with.items() if str(v).startswith("prior")),
        key=lambda k: (k == "elementwise", k),
    )
    if prior and facts.calibrated:
        why.append(f"{', '.join(prior)} priced by the roofline prior (no measured table)")
    if facts.dtype in ("fp4", "int4"):
        why.append(f"{facts.dtype} weights: MoE/GEMM kernels of that format are sparsely measured")
    if facts.rule_set and facts.rule_set != facts.version:
        why.append(f"engine rules of {facts.rule_set} used for {facts.version}")
    if facts.moe:
        why.append("MoE: expert load imbalance and the fused-MoE kernel choice are not modelled")
    if "ttft" in metric and (facts.concurrency or 0) >= 64:
        why.append("TTFT at high concurrency is mostly queueing: step-time errors compound")
    if facts.preemptions:
        why.append(f"{facts.preemptions} preemptions in the simulation (KV pressure)")
    if not why:
        why.append("step time " + ("over" if error_pct > 0 else "under") + "-estimated")
    return "; ".join(why)
