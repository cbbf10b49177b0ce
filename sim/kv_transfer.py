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

import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from sim.errors import UserError, shown
from sim.hardware import Hardware
from sim.memory import kv_bytes_per_token_per_gpu
from sim.model import ModelSpec
from sim.paths import HARDWARE_DIR

LINKS_FILE = "links.yaml"


@dataclass(frozen=True, slots=True)
class Link:
    name: str
    display_name: str
    bytes_per_s: float  # per GPU and direction (per replica when shared_by_gpus)
    latency_s: float  # once per transfer
    shared_by_gpus: bool = False

    def record(self) -> dict:
        return {
            "name": self.name,
            "display_name": self.display_name,
            "bytes_per_s": self.bytes_per_s,
            "latency_s": self.latency_s,
            "shared_by_gpus": self.shared_by_gpus,
        }


def link_names(root: Path = HARDWARE_DIR) -> list[str]:
    return sorted(_catalogue(root))


def _catalogue(root: Path) -> dict:
    path = root / LINKS_FILE
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
        raise UserError(
            f"{path}: cannot read the link catalogue ({exc.__class__.__name__})"
        ) from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise UserError(f"{path}: expected a mapping of link name -> its fields")
    return data


def load_link(
    name: str,
    prefill: Hardware,
    decode: Hardware,
    bytes_per_s: float | None = None,
    latency_s: float | None = None,
    root: Path = HARDWARE_DIR,
) -> Link:
    """The catalogue's link `name` between the two pools' GPUs, with the rate or latency
    replaced where given. nvlink takes the GPUs' own peer link (both pools in one domain)."""
    links = _catalogue(root)
    if name not in links:
        raise UserError(
            f"disagg.link={name!r} is not in hardware/{LINKS_FILE}; choose one of: "
            f"{', '.join(sorted(links))} (or set disagg.link_bytes_per_s)"
        )
    entry = links[name]
    rate = entry.get("bytes_per_s")
    if rate is None and bytes_per_s is None:
        if prefill.nvlink_bytes_per_s <= 0 or decode.nvlink_bytes_per_s <= 0:
            lacking = prefill if prefill.nvlink_bytes_per_s <= 0 else decode
            raise UserError(
                f"disagg.link={name}: {lacking.name} "
                "has no NVLink; use a network link (infiniband, ethernet) or set "
                "disagg.link_bytes_per_s"
            )
        if prefill.name != decode.name:
            raise UserError(
                f"disagg.link={name}: the pools' GPUs ({prefill.name}, {decode.name}) are not in "
                "one NVLink domain; use a network link (infiniband, ethernet)"
            )
        rate = prefill.nvlink_bytes_per_s
    rate = bytes_per_s if bytes_per_s is not None else rate
    latency = latency_s if latency_s is not None else entry.get("latency_s", 0.0)
    for key, value in (("bytes_per_s", rate), ("latency_s", latency)):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or value < 0 or (key == "bytes_per_s" and not value):
            raise UserError(
                f"hardware/{LINKS_FILE}: {name}.{key} must be a finite number "
                f"{'> 0' if key == 'bytes_per_s' else '>= 0'}, got {shown(value)}"
            )
    return Link(
        name,
        str(entry.get("display_name", name)),
        float(rate),
        float(latency),
        bool(entry.get("shared_by_gpus", False)),
    )


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


KNOBS = ("kv_transfer_layerwise",)


def defaults() -> dict[str, tuple[object, str]]:
    """{knob: (value, rule)} before the user's arguments."""
    return {
        "kv_transfer_layerwise": (
            False,
            "NixlConnector (vLLM's disaggregated-serving connector): the decode replica pulls "
            "the blocks once the prefill is done",
        )
    }
