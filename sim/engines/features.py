"""vLLM V1 features beyond its scheduler's core, as engine settings: KV offloading to host
memory and disk (sim/kv/offload.py models the tiers) and how a disaggregated prefill replica
sends its KV (sim/kv/transfer.py). Each has its knobs, their defaults before the user's
arguments, and what the engine refuses at start-up; speculative decoding has a module of its
own (sim/engines/speculative.py)."""

from __future__ import annotations

from sim.errors import UserError

OFFLOAD_KNOBS = ("kv_offload_cpu_bytes", "kv_offload_disk_bytes", "kv_offload_disk_bytes_per_s")
DISK_BYTES_PER_S = 6.0e9  # an NVMe Gen4 SSD's sequential read (datasheets: 6-7 GB/s)
TRANSFER_KNOBS = ("kv_transfer_layerwise",)


def offload_defaults() -> dict[str, tuple[object, str]]:
    """{knob: (value, rule)} before the user's arguments: no offloading."""
    return {
        "kv_offload_cpu_bytes": (0, "no KV offloading (kv_offloading_size unset)"),
        "kv_offload_disk_bytes": (0, "no KV offloading to disk"),
        "kv_offload_disk_bytes_per_s": (DISK_BYTES_PER_S, "an NVMe Gen4 SSD's read bandwidth"),
    }


def check_offload(settings) -> None:
    cpu, disk = settings.kv_offload_cpu_bytes, settings.kv_offload_disk_bytes
    if cpu < 0 or disk < 0 or settings.kv_offload_disk_bytes_per_s <= 0:
        raise UserError(
            "kv_offload_cpu_bytes and kv_offload_disk_bytes must be >= 0 and "
            "kv_offload_disk_bytes_per_s > 0"
        )
    if (cpu or disk) and settings.scheduler != "vllm_v1":
        raise UserError(
            "kv_offload_cpu_bytes / kv_offload_disk_bytes: KV offloading is modelled for vLLM's "
            f"V1 engine (its offloading connector) only, not {settings.engine}@{settings.version}"
        )
    if (cpu or disk) and not settings.enable_prefix_caching:
        raise UserError(
            "KV offloading keeps evicted prefix-cache blocks: it needs enable_prefix_caching=true"
        )


def transfer_defaults() -> dict[str, tuple[object, str]]:
    """{knob: (value, rule)} before the user's arguments."""
    return {
        "kv_transfer_layerwise": (
            False,
            "NixlConnector (vLLM's disaggregated-serving connector): the decode replica pulls "
            "the blocks once the prefill is done",
        )
    }
