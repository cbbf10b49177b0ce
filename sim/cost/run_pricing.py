"""What fast-forwarded runs ask of the cost model (sim/run/fast_forward.py): decode-only steps
priced many at a time, in plain Python (decode_rows) or in one numpy call (decode_run), a
chunked step's times without building its StepCost (step_times), and a lower bound of a
decode-only step (decode_floor_s). Each gives the same bits as CostModel.cost of the same step:
the same sums in the same order."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sim.cost.attention import AttentionCost


class RunPricing:
    """Mixed into CostModel (sim/cost/step.py), whose cost(), _launch_s, _token_costs, cpu_s
    and attention it uses."""

    attention: AttentionCost
    _decode_base: dict  # batch size -> the StepCost of a decode-only step (_decode_base_of)
    _decode_floor: dict  # batch size -> decode_floor_s
    _step_parts: dict  # see step_times
    decode_ratio: Callable[[int], float]  # CostModel.decode_ratio (SGLang's compiled decode)
    calibration: tuple | None  # a calibrated deployment's scales (CostModel.calibrated)
    decode_scale: float
    prefill_scale: float
    calibrated: Callable[..., tuple]

    def step_times(
        self, pre_q: list[int], pre_c: list[int], dec_c: list[int], cpu_batch: int
    ) -> tuple[float, float, float]:
        """(gpu_s, cpu_s, total_s) of cost(pre_q, pre_c, dec_c, cpu_batch) for lists, without
        building the StepCost: the same sums in the same order (what a fast-forwarded run's
        chunked steps ask, one a step)."""
        prefill_tokens = sum(pre_q)
        key = (prefill_tokens, len(pre_q), len(dec_c), cpu_batch)
        parts = self._step_parts.get(key)
        if parts is None:  # everything but the attention, by the batch's shape
            launch, t = self._launch_s(prefill_tokens + len(dec_c), decode_only=not pre_q)
            r = 1.0 if pre_q else self.decode_ratio(len(dec_c))
            linear, moe, elementwise, lm_head, allreduce = self._token_costs(
                t, len(pre_q) + len(dec_c)
            )
            if r != 1.0:  # as cost() scales a compiled decode graph's parts
                linear, moe, elementwise = linear * r, moe * r, elementwise * r
                lm_head, allreduce, launch = lm_head * r, allreduce * r, launch * r
            if self.calibration:  # as cost() applies a calibrated deployment's scales
                linear, moe, elementwise, lm_head, allreduce, launch = self.calibrated(
                    (linear, moe, elementwise, lm_head, allreduce, launch), bool(pre_q),
                    len(dec_c), len(pre_q) + len(dec_c),
                )  # fmt: skip
            parts = self._step_parts[key] = (
                launch, linear, moe, elementwise, lm_head, allreduce, r,
                *self.cpu_s(cpu_batch, prefill_tokens),
            )  # fmt: skip
        launch, linear, moe, elementwise, lm_head, allreduce, r, serial, hidden = parts
        prefill = self.attention.prefill(pre_q, pre_c) if pre_q else 0.0
        decode = self.attention.decode_one(dec_c, bool(pre_q))
        if r != 1.0:
            decode = decode * r
        if self.calibration:
            prefill, decode = prefill * self.prefill_scale, decode * self.decode_scale
        # StepCost.gpu_s, cpu_s and total_s (no drafts, no swap: their 0.0 added likewise)
        gpu = linear + moe + prefill + decode + elementwise + allreduce + lm_head + launch + 0.0
        return gpu, serial + hidden, max(gpu, hidden) + serial + 0.0

    def decode_rows(self, contexts: list[int], steps: int):
        """(gpu_s, cpu_s, total_s) of cost([], [], contexts + k) for k = 0 .. steps - 1, as
        ([gpu_s], cpu_s, [total_s]) (cpu_s the same every step), the attention of all the
        steps looked up at once (AttentionCost.decode_rows): the same sums in the same order
        as StepCost's, so the same bits; None where a context lies beyond the tables' dense
        pages."""
        decs = self.attention.decode_rows(contexts, steps, False)
        if decs is None:
            return None
        c = self._decode_base_of(contexts)
        r = self.decode_ratio(len(contexts))
        if r != 1.0:  # cost()'s compiled decode graph: its attention scaled as there
            decs = [dec * r for dec in decs]
        if self.calibration:  # and a calibrated deployment's decode scale
            decs = [dec * self.decode_scale for dec in decs]
        base = c.linear_s + c.moe_s + c.attention_prefill_s
        e, a, lm, la = c.elementwise_s, c.allreduce_s, c.lm_head_s, c.launch_s
        hidden, serial, swap = c.cpu_hidden_s, c.cpu_serial_s, c.swap_s
        gpus = [base + dec + e + a + lm + la for dec in decs]  # (left to right: StepCost.gpu_s)
        totals = [(g if g >= hidden else hidden) + serial + swap for g in gpus]  # max(g, hidden)
        return gpus, c.cpu_s, totals

    def decode_floor_s(self, contexts: list[int]) -> float:
        """A lower bound of the total_s of a decode-only step at `contexts`, and of any later
        step's of the same batch: its sum without the attention (a float sum never falls when
        a term grows); by batch size, worked out once."""
        floor = self._decode_floor.get(len(contexts))
        if floor is None:
            c = self._decode_base_of(contexts)
            gpu = c.linear_s + c.moe_s + c.attention_prefill_s
            gpu = gpu + c.elementwise_s + c.allreduce_s + c.lm_head_s + c.launch_s
            floor = max(gpu, c.cpu_hidden_s) + c.cpu_serial_s + c.swap_s
            self._decode_floor[len(contexts)] = floor
        return floor

    def _decode_base_of(self, contexts):
        """A decode-only step's cost at these contexts, whose every part but the attention
        depends on the batch size alone (cached per batch size)."""
        batch = len(contexts)
        c = self._decode_base.get(batch)
        if c is None:
            c = self._decode_base[batch] = self.cost([], [], contexts)
        return c

    def decode_run(self, contexts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(gpu_s, cpu_s, total_s) per step of a run of decode-only steps, row k of `contexts`
        holding step k's contexts: the same sums, in the same order, as step_cost of each
        step alone (pp = 1, no swap), so a fast-forwarded run matches step by step exactly."""
        c = self._decode_base_of(contexts[0])
        decode = self.attention.decode(contexts, False)
        r = self.decode_ratio(contexts.shape[1])
        if r != 1.0:  # cost()'s compiled decode graph: its attention scaled as there
            decode = decode * r
        if self.calibration:
            decode = decode * self.decode_scale
        gpu = c.linear_s + c.moe_s + c.attention_prefill_s + decode
        gpu = gpu + c.elementwise_s + c.allreduce_s + c.lm_head_s + c.launch_s
        total = np.maximum(gpu, c.cpu_hidden_s) + c.cpu_serial_s + c.swap_s
        return gpu, np.full(len(gpu), c.cpu_s), total
