"""The paged KV block pool, in vLLM V1's vocabulary, its blocks named by id.

Blocks hold `block_size` tokens; a request's block table is a list of block ids (ints). Per
block the pool keeps its reference count (`ref`, a list indexed by id) and, for a full block
whose content is cached, its `block_hash` (chained over its prefix): `hash_of` (id -> hash)
and `cached` (hash -> the ids holding it: two requests may compute the same block at once)
let later requests with the same prefix reuse it. Free blocks (ref == 0) wait in the free
queue in eviction order: the head is evicted first. A cached free block stays findable until
it is popped for reuse. Block 0 is the null block, never handed out, as in vLLM.

The queue starts as every block in id order, and a freed block joins its tail, so the blocks
never handed out are always its head, in id order (ids `next_fresh` and up, nothing stored
for them); the freed ones follow in `_queue`, a list read from a head index, so that taking
or freeing a request's blocks is a slice and a loop over ints, not an object per block.

    free queue   [ never used: next_fresh ... num_blocks - 1 ][ _queue[_head:] ]
                   head (evicted first)                                  tail (freed last)

A free block taken back by a prefix hit (touch) leaves its entry behind, stale; `_stale`
counts each block's stale entries, which come before its live one (if it was freed again)
and are skipped when the head reaches them. `free_queue` lists the live queue, head first,
for checks and tests.
"""

from __future__ import annotations

from collections import OrderedDict

from sim.kv.offload import OffloadTiers

COMPACT_AT = 4096  # the consumed head of _queue is dropped once this long and half of it


class BlockPool:
    def __init__(self, num_blocks: int, lower: OffloadTiers | None = None):
        if num_blocks < 2:
            raise ValueError("a block pool needs the null block and at least one more")
        self.num_blocks = num_blocks
        self.null_block = 0
        self.ref = [0] * num_blocks  # references per block id
        self.next_fresh = 1  # blocks from here on were never handed out (the queue's head)
        self._queue: list[int] = []  # freed blocks in eviction order, from _head on
        self._head = 0
        self._queued = 0  # live entries in _queue
        self._stale: dict[int, int] = {}  # block id -> its stale entries in _queue
        self.hash_of: dict[int, int] = {}  # block id -> its block hash, while cached
        self.cached: dict[int, dict[int, None]] = {}  # hash -> ids holding it, in order
        self.lower = lower  # the offload tiers evicted content moves to (None: it vanishes)

    @property
    def num_usable_blocks(self) -> int:
        return self.num_blocks - 1

    @property
    def num_free_blocks(self) -> int:
        return self.num_blocks - self.next_fresh + self._queued

    @property
    def num_used_blocks(self) -> int:
        return self.num_usable_blocks - self.num_free_blocks

    @property
    def free_queue(self) -> OrderedDict[int, int | None]:
        """The whole free queue, block id -> its block hash (None: not cached), head first."""
        stale = dict(self._stale)
        live = []
        for block in self._queue[self._head :]:
            if stale.get(block):
                stale[block] -= 1
            else:
                live.append(block)
        ids = [*range(self.next_fresh, self.num_blocks), *live]
        return OrderedDict((b, self.hash_of.get(b)) for b in ids)

    def num_idle(self, blocks: list[int]) -> int:
        """How many of `blocks` are free (prefix hits a request would take off the queue)."""
        ref = self.ref
        return sum(1 for b in blocks if not ref[b])

    def get_cached_block(self, block_hash: int) -> int | None:
        same = self.cached.get(block_hash)
        return next(iter(same)) if same else None

    def get_new_blocks(self, n: int) -> list[int]:
        """Pop `n` blocks from the head of the free queue, evicting their cached hashes."""
        out = self.take(n)
        if out is None:
            raise ValueError(f"asked for {n} blocks, {self.num_free_blocks} free")
        return out

    def take(self, n: int) -> list[int] | None:
        """get_new_blocks, or None (nothing taken) when fewer than `n` blocks are free."""
        start = self.next_fresh
        fresh = self.num_blocks - start  # never used: the head of the queue
        if n > fresh + self._queued:
            return None
        ref = self.ref
        if n <= fresh:
            self.next_fresh = start + n
            ref[start : start + n] = [1] * n
            return list(range(start, start + n))
        out = list(range(start, self.num_blocks))
        ref[start:] = [1] * fresh
        self.next_fresh = self.num_blocks
        k = n - fresh
        queue, head = self._queue, self._head
        if not self._stale:
            popped = queue[head : head + k]
            head += k
        else:  # skip the stale entries
            popped = []
            stale = self._stale
            while len(popped) < k:
                block = queue[head]
                head += 1
                left = stale.get(block)
                if left:
                    if left == 1:
                        del stale[block]
                    else:
                        stale[block] = left - 1
                else:
                    popped.append(block)
        self._queued -= k
        if head >= COMPACT_AT and 2 * head >= len(queue):
            del queue[:head]
            head = 0
        self._head = head
        if self.hash_of:
            hash_of = self.hash_of
            for block in [b for b in popped if b in hash_of]:
                self._evict(block)
        for block in popped:
            ref[block] = 1
        out += popped
        return out

    def touch(self, blocks: list[int]) -> None:
        """A prefix hit: take a reference, pulling the block out of the free queue if idle."""
        ref, stale = self.ref, self._stale
        for block in blocks:
            if not ref[block]:  # its queue entry stays behind, stale
                stale[block] = stale.get(block, 0) + 1
                self._queued -= 1
            ref[block] += 1

    def free_blocks(self, ordered: list[int]) -> None:
        """Drop a reference; idle blocks join the queue's tail in the order given."""
        ref = self.ref
        idle = []
        for block in ordered:
            left = ref[block] - 1
            ref[block] = left
            if not left:
                idle.append(block)
        self._queue += idle
        self._queued += len(idle)

    def cache_full_block(self, block: int, block_hash: int) -> None:
        self.hash_of[block] = block_hash
        self.cached.setdefault(block_hash, {})[block] = None
        if self.lower is not None:
            self.lower.drop(block_hash)

    def _evict(self, block: int) -> None:
        block_hash = self.hash_of.pop(block, None)
        if block_hash is None:
            return
        same = self.cached[block_hash]
        del same[block]
        if not same:
            del self.cached[block_hash]
            if self.lower is not None:  # the last GPU copy: the content moves down a tier
                self.lower.store(block_hash)

    def check_invariants(self) -> None:
        queue = self.free_queue
        assert self.null_block not in queue
        assert len(queue) == self.num_free_blocks
        assert all(0 < b < self.num_blocks for b in queue)
        assert all(self.ref[b] == 0 for b in range(self.next_fresh, self.num_blocks))
        assert self.ref[self.null_block] == 0
        for block in range(1, self.next_fresh):
            assert self.ref[block] >= 0, block
            assert (self.ref[block] == 0) == (block in queue), block
        for block, block_hash in self.hash_of.items():
            assert block in self.cached[block_hash], block
        for block_hash, same in self.cached.items():
            assert same, block_hash
            for block in same:
                assert self.hash_of[block] == block_hash
        in_use = sum(1 for b in range(1, self.next_fresh) if self.ref[b] > 0)
        assert in_use + self.num_free_blocks == self.num_usable_blocks
