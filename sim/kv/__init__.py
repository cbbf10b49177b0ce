"""The KV cache: paged blocks with prefix caching, how many fit (the memory plan), the offload
tiers below the GPU pool, and the KV a disaggregated prefill pool sends.

    block_pool.py    BlockPool: block ids, their reference counts and hashes, the LRU free queue
    manager.py       KVCacheManager: per-request block tables, prefix hits, allocate / free
    offload.py       OffloadTiers: CPU (and disk) tiers that evicted prefix blocks move to
    memory.py        the memory plan: GPU memory -> KV blocks; KV bytes per token
    transfer.py      the bytes and time of one request's KV transfer between pools

May import sim.workload, sim.engines, sim.specs (and the root).
"""
