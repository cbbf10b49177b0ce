"""KV offload tiers under the GPU block pool: host memory (CPU), then optionally disk.

    GPU pool --evict--> CPU tier (LRU, kv_offload_cpu_bytes) --overflow--> disk tier --> gone
        ^                    |                                                |
        +---- a prefix hit: loaded back into fresh GPU blocks (PCIe / disk bandwidth) ---+

A cached block the GPU pool reuses is not lost: its content (by hash) moves down a tier. A
prefix lookup that runs out of GPU hits continues into the tiers; those blocks count as
computed, get new GPU blocks, leave their tier (a block's content lives in exactly one tier,
or none), and the step that admits them pays the transfer: bytes over the host link (the
catalogue's PCIe bandwidth) or the disk's read bandwidth, before its compute (not overlapped:
the engine's connector loads them before the request runs). Modelled for vLLM V1 (its KV
offloading connector).
"""

from __future__ import annotations

from collections import OrderedDict


class OffloadTiers:
    def __init__(
        self,
        cpu_blocks: int,
        disk_blocks: int,
        bytes_per_block: int,
        cpu_bytes_per_s: float,
        disk_bytes_per_s: float,
    ):
        self.capacity = {"cpu": cpu_blocks, "disk": disk_blocks}
        self.tiers: dict[str, OrderedDict[int, None]] = {
            "cpu": OrderedDict(),
            "disk": OrderedDict(),
        }
        self.bytes_per_block = bytes_per_block
        self.bytes_per_s = {"cpu": cpu_bytes_per_s, "disk": disk_bytes_per_s}
        self.pending_load_s = 0.0  # transfers of the step being planned
        self.loaded_blocks = {"cpu": 0, "disk": 0}  # over the run
        self.stored_blocks = 0  # blocks moved down from the GPU pool over the run

    def where(self, block_hash: int) -> str | None:
        for name, tier in self.tiers.items():
            if block_hash in tier:
                return name
        return None

    def store(self, block_hash: int) -> None:
        """The GPU pool evicted this content: keep it in the CPU tier (the most recent), the
        least recent overflowing to disk, then out."""
        self.stored_blocks += 1
        self.drop(block_hash)  # a content lives in one tier: the older copy below goes
        self._put("cpu", block_hash)

    def _put(self, name: str, block_hash: int) -> None:
        if not self.capacity[name]:
            if name == "cpu":
                self._put("disk", block_hash)
            return
        tier = self.tiers[name]
        tier[block_hash] = None
        tier.move_to_end(block_hash)
        if len(tier) > self.capacity[name]:
            old, _ = tier.popitem(last=False)
            if name == "cpu":
                self._put("disk", old)

    def load(self, block_hash: int) -> None:
        """A prefix hit in a tier: the content leaves it for a fresh GPU block."""
        name = self.where(block_hash)
        del self.tiers[name][block_hash]
        self.loaded_blocks[name] += 1
        self.pending_load_s += self.bytes_per_block / self.bytes_per_s[name]

    def drop(self, block_hash: int) -> None:
        """The GPU pool holds this content again (computed anew): no copy below it."""
        for tier in self.tiers.values():
            tier.pop(block_hash, None)

    def take_load_s(self) -> float:
        out, self.pending_load_s = self.pending_load_s, 0.0
        return out

    def check_invariants(self, gpu_hashes) -> None:
        cpu, disk = self.tiers["cpu"], self.tiers["disk"]
        assert len(cpu) <= self.capacity["cpu"] and len(disk) <= self.capacity["disk"]
        assert not cpu.keys() & disk.keys(), "content in two tiers"
        assert not (cpu.keys() | disk.keys()) & set(gpu_hashes), "content in GPU and below"

    def record(self) -> dict:
        return {
            "cpu_blocks": self.capacity["cpu"],
            "disk_blocks": self.capacity["disk"],
            "blocks_offloaded": self.stored_blocks,
            "blocks_loaded_from_cpu": self.loaded_blocks["cpu"],
            "blocks_loaded_from_disk": self.loaded_blocks["disk"],
        }


def tiers_for(settings, bytes_per_block: int, host_bytes_per_s: float) -> OffloadTiers | None:
    cpu, disk = settings.kv_offload_cpu_bytes, settings.kv_offload_disk_bytes
    if not (cpu or disk):
        return None
    return OffloadTiers(
        cpu // bytes_per_block,
        disk // bytes_per_block,
        bytes_per_block,
        host_bytes_per_s,
        settings.kv_offload_disk_bytes_per_s,
    )
