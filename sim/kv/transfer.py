"""The KV cache a prefill pool sends to a decode pool: its bytes, the link, and the time it takes.

Links come from hardware/links.yaml (disagg.link=NAME): a rate per GPU and direction and a
fixed cost per transfer. Each GPU of a replica holds a shard of a request's KV cache (its KV
heads; the whole latent under MLA) and sends it over its own NIC, all at once:

    tokens sent   = the prompt less what the decode replica's prefix cache already holds,
                    in whole blocks of the prefill pool (the connector moves blocks)
    per GPU       = tokens x KV bytes per token per GPU, on each side: a prefill GPU sends what
                    the decode GPUs need divided over the prefill GPUs, a decode GPU receives
                    its own shard; the slower side sets the time
    time          = latency_s + max(send per prefill GPU, receive per decode GPU) / bytes_per_s

A link shared by the replica's GPUs (shared_by_gpus) carries every shard one after another.

Layer by layer (kv_transfer_layerwise): layer l's KV leaves while layer l+1 computes, so the
transfer can start one layer into the step that finishes the prompt and ends no sooner than
one layer's share of that step's KV after it (a two-stage pipeline over the layers):

    step     |L1|L2|L3| ... |Ln|
    transfer    |L1|L2| ... |Ln-1|Ln|      end = max(start + all bytes / rate,
                                                     step end + last layer's bytes / rate)
Otherwise (vLLM's NixlConnector: the decode side pulls the blocks once the prefill is done)
it starts when the prefill step ends and the decode replica has its blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.kv.memory import kv_bytes_per_token_per_gpu
from sim.specs.links import Link
from sim.specs.model import ModelSpec


@dataclass(frozen=True, slots=True)
class TransferPlan:
    """What one request's KV transfer costs, between one prefill and one decode replica."""

    tokens: int  # tokens whose KV moves (whole blocks of the prefill pool)
    bytes_total: int  # what the decode replica's GPUs receive together
    bytes_per_prefill_gpu: float
    bytes_per_decode_gpu: int
    wire_s: float  # the slower side's bytes / rate
    latency_s: float  # the link's fixed cost (0 when nothing moves)

    @property
    def seconds(self) -> float:
        return self.latency_s + self.wire_s


@dataclass(frozen=True, slots=True)
class Pair:
    """The per-token figures of a prefill pool and a decode pool, fixed for a run."""

    model: ModelSpec
    kv_cache_dtype: str
    prefill_tp: int
    decode_tp: int
    block_size: int  # the prefill pool's: the connector moves its blocks
    link: Link

    def plan(self, num_tokens: int) -> TransferPlan:
        """The transfer of `num_tokens` tokens' KV (rounded up to whole blocks)."""
        if num_tokens <= 0:
            return TransferPlan(0, 0, 0.0, 0, 0.0, 0.0)
        tokens = -(-num_tokens // self.block_size) * self.block_size
        per_decode = tokens * kv_bytes_per_token_per_gpu(
            self.model, self.kv_cache_dtype, self.decode_tp
        )
        total = per_decode * self.decode_tp
        per_prefill = total / self.prefill_tp
        busiest = float(total) if self.link.shared_by_gpus else max(per_prefill, per_decode)
        wire = busiest / self.link.bytes_per_s
        return TransferPlan(tokens, total, per_prefill, per_decode, wire, self.link.latency_s)


def transfer_window(
    plan: TransferPlan,
    link_free_s: float,
    ready_s: float,
    step_start_s: float,
    step_end_s: float,
    last_step_share: float,
    num_layers: int,
    layerwise: bool,
) -> tuple[float, float]:
    """(start, end) of one transfer: its link is free from `link_free_s`, the decode blocks
    exist from `ready_s`, and the step that finished the prompt ran from step_start_s to
    step_end_s, computing `last_step_share` of the tokens sent. Layer by layer it may start
    one layer into that step and ends no sooner than the last layer's share of the step's KV
    after it; otherwise it starts when the step has ended. The link is busy from start to
    end - latency."""
    if not plan.tokens:
        return max(link_free_s, ready_s, step_end_s), max(link_free_s, ready_s, step_end_s)
    if layerwise:
        layer_s = (step_end_s - step_start_s) / num_layers
        start = max(link_free_s, ready_s, step_start_s + layer_s)
        last_layer = plan.wire_s * last_step_share / num_layers
        wire_end = max(start + plan.wire_s, step_end_s + last_layer)
    else:
        start = max(link_free_s, ready_s, step_end_s)
        wire_end = start + plan.wire_s
    return start, wire_end + plan.latency_s
