"""The paged KV block pool, in vLLM V1's vocabulary.

Blocks hold `block_size` tokens. A full block may carry a `block_hash` (chained over its
prefix) and then sits in `cached` so later requests with the same prefix can reuse it.
Free blocks (ref_cnt == 0) wait in `free_queue` in eviction order: the head is evicted first.
A cached free block stays findable until it is popped for reuse. Block 0 is the null block,
never handed out, as in vLLM.

The queue starts as every block in id order, and a freed block joins its tail, so the blocks
never handed out are always its head, in id order: they are not built until handed out (a
pool of 100,000 blocks costs nothing until used), and `free_queue` holds the freed ones behind
them (`free_queue` builds the whole queue, for checks and tests).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from sim.kv.offload import OffloadTiers


@dataclass(slots=True, eq=False)
class Block:
    block_id: int
    ref_cnt: int = 0
    block_hash: int | None = None


class BlockPool:
    def __init__(self, num_blocks: int, lower: OffloadTiers | None = None):
        if num_blocks < 2:
            raise ValueError("a block pool needs the null block and at least one more")
        self.num_blocks = num_blocks
        self.blocks = [Block(0)]  # every block handed out so far, by id (they go out in order)
        self.null_block = self.blocks[0]
        # freed blocks in eviction order, all behind the never-used ones
        self._freed: OrderedDict[int, Block] = OrderedDict()
        # hash -> {block_id: block}: two requests may compute the same block concurrently.
        self.cached: dict[int, dict[int, Block]] = {}
        self.lower = lower  # the offload tiers evicted content moves to (None: it vanishes)

    @property
    def num_usable_blocks(self) -> int:
        return self.num_blocks - 1

    @property
    def num_free_blocks(self) -> int:
        return self.num_blocks - len(self.blocks) + len(self._freed)

    @property
    def free_queue(self) -> OrderedDict[int, Block]:
        """The whole free queue, block id -> block, head first (every block built)."""
        start = len(self.blocks)
        if start < self.num_blocks:
            fresh = [Block(i) for i in range(start, self.num_blocks)]
            self.blocks.extend(fresh)
            queue = OrderedDict((b.block_id, b) for b in fresh)
            queue.update(self._freed)
            self._freed = queue
        return self._freed

    @property
    def num_used_blocks(self) -> int:
        return self.num_usable_blocks - self.num_free_blocks

    def get_cached_block(self, block_hash: int) -> Block | None:
        same = self.cached.get(block_hash)
        return next(iter(same.values())) if same else None

    def get_new_blocks(self, n: int) -> list[Block]:
        """Pop `n` blocks from the head of the free queue, evicting their cached hashes."""
        out = self.take(n)
        if out is None:
            raise ValueError(f"asked for {n} blocks, {self.num_free_blocks} free")
        return out

    def take(self, n: int) -> list[Block] | None:
        """get_new_blocks, or None (nothing taken) when fewer than `n` blocks are free."""
        blocks = self.blocks
        start = len(blocks)
        fresh = self.num_blocks - start  # never used: the head of the queue
        freed = self._freed
        if n > fresh + len(freed):
            return None
        if n <= fresh:
            out = [Block(i, 1) for i in range(start, start + n)]
            blocks.extend(out)
            return out
        out = [Block(i, 1) for i in range(start, self.num_blocks)]
        blocks.extend(out)
        pop = freed.popitem
        for _ in range(n - fresh):
            block = pop(last=False)[1]
            if block.block_hash is not None:
                self._evict(block)
            block.ref_cnt = 1
            out.append(block)
        return out

    def touch(self, blocks: list[Block]) -> None:
        """A prefix hit: take a reference, pulling the block out of the free queue if idle."""
        for block in blocks:
            if block.ref_cnt == 0:
                del self._freed[block.block_id]
            block.ref_cnt += 1

    def free_blocks(self, ordered: list[Block]) -> None:
        """Drop a reference; idle blocks join the queue's tail in the order given."""
        queue = self._freed
        for block in ordered:
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                queue[block.block_id] = block

    def cache_full_block(self, block: Block, block_hash: int) -> None:
        block.block_hash = block_hash
        self.cached.setdefault(block_hash, {})[block.block_id] = block
        if self.lower is not None:
            self.lower.drop(block_hash)

    def _evict(self, block: Block) -> None:
        if block.block_hash is None:
            return
        same = self.cached[block.block_hash]
        del same[block.block_id]
        if not same:
            del self.cached[block.block_hash]
            if self.lower is not None:  # the last GPU copy: the content moves down a tier
                self.lower.store(block.block_hash)
        block.block_hash = None

    def check_invariants(self) -> None:
        assert self.null_block.block_id not in self._freed
        assert all(block_id < len(self.blocks) for block_id in self._freed)
        for i, block in enumerate(self.blocks):
            assert block.block_id == i, block
        for block in self.blocks[1:]:
            assert block.ref_cnt >= 0, block
            assert (block.ref_cnt == 0) == (block.block_id in self._freed), block
            if block.block_hash is not None:
                assert self.cached[block.block_hash][block.block_id] is block
        for block_hash, same in self.cached.items():
            assert same, block_hash
            for block in same.values():
                assert block.block_hash == block_hash
        in_use = sum(1 for block in self.blocks[1:] if block.ref_cnt > 0)
        assert in_use + self.num_free_blocks == self.num_usable_blocks
