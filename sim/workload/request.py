"""A request as the engine sees it: tokens known, tokens computed, and its timestamps.

  prompt_len                 num_output_tokens
|---------------------------|-----------|
0            num_computed_tokens ^      num_tokens
Each step schedules up to num_tokens - num_computed_tokens new tokens. Prefill, chunked
prefill, prefix-cache hits and recompute after preemption all follow this one rule; a token
is sampled when a step brings num_computed_tokens up to num_tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

ROOT_HASH = 0x5EED  # parent hash of a request's first block


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"  # back in the waiting queue, KV freed, to be recomputed
    FINISHED = "finished"
    REJECTED = "rejected"  # refused on arrival (say, prompt + output exceed max_model_len)


@dataclass(slots=True, eq=False)
class Request:
    request_id: int
    arrival_s: float
    prompt_len: int
    max_output_len: int
    # Content identity of the sequence, one id per `content_block_tokens` tokens, covering
    # prompt and output. Equal leading ids mean equal leading tokens (shareable KV). Read by
    # index and slice only (a workload whose ids are all fresh hands out a range).
    content_ids: Sequence[int]
    content_block_tokens: int
    priority: int = 0  # lower is served first (policy=priority)
    # Index of the first content id no other request of the workload has (None: none, or
    # unknown). From the block holding it on, no other request can share this one's KV.
    first_private_id: int | None = None
    status: Status = Status.WAITING
    num_output_tokens: int = 0
    num_computed_tokens: int = 0
    num_cached_tokens: int | None = None  # prefix-cache hit when first scheduled
    num_preemptions: int = 0
    block_hashes: list[int] = field(default_factory=list)
    first_scheduled_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    finish_s: float | None = None
    reject_reason: str | None = None
    num_drafts: int = 0  # speculative decoding: draft tokens this step verifies

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.num_output_tokens

    @property
    def is_finished(self) -> bool:
        return self.num_output_tokens >= self.max_output_len

    def full_block_hashes(self, num_blocks: int, block_size: int) -> list[int]:
        """Hashes of the first `num_blocks` full blocks, each chained over its prefix."""
        hashes = self.block_hashes
        g = self.content_block_tokens
        ids = self.content_ids
        parent = hashes[-1] if hashes else ROOT_HASH
        for j in range(len(hashes), num_blocks):
            start = j * block_size
            if g >= block_size:  # a block lies inside one content id
                key = (ids[start // g], start % g)
            else:  # a block spans several content ids
                key = tuple(ids[start // g : (start + block_size) // g])
            parent = hash((parent, key))
            hashes.append(parent)
        return hashes
