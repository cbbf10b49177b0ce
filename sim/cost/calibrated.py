"""A calibrated deployment's scales on a step's GPU time (sim/run/calibration.py's
decode_scale and prefill_scale), mixed into CostModel (sim/cost/step.py) and applied alike by
cost() and the fast-forward's pricing (sim/cost/run_pricing.py), so that a calibrated run is
the same step by step and fast-forwarded."""

from __future__ import annotations

from collections.abc import Callable


class DeploymentScales:
    """Mixed into CostModel, whose _token_costs it uses."""

    decode_scale: float
    prefill_scale: float
    _token_costs: Callable[[int, int], tuple]

    def calibrated(self, parts: tuple, prefill: bool, decodes: int, batch: int) -> tuple:
        """A step's (GEMMs, MoE, elementwise, LM head, all-reduce, launch) seconds with the
        deployment's scales (sim/run/calibration.py): a decode-only step's all by the decode
        scale; a step with prefill tokens splits the token-count parts at what the same step
        would cost without them (its `decodes` rows alone, at least one token's), that share
        by the decode scale, the rest by the prefill scale."""
        d, p = self.decode_scale, self.prefill_scale
        linear, moe, elementwise, lm_head, allreduce, launch = parts
        if not prefill:
            return linear * d, moe * d, elementwise * d, lm_head * d, allreduce * d, launch * d
        # (a prefill-only step's share: one token's, the weights read once)
        b_linear, b_moe, b_elementwise, _, b_allreduce = self._token_costs(max(decodes, 1), batch)
        return (
            b_linear * d + (linear - b_linear) * p,
            b_moe * d + (moe - b_moe) * p,
            b_elementwise * d + (elementwise - b_elementwise) * p,
            lm_head * d,
            b_allreduce * d + (allreduce - b_allreduce) * p,
            launch * d,
        )
