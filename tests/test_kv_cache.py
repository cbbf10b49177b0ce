"""The block pool and KV cache manager: a hypothesis state machine on tiny pools, and a
hand-worked allocation whose block ids are known exactly."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sim.kv.block_pool import BlockPool
from sim.kv.manager import KVCacheManager, cdiv
from sim.workload.request import Request


def req(rid: int, ids: list[int], prompt_len: int, block: int, max_out: int = 4) -> Request:
    return Request(rid, 0.0, prompt_len, max_out, ids, block)


class KVMachine(RuleBasedStateMachine):
    """Requests come and go over a pool of a few blocks; prompts share prefixes often."""

    @initialize(
        num_blocks=st.integers(2, 12), block_size=st.sampled_from([1, 2, 4]), caching=st.booleans()
    )
    def setup(self, num_blocks, block_size, caching):
        self.kv = KVCacheManager(num_blocks, block_size, caching)
        self.block_size = block_size
        self.live: dict[int, Request] = {}
        self.next_id = 0

    @rule(prefix=st.lists(st.integers(0, 2), min_size=1, max_size=6), extra=st.integers(0, 5))
    def admit(self, prefix, extra):
        """A new request: content ids drawn from a tiny alphabet, so prefixes repeat."""
        b = self.block_size
        ids = [*prefix, 1000 + self.next_id]  # its last block is its own
        r = req(self.next_id, ids, len(prefix) * b + min(extra, b - 1) + 1, b)
        self.next_id += 1
        hits, num_hit = self.kv.get_computed_blocks(r)
        hashes = r.full_block_hashes(len(hits), b)
        assert [self.kv.pool.hash_of[blk] for blk in hits] == hashes[: len(hits)]  # a prefix
        assert num_hit <= r.num_tokens - 1
        before = self.kv.num_free_blocks
        got = self.kv.allocate_slots(
            r, r.num_tokens - num_hit, hits, num_hit, full_sequence_must_fit=True
        )
        if got is None:
            assert self.kv.num_free_blocks == before  # a refusal changes nothing
            assert r.request_id not in self.kv.req_blocks
            return
        r.num_computed_tokens = r.num_tokens
        self.live[r.request_id] = r
        assert len(self.kv.req_blocks[r.request_id]) == cdiv(r.num_tokens, b)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def grow(self, data):
        """A running request gets one more token (a decode step)."""
        r = data.draw(st.sampled_from(sorted(self.live)))
        r = self.live[r]
        r.num_output_tokens += 1
        r.content_ids.append(2000 + r.request_id * 100 + r.num_output_tokens)
        if self.kv.allocate_slots(r, 1) is not None:
            r.num_computed_tokens += 1
        else:
            r.num_output_tokens -= 1
            r.content_ids.pop()

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def finish(self, data):
        rid = data.draw(st.sampled_from(sorted(self.live)))
        r = self.live.pop(rid)
        blocks = list(self.kv.req_blocks[rid])
        tail_before = list(self.kv.pool.free_queue)
        self.kv.free(r)
        # blocks that became idle join the tail, the request's last block first
        freed = [b for b in reversed(blocks) if self.kv.pool.ref[b] == 0]
        assert list(self.kv.pool.free_queue) == tail_before + freed

    @invariant()
    def consistent(self):
        if hasattr(self, "kv"):
            self.kv.check_invariants()
            used = sum(len(v) for v in self.kv.req_blocks.values())
            assert self.kv.num_used_blocks <= used  # shared blocks are counted once


TestKVMachine = KVMachine.TestCase
TestKVMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_eviction_takes_the_head_of_the_free_queue():
    pool = BlockPool(5)
    a = pool.get_new_blocks(4)
    assert a == [1, 2, 3, 4]
    pool.cache_full_block(a[0], 111)
    pool.free_blocks([a[2], a[0]])  # idle order: 3, then 1
    assert list(pool.free_queue) == [3, 1]
    assert pool.get_new_blocks(1) == [3] and pool.get_cached_block(111) == 1
    assert pool.get_new_blocks(1) == [1] and pool.get_cached_block(111) is None  # evicted
    pool.check_invariants()


def test_hand_worked_allocation_block_ids():
    """Pool of 8 blocks (block 0 is the null block), 4 tokens per block, prefix caching on.

    A: 10 tokens -> blocks 1,2,3 (1 and 2 full, so cached)
    B: shares A's first 8 tokens, 11 tokens -> hits 1,2 (8 tokens), new block 4
    A finishes: frees 3,2,1 in that order; only 3 becomes idle -> free queue 5,6,7,3
    C: 16 tokens of its own -> pops 5,6,7,3
    B finishes: frees 4,2,1 -> all idle -> free queue 4,2,1 (2 and 1 still cached)
    D: shares the first 8 tokens again -> hits 1,2 straight from the free queue, new block 4
    """
    kv = KVCacheManager(8, 4, True)
    a = req(0, [10, 11, 12], 10, 4)
    assert kv.get_computed_blocks(a) == ([], 0)
    assert kv.allocate_slots(a, 10) == [1, 2, 3]
    b = req(1, [10, 11, 13], 11, 4)
    hits, n = kv.get_computed_blocks(b)
    assert (hits, n) == ([1, 2], 8)
    assert kv.allocate_slots(b, 3, hits, n) == [4]
    assert [kv.pool.ref[i] for i in (1, 2, 3, 4)] == [2, 2, 1, 1]
    kv.free(a)
    assert list(kv.pool.free_queue) == [5, 6, 7, 3]
    c = req(2, [20, 21, 22, 23], 16, 4)
    assert kv.allocate_slots(c, 16) == [5, 6, 7, 3]
    kv.free(b)
    assert list(kv.pool.free_queue) == [4, 2, 1]
    d = req(3, [10, 11, 14], 9, 4)
    hits, n = kv.get_computed_blocks(d)
    assert (hits, n) == ([1, 2], 8)
    assert kv.allocate_slots(d, 1, hits, n) == [4]
    assert list(kv.pool.free_queue) == []
    kv.check_invariants()


def test_hit_leaves_the_last_token_to_compute():
    kv = KVCacheManager(10, 4, True)
    a = req(0, [1, 2], 8, 4)
    kv.allocate_slots(a, 8)
    same = req(1, [1, 2], 8, 4)  # identical 8-token prompt: one block must be recomputed
    hits, n = kv.get_computed_blocks(same)
    assert n == 4 and len(hits) == 1


def test_full_sequence_must_fit_refuses_what_would_only_fit_a_chunk():
    kv = KVCacheManager(4, 4, False)  # 3 usable blocks = 12 tokens
    long = req(0, [1, 2, 3, 4], 16, 4)
    assert kv.allocate_slots(long, 4, full_sequence_must_fit=True) is None
    assert kv.allocate_slots(long, 4) is not None  # a chunk alone would have fit


@settings(max_examples=200, deadline=None)
@given(
    num_blocks=st.integers(2, 40),
    ops=st.lists(
        st.tuples(
            st.sampled_from(("take", "free", "touch")), st.integers(0, 6), st.integers(0, 1000)
        ),
        max_size=40,
    ),
    look=st.integers(0, 40),
)
def test_the_free_queue_is_vllms(num_blocks, ops, look):
    """Every call gives the blocks the whole free queue of vLLM gives, though never-used
    blocks are not queued (ids from next_fresh on) and a block taken back from the middle by a
    prefix hit (touch) leaves a stale entry behind: never-used blocks first, by id, then freed
    ones in the order they were freed, less those touched (a reference queue of every block,
    kept alongside). Looking at free_queue part way changes nothing after."""
    pool = BlockPool(num_blocks)
    assert pool.next_fresh == 1 and pool.num_free_blocks == num_blocks - 1
    queue = list(range(1, num_blocks))  # the reference: vLLM's queue, every block in it
    refs = dict.fromkeys(queue, 0)  # and every block's references
    held: list = []
    for k, (op, n, pick) in enumerate(ops):
        if k == look:
            assert list(pool.free_queue) == queue
        if op == "take":
            n = min(n, len(queue))
            got = pool.get_new_blocks(n)
            assert got == queue[:n]
            del queue[:n]
            held += got
            refs.update(dict.fromkeys(got, 1))
        elif op == "free" and held:
            freed = [held.pop(pick % len(held)) for _ in range(min(n, len(held)))]
            pool.free_blocks(freed)
            for block in freed:
                refs[block] -= 1
                if not refs[block]:
                    queue.append(block)
        elif op == "touch" and pool.next_fresh > 1:  # a hit on a block handed out before
            block = 1 + pick % (pool.next_fresh - 1)
            if not refs[block]:
                queue.remove(block)
            refs[block] += 1
            pool.touch([block])
            held.append(block)
        assert pool.num_free_blocks == len(queue)
        pool.check_invariants()
    assert list(pool.free_queue) == queue
    pool.check_invariants()
    with pytest.raises(ValueError, match="free"):
        pool.get_new_blocks(len(queue) + 1)
