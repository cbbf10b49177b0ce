"""Per-request block tables over a BlockPool, with prefix caching (vLLM V1's KVCacheManager).

request tokens:  [ full | full | full | partial ]       block_size tokens per block
block table:     [   7  |   3  |   9  |    12   ]       block ids (ints)
                   ^ cached (hashed) once full and computed
"""

from __future__ import annotations

from sim.kv.block_pool import BlockPool
from sim.kv.memory import MemoryPlan
from sim.kv.offload import OffloadTiers
from sim.workload.request import Request


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _hand_out(pool: BlockPool, tables: list[list[int]], counts: list[int] | None = None) -> None:
    """New blocks for each block table, in order (one each, or counts[i] for table i), taken
    from the pool in one call: the blocks one take after another would hand out."""
    if counts is None:
        for blocks, block in zip(tables, pool.get_new_blocks(len(tables)), strict=True):
            blocks.append(block)
        return
    new = pool.get_new_blocks(sum(counts))
    at = 0
    for blocks, k in zip(tables, counts, strict=True):
        blocks.extend(new[at : at + k])
        at += k


class KVCacheManager:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_caching: bool,
        lower: OffloadTiers | None = None,
        windowed: MemoryPlan | None = None,
    ):
        self.pool = BlockPool(num_blocks, lower)
        # a plan whose bounded windowed layers make a long request hold fewer blocks than one
        # per block_size tokens (its blocks_for); None: one block per block_size tokens
        self.windowed = windowed
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.req_blocks: dict[int, list[int]] = {}  # request id -> its block ids
        self.num_cached_blocks: dict[int, int] = {}
        self.private_from: dict[int, int] = {}  # request id -> its first private block
        self.lower_hits: dict[int, list[int]] = {}  # request id -> its prefix hits in the
        # offload tiers (hashes) found by the last lookup, loaded when it is admitted

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    @property
    def num_used_blocks(self) -> int:
        return self.pool.num_used_blocks

    @property
    def usage(self) -> float:
        return self.pool.num_used_blocks / self.pool.num_usable_blocks

    def get_computed_blocks(self, req: Request, admit: bool = True) -> tuple[list[int], int]:
        """Longest cached prefix of `req` in whole blocks, leaving one token to compute: the
        GPU pool's blocks, then content in the offload tiers (counted in the tokens, loaded
        when `req` is admitted with them; `admit=False`: a look only)."""
        if not self.enable_caching:
            return [], 0
        max_blocks = (req.num_tokens - 1) // self.block_size
        if not req.num_preemptions:  # its private blocks were never hashed: no hit there
            max_blocks = min(max_blocks, self._first_private_block(req))
        hits: list[int] = []
        hashes = req.full_block_hashes(max_blocks, self.block_size)[:max_blocks]
        for block_hash in hashes:
            block = self.pool.get_cached_block(block_hash)
            if block is None:
                break
            hits.append(block)
        lower = self.pool.lower
        below: list[int] = []
        if lower is not None:
            for block_hash in hashes[len(hits) :]:
                if lower.where(block_hash) is None:
                    break
                below.append(block_hash)
            if admit:
                self.lower_hits[req.request_id] = below
        return hits, (len(hits) + len(below)) * self.block_size

    def allocate_slots(
        self,
        req: Request,
        num_new_tokens: int,
        new_computed_blocks: list[int] = (),
        num_new_computed_tokens: int = 0,
        full_sequence_must_fit: bool = False,
    ) -> list[int] | None:
        """Blocks for `num_new_tokens` more tokens of `req`, or None if the pool cannot hold them.

        `new_computed_blocks` are prefix hits from get_computed_blocks (waiting requests only).
        With `full_sequence_must_fit`, admission also requires room for all of req's known
        tokens, not just this chunk (vLLM's scheduler_reserve_full_isl).
        """
        if not (new_computed_blocks or num_new_computed_tokens or full_sequence_must_fit):
            blocks = self.req_blocks.get(req.request_id)
            if blocks:  # a request that holds blocks grows: grow's path
                held = len(blocks)
                return blocks[held:] if self.grow(req, num_new_tokens) else None
        blocks = self.req_blocks.setdefault(req.request_id, [])
        num_computed = req.num_computed_tokens + num_new_computed_tokens
        held = len(blocks) + len(new_computed_blocks)
        num_new_blocks = self.blocks_for(num_computed + num_new_tokens) - held
        num_evictable_hits = self.pool.num_idle(new_computed_blocks)
        available = self.pool.num_free_blocks - num_evictable_hits
        needed = num_new_blocks
        if full_sequence_must_fit:
            needed = max(needed, self.blocks_for(req.num_tokens) - held)
        below = self.lower_hits.pop(req.request_id, [])
        if num_new_computed_tokens != (len(new_computed_blocks) + len(below)) * self.block_size:
            below = []  # not the lookup these hits came from
        if needed > available:
            if not blocks:
                del self.req_blocks[req.request_id]
            return None
        for block_hash in below:  # into the fresh blocks below, hashed again as computed
            self.pool.lower.load(block_hash)
        if new_computed_blocks:
            self.pool.touch(list(new_computed_blocks))
            blocks.extend(new_computed_blocks)
            self.num_cached_blocks[req.request_id] = len(blocks)
        new_blocks = self.pool.get_new_blocks(max(num_new_blocks, 0))
        blocks.extend(new_blocks)
        if self.enable_caching:
            self._cache_full_blocks(req, min(num_computed + num_new_tokens, req.num_tokens))
        return new_blocks

    def grow(self, req: Request, num_new_tokens: int) -> bool:
        """allocate_slots(req, num_new_tokens) without prefix or offload hits or a full-sequence
        reservation, for a request that holds blocks (the one implementation of that path,
        which allocate_slots takes too): True when it is done, False when it needs new blocks
        and the pool cannot hold them (nothing changed)."""
        blocks = self.req_blocks.get(req.request_id)
        if not blocks:  # holds nothing yet: the full path (which forgets it on a failure)
            return self.allocate_slots(req, num_new_tokens) is not None
        if self.lower_hits:  # as the full path: a stale lookup is dropped
            self.lower_hits.pop(req.request_id, None)
        end = req.num_computed_tokens + num_new_tokens
        if self.windowed is None:  # blocks_for, inlined: once per running request per step
            num_new_blocks = -(-end // self.block_size) - len(blocks)
        else:
            num_new_blocks = self.windowed.blocks_for(end) - len(blocks)
        if num_new_blocks > 0:
            new = self.pool.take(num_new_blocks)
            if new is None:
                return False
            blocks.extend(new)
        if self.enable_caching:
            num_tokens = req.prompt_len + req.num_output_tokens
            self._cache_full_blocks(req, end if end < num_tokens else num_tokens)
        return True

    def grow_decodes(self, reqs: list[Request], new_block: list[bool], computed: list[int]) -> None:
        """grow(req, 1) for each of `reqs` in order, each computing one token it knows (a
        decode, or a prefill's one-token chunk) after its `computed` tokens (what grow reads
        from req.num_computed_tokens: vLLM V1's lane holds it apart from the object), that
        takes a block (`new_block`) or fills one,
        where the pool has every block they take (the caller counted them free): the
        same pool calls in the same order, consecutive takes as one (the pool hands out the
        same blocks), and a filled block's hash counted without a call where it is private
        (one block, one hash: hashing never touches the free queue, so only a block actually
        hashed must fall between the takes around it)."""
        pool, req_blocks = self.pool, self.req_blocks
        if self.lower_hits:
            for req in reqs:
                self.lower_hits.pop(req.request_id, None)
        pending: list[list] = []  # block tables waiting for a block, in order
        for req, takes, c in zip(reqs, new_block, computed, strict=True):
            if takes:
                pending.append(req_blocks[req.request_id])
            if not self.enable_caching:
                continue
            filled = self._filled(req, c + 1)
            if filled is None:
                continue
            start, stop, num_full = filled
            if stop > start:  # a hash: the takes up to it come first
                if pending:
                    _hand_out(pool, pending)
                    pending = []
                self._hash_blocks(req, start, stop)
            self.num_cached_blocks[req.request_id] = num_full
        if pending:
            _hand_out(pool, pending)

    def grow_all(self, grows: list[tuple[Request, int]]) -> None:
        """grow(req, n) for each (req, req's computed tokens + n) in order, for requests that
        hold blocks, where a grow only takes blocks (no prefix cache, bounded windows or
        offload tiers) and the pool has every block they take (the caller counted them free):
        the same blocks, taken in one call."""
        assert not self.enable_caching and self.windowed is None and self.pool.lower is None
        tables: list[list[int]] = []
        counts: list[int] = []
        owed: dict[int, int] = {}  # request id -> blocks already counted for it here
        for req, end in grows:
            rid = req.request_id
            blocks = self.req_blocks[rid]
            k = -(-end // self.block_size) - len(blocks) - owed.get(rid, 0)
            if k > 0:
                tables.append(blocks)
                counts.append(k)
                owed[rid] = owed.get(rid, 0) + k
        if tables:
            _hand_out(self.pool, tables, counts)

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks one request of `num_tokens` holds (fewer with bounded windows)."""
        if self.windowed is None:
            return cdiv(num_tokens, self.block_size)
        return self.windowed.blocks_for(num_tokens)

    def _cache_full_blocks(self, req: Request, num_tokens: int) -> None:
        """Hash and cache the blocks `num_tokens` fill; a request's private blocks (those no
        other request can share) are only counted here, and hashed if it is preempted. With
        bounded windows a long request holds fewer blocks than its tokens fill: its first ones
        stand for its first tokens (an approximation of the hybrid allocator's prefix hits)."""
        filled = self._filled(req, num_tokens)
        if filled is not None:
            start, stop, num_full = filled
            self._hash_blocks(req, start, stop)
            self.num_cached_blocks[req.request_id] = num_full

    def _filled(self, req: Request, num_tokens: int) -> tuple[int, int, int] | None:
        """The blocks `num_tokens` fill beyond those counted: (the first to hash, the one
        after the last to hash, the count of full blocks); None when they fill none."""
        num_full = num_tokens // self.block_size
        if self.windowed is not None:
            num_full = min(num_full, len(self.req_blocks[req.request_id]))
        num_cached = self.num_cached_blocks.get(req.request_id, 0)
        if num_full <= num_cached:
            return None
        return num_cached, min(num_full, self._private_from(req)), num_full

    def _hash_blocks(self, req: Request, start: int, stop: int) -> None:
        if stop <= start:
            return
        hashes = req.full_block_hashes(stop, self.block_size)
        blocks = self.req_blocks[req.request_id]
        for j in range(start, stop):
            self.pool.cache_full_block(blocks[j], hashes[j])

    def _private_from(self, req: Request) -> int:
        """The first block whose content no other request of the workload has (the first
        that covers content id first_private_id)."""
        first = self.private_from.get(req.request_id)
        if first is None:
            first = self.private_from[req.request_id] = self._first_private_block(req)
        return first

    def _first_private_block(self, req: Request) -> int:
        if req.first_private_id is None:
            return 1 << 62
        covered = req.first_private_id * req.content_block_tokens + 1
        return -(-covered // self.block_size) - 1

    def warm(self, req: Request) -> None:
        """`req`'s prompt as an earlier run left it: its full blocks cached and idle, at the tail
        of the free queue (the most recently used), evicting the queue's head as the pool fills,
        as any allocation does. Nothing without prefix caching."""
        if not self.enable_caching:
            return
        pool = self.pool
        num_full = req.prompt_len // self.block_size
        for block_hash in req.full_block_hashes(num_full, self.block_size)[:num_full]:
            block = pool.get_cached_block(block_hash)
            if block is not None and pool.ref[block] == 0:
                pool.touch([block])  # out of the queue, back in at its tail
            elif block is None:
                (block,) = pool.get_new_blocks(1)
                pool.cache_full_block(block, block_hash)
            else:  # in use (not at start-up): leave it
                continue
            pool.free_blocks([block])

    def num_blocks_of(self, req: Request) -> int:
        return len(self.req_blocks.get(req.request_id, ()))

    def can_allocate(self, num_blocks: int, watermark_blocks: int = 0) -> bool:
        """Whether `num_blocks` new blocks fit and still leave the watermark free."""
        return self.pool.num_free_blocks - num_blocks >= watermark_blocks

    def swap_in(self, req: Request, num_tokens: int) -> None:
        """Fresh blocks for the `num_tokens` tokens a swapped-out request brings back."""
        assert req.request_id not in self.req_blocks
        blocks = self.pool.get_new_blocks(cdiv(num_tokens, self.block_size))
        self.req_blocks[req.request_id] = blocks

    def free(self, req: Request, finished: bool = False) -> None:
        """Release req's blocks; its last blocks are queued for eviction first. A request
        that will be recomputed (not `finished`) has its private full blocks hashed first,
        so it can find them again, as if they had been cached when filled."""
        num_cached = self.num_cached_blocks.pop(req.request_id, 0)
        if self.enable_caching and not finished and req.request_id in self.req_blocks:
            self._hash_blocks(req, self._private_from(req), num_cached)
        self.private_from.pop(req.request_id, None)
        blocks = self.req_blocks.pop(req.request_id, [])
        self.pool.free_blocks(blocks[::-1])

    def check_invariants(self) -> None:
        self.pool.check_invariants()
        if self.pool.lower is not None:
            self.pool.lower.check_invariants(self.pool.cached.keys())
        refs: dict[int, int] = {}
        for blocks in self.req_blocks.values():
            assert len(set(blocks)) == len(blocks), blocks
            for block in blocks:
                refs[block] = refs.get(block, 0) + 1
        for block in range(1, self.pool.next_fresh):  # (the pool checks the never-used ones)
            assert self.pool.ref[block] == refs.get(block, 0), (block, refs.get(block))
        for req_id, num_cached in self.num_cached_blocks.items():
            blocks = self.req_blocks[req_id]
            assert num_cached <= len(blocks)
            # hashed when filled, up to the private blocks (hashed only on preemption)
            hashed = min(num_cached, self.private_from.get(req_id, num_cached))
            assert all(b in self.pool.hash_of for b in blocks[:hashed])
