"""vLLM V0 multi-step scheduling (--num-scheduler-steps): the releases that have it, and what
they refuse with it.

PR #7000 added it (0.5.5); PR #22138 removed it with the rest of V0's multi-step code (0.10.1).
Before 0.6.2 engine/arg_utils.py create_engine_config refuses chunked prefill with it (issue
#8274, on 0.6.0); PR #8378 (0.6.2) runs prefills through the chunked-prefill path. From 0.8
to 0.10.0 asking for it falls back to the V0 engine (sim/engines/v1_oracle.py v0_fallback).
"""

from __future__ import annotations

from sim.engines.settings import user_value
from sim.engines.versions import version_tuple


def steps_asked(overrides: dict | None) -> int:
    """The user's num_scheduler_steps (1 when not given or not a number: _check says so)."""
    value = user_value(overrides, "num_scheduler_steps", {})
    try:
        return int(str(value)) if value is not None else 1
    except ValueError:
        return 1


MULTI_STEP = ((0, 5, 5), (0, 10, 1))  # --num-scheduler-steps: PR #7000 to PR #22138
MULTI_STEP_CHUNKED_FROM = (0, 6, 2)  # multi-step with chunked prefill (PR #8378)


def multi_step_error(
    engine: str, version: str, scheduler: str, steps: int, chunked: bool
) -> str | None:
    """Why `engine` `version` refuses num_scheduler_steps=`steps`, or None."""
    if steps <= 1:
        return None
    if engine != "vllm":
        return (
            f"num_scheduler_steps={steps}: multi-step scheduling is a vLLM V0 setting, not "
            f"{engine}'s; use num_scheduler_steps=1"
        )
    v = version_tuple(version)
    first, gone = MULTI_STEP
    fix = "use num_scheduler_steps=1"
    if v < first:
        return (
            f"num_scheduler_steps={steps}: vLLM {version} has no multi-step scheduling (it "
            f"arrived in 0.5.5, PR #7000); {fix} or engine=vllm@0.5.5 .. 0.10.0"
        )
    if v >= gone or scheduler != "vllm_v0":
        return (
            f"num_scheduler_steps={steps}: multi-step scheduling is a V0 engine setting, "
            f"removed in 0.10.1 (PR #22138); vLLM {version} runs V1; {fix} or "
            "engine=vllm@0.5.5 .. 0.10.0"
        )
    if chunked and v < MULTI_STEP_CHUNKED_FROM:
        return (
            f"num_scheduler_steps={steps} with enable_chunked_prefill: vLLM {version} refuses "
            "both together (multi-step chunked prefill arrived in 0.6.2, PR #8378); turn "
            "chunked prefill off, or use engine=vllm@0.6.2 or later"
        )
    return None
