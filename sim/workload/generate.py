"""The workload, generated up front from a seeded numpy Generator.

Arrivals (Poisson, gamma with vllm bench's burstiness, constant rate, all at once, closed loop
at a fixed concurrency, or replayed from a trace), lengths (fixed, uniform, lognormal, or drawn
from a file), and the content identity of every token block (shared system prompts, multi-turn
sessions, Mooncake's prefix hashes) as ids per `content_block_tokens` tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.config import MAX_SPAN_S, MAX_TOKENS, WorkloadConfig, slowest_rate, too_slow
from sim.errors import UserError
from sim.workload.request import Request
from sim.workload.traces import TraceTable, load_trace

CONTENT_BLOCK_TOKENS = 16  # granularity of synthetic content ids


@dataclass(frozen=True, slots=True)
class Workload:
    arrival_s: np.ndarray  # float64, non-decreasing: when each request is ready to send
    prompt_len: np.ndarray  # int64
    output_len: np.ndarray  # int64
    content_ids: np.ndarray  # int64, flat; request i owns [offsets[i], offsets[i+1]); empty
    # when fresh_ids (see `ids`)
    content_offsets: np.ndarray  # int64, len n + 1
    content_block_tokens: int
    concurrency: int | None  # at most this many requests in flight (a closed loop when set)
    description: str
    priority: np.ndarray | None = None  # int64 per request (lower is served first), or None
    warmup: int = 0  # the first `warmup` requests are left out of the metrics
    # per request, the index of its first content id no other request has (its length when
    # every id is shared); None: not worked out, every block treated as shareable
    first_private: np.ndarray | None = None
    # Nothing is shared: request i's ids are 1 + [offsets[i], offsets[i+1]), not stored (a
    # million-request workload would otherwise hold tens of millions of ids)
    fresh_ids: bool = False
    # An earlier run sent these very prompts to the server (workload.cache_warm): each
    # prompt's KV is in the prefix cache at the start (sim/run/engine.py, warm_prefix_caches)
    cache_warm: bool = False
    # Per request, the server front end's time before the engine sees it (workload.frontend_ms
    # and frontend_us_per_token; sim/run/driver.py serves the requests one at a time); None:
    # the engine sees each request when it is sent
    frontend_s: np.ndarray | None = None
    # Every request's delay between its send and the engine's queue, in parallel (a calibrated
    # deployment's frontend_ms, sim/run/calibration.py): after the front end above, if any
    transit_s: float = 0.0

    def __len__(self) -> int:
        return len(self.prompt_len)

    @property
    def ids(self) -> np.ndarray:
        """Every request's content ids, flat (materialised when fresh_ids)."""
        if self.fresh_ids:
            return np.arange(1, 1 + self.content_offsets[-1], dtype=np.int64)
        return self.content_ids

    def request(self, i: int) -> Request:
        lo, hi = int(self.content_offsets[i]), int(self.content_offsets[i + 1])
        # (fresh: a range, read as the list would be: by index and slice, never changed)
        ids = range(1 + lo, 1 + hi) if self.fresh_ids else self.content_ids[lo:hi].tolist()
        return Request(
            request_id=i,
            arrival_s=float(self.arrival_s[i]),
            prompt_len=int(self.prompt_len[i]),
            max_output_len=int(self.output_len[i]),
            content_ids=ids,
            content_block_tokens=self.content_block_tokens,
            priority=0 if self.priority is None else int(self.priority[i]),
            first_private_id=(
                None
                if self.first_private is None or self.first_private[i] >= hi - lo
                else int(self.first_private[i])
            ),
        )


def generate(cfg: WorkloadConfig, rng: np.random.Generator) -> Workload:
    table = _load_table(cfg)
    n = _num_requests(cfg, table)
    arrival, concurrency, what = _arrivals(cfg, table, n, rng)
    prompt, output, hashes = _lengths(cfg, table, n, rng)
    ids, offsets, block = _content(cfg, prompt, output, hashes, rng)
    fresh = ids is None  # nothing shared: every id new, none stored
    desc = (
        f"{n} requests, {what}, prompt mean {prompt.mean():.0f} / output mean {output.mean():.0f}"
    )
    priority = None
    if cfg.priority_levels > 1:  # drawn last, so the other draws do not depend on it
        priority = rng.integers(0, cfg.priority_levels, n).astype(np.int64)
        desc += f", priorities 0..{cfg.priority_levels - 1} uniform"
    if cfg.warmup_requests >= n:
        raise UserError(
            f"workload.warmup_requests={cfg.warmup_requests} leaves none of the {n} requests "
            "to measure"
        )
    if cfg.warmup_requests:
        desc += f", the first {cfg.warmup_requests} as warm-up"
    first_private = np.zeros(n, dtype=np.int64) if fresh else first_private_ids(ids, offsets)
    if cfg.cache_warm:  # the prompts were sent before: their blocks are shareable with that run
        first_private = np.maximum(first_private, prompt // block)
        desc += ", prompts cached by an earlier run"
    frontend = frontend_times(cfg, prompt)
    if frontend is not None:
        desc += (
            f", a front end of {cfg.frontend_ms:g} ms + {cfg.frontend_us_per_token:g} us per "
            "prompt token before the engine"
        )
    return Workload(
        arrival,
        prompt,
        output,
        np.zeros(0, dtype=np.int64) if fresh else ids,
        offsets,
        block,
        concurrency,
        desc,
        priority,
        cfg.warmup_requests,
        first_private,
        fresh,
        cfg.cache_warm,
        frontend,
    )


def frontend_times(cfg: WorkloadConfig, prompt: np.ndarray) -> np.ndarray | None:
    """Each request's time in the server's front end (None when both keys are 0)."""
    if cfg.frontend_ms == 0 and cfg.frontend_us_per_token == 0:
        return None
    return cfg.frontend_ms / 1e3 + cfg.frontend_us_per_token / 1e6 * prompt.astype(np.float64)


def _load_table(cfg: WorkloadConfig) -> TraceTable | None:
    if cfg.kind in ("trace", "bench_json"):
        if cfg.path is None:
            raise UserError(f"workload={cfg.kind} needs workload.path=FILE")
        table = load_trace(cfg.path)
        if cfg.kind == "trace" and table.arrival_s is None:
            raise UserError(
                f"{cfg.path} has no arrival times ({table.format}); use it as "
                "workload.lengths=FILE with an arrival process instead"
            )
        if cfg.kind == "bench_json" and table.format != "bench_json":
            raise UserError(f"workload=bench_json needs a vllm bench serve JSON, got {cfg.path}")
        return table
    if cfg.path is not None:
        raise UserError(f"workload.path is for workload=trace or bench_json, not {cfg.kind}")
    return load_trace(cfg.lengths) if cfg.lengths is not None else None


def _num_requests(cfg: WorkloadConfig, table: TraceTable | None) -> int:
    if cfg.kind in ("trace", "bench_json"):
        return len(table) if cfg.num_requests is None else min(cfg.num_requests, len(table))
    if cfg.num_requests is None:
        raise UserError(f"workload={cfg.kind} needs workload.num_requests")
    return cfg.num_requests


def _arrivals(cfg: WorkloadConfig, table, n: int, rng) -> tuple[np.ndarray, int | None, str]:
    kind, rate, burstiness, concurrency = cfg.kind, cfg.rate, cfg.burstiness, cfg.concurrency
    if kind == "trace":
        arrival = _replayed(table.arrival_s[:n], rate, table.format)
        if rate is None:
            return arrival, concurrency, f"replayed from {table.format}"
        return (
            _within_span(arrival, rate),
            concurrency,
            f"replayed from {table.format} at {rate:g} req/s",
        )
    if kind == "bench_json":  # the file's arrival process unless the config overrides it
        rate = table.request_rate if rate is None else rate
        burstiness = table.burstiness if burstiness is None else burstiness
        concurrency = table.max_concurrency if concurrency is None else concurrency
        kind = "burst" if math.isinf(rate) else "gamma"
    if kind == "closed_loop":
        if concurrency is None:
            raise UserError("workload=closed_loop needs workload.concurrency")
        return np.zeros(n), concurrency, f"closed loop at concurrency {concurrency}"
    if kind == "burst":
        return np.zeros(n), concurrency, "all at t=0"
    if rate is None:
        raise UserError(f"workload={kind} needs workload.rate (requests per second)")
    if not rate >= slowest_rate(n):  # a rate derived from others' (a load factor, a file's)
        raise UserError(too_slow("workload.rate", rate, n, n / rate if rate > 0 else math.inf))
    if kind == "constant":
        return _within_span(np.arange(n) / rate, rate), concurrency, f"constant {rate:g} req/s"
    if kind == "poisson" and burstiness not in (None, 1.0):
        raise UserError("workload=poisson has burstiness 1; use workload=gamma for other values")
    shape = 1.0 if burstiness is None else burstiness
    # vllm bench serve: gaps ~ Gamma(shape=burstiness, scale=1/(rate x burstiness)), first at 0
    # (with a burstiness so large that rate x burstiness overflows, the mean gap over it: the
    # gaps are then 1 / rate each, as they tend to, not 1 / inf = 0)
    scale = 1.0 / (rate * shape) if math.isfinite(rate * shape) else (1.0 / rate) / shape
    gaps = rng.gamma(shape=shape, scale=scale, size=n - 1)
    arrival = _within_span(np.concatenate(([0.0], np.cumsum(gaps))), rate)
    what = (
        f"Poisson {rate:g} req/s"
        if shape == 1.0
        else f"gamma {rate:g} req/s (burstiness {shape:g})"
    )
    return arrival, concurrency, what


def _within_span(arrival_s: np.ndarray, rate: float) -> np.ndarray:
    """`arrival_s`, refused when the arrivals at `rate` req/s span more than MAX_SPAN_S (as a
    trace's may not, sim/workload/traces.py): past it, float64 seconds lose the step times
    latencies are made of (at 1e301 s, 1e301 + 0.01 == 1e301: every latency would read 0)."""
    span = float(arrival_s[-1] - arrival_s[0]) if len(arrival_s) else 0.0
    if not span <= MAX_SPAN_S:  # NaN too
        raise UserError(too_slow("workload.rate", rate, len(arrival_s), span))
    return arrival_s


def _replayed(arrival_s: np.ndarray, rate: float | None, source: str) -> np.ndarray:
    """The trace's arrival times, or with `rate` the same pattern sped up or slowed down so
    its mean rate ((n - 1) gaps over its span) is `rate`: load sweeps on a real trace."""
    times = arrival_s.astype(np.float64, copy=True)
    if rate is None:
        return times
    span = float(times[-1] - times[0]) if len(times) else 0.0
    if len(times) < 2 or span <= 0:
        raise UserError(
            f"workload.rate={rate:g}: the {source} trace's requests all arrive at one instant, "
            "so it has no rate to scale; use workload.rate=null to replay it as it is"
        )
    return times[0] + (times - times[0]) * ((len(times) - 1) / span / rate)


def _lengths(cfg: WorkloadConfig, table, n: int, rng):
    """(prompt lengths, output lengths, per-request prompt hash ids or None)."""
    if cfg.kind in ("trace", "bench_json"):
        hashes = None if table.hash_ids is None else table.hash_ids[:n]
        return table.prompt_len[:n].copy(), table.output_len[:n].copy(), hashes
    if table is not None:  # workload.lengths: (prompt, output) pairs, resampled when short
        idx = rng.choice(len(table), size=n, replace=n > len(table))
        return table.prompt_len[idx], table.output_len[idx], None
    return (
        _draw(cfg, cfg.input_len, cfg.input_sigma, n, rng),
        _draw(cfg, cfg.output_len, cfg.output_sigma, n, rng),
        None,
    )


def _draw(cfg: WorkloadConfig, mean: int, sigma: float, n: int, rng) -> np.ndarray:
    match cfg.length_dist:
        case "fixed":
            return np.full(n, mean, dtype=np.int64)
        case "uniform":  # as vllm bench's random dataset with --random-range-ratio
            lo = max(1, int(mean * (1 - cfg.range_ratio)))
            return rng.integers(lo, int(mean * (1 + cfg.range_ratio)) + 1, size=n)
        case _:  # lognormal with the given mean
            mu = math.log(mean) - sigma**2 / 2
            draws = np.rint(rng.lognormal(mu, sigma, size=n))
            top = min(cfg.max_len_factor * mean, MAX_TOKENS)  # no draw beyond any context
            return np.clip(draws, 1, top).astype(np.int64)


def _content(cfg: WorkloadConfig, prompt, output, hashes, rng):
    """Content ids covering each request's prompt and output; returns (ids, offsets, block),
    ids None when nothing is shared (request i's are then 1 + [offsets[i], offsets[i+1])).

    A shared system prompt or the previous turn of a session is put before the drawn input,
    so `prompt` grows by that many tokens here.
    """
    n = len(prompt)
    if hashes is not None:  # Mooncake: prompt blocks of 512 tokens with shared ids
        block = 512
        next_id = 1 + max((max(h) for h in hashes if h), default=0)
        per_req = []
        for i in range(n):
            need = -(-(int(prompt[i]) + int(output[i])) // block)
            own = list(hashes[i][:need])
            per_req.append(own + list(range(next_id, next_id + need - len(own))))
            next_id += need - len(own)
        return _flatten(per_req, block)
    block = CONTENT_BLOCK_TOKENS
    next_id = 1
    prefix_blocks = cfg.shared_prefix_tokens // block  # a partial block is never shared
    prefixes = [
        list(range(k * prefix_blocks + 1, (k + 1) * prefix_blocks + 1))
        for k in range(cfg.num_shared_prefixes)
    ]
    next_id += cfg.num_shared_prefixes * prefix_blocks
    choice = rng.integers(cfg.num_shared_prefixes, size=n)
    if prefix_blocks == 0 and cfg.turns_per_session == 1:  # nothing shared: fresh ids
        prompt += cfg.shared_prefix_tokens  # a prefix shorter than a block, never shared
        need = -(-(prompt + output) // block)
        offsets = np.zeros(n + 1, dtype=np.int64)
        offsets[1:] = np.cumsum(need)
        return None, offsets, block  # ids next_id + [offsets[i], offsets[i+1]), next_id = 1
    width = cfg.concurrent_sessions
    window = width * cfg.turns_per_session
    last_turn: dict[int, tuple[list[int], int]] = {}  # session -> (ids, tokens of prompt+output)
    per_req = []
    for i in range(n):
        # `width` sessions at a time; turn t of a session is `width` arrivals after turn t - 1
        session = (i // window) * width + i % width
        if session in last_turn:  # the previous turn's prompt and answer lead this prompt
            prev_ids, prev_tokens = last_turn[session]
            lead, lead_tokens = prev_ids[: prev_tokens // block], prev_tokens
        else:
            lead, lead_tokens = prefixes[choice[i]], cfg.shared_prefix_tokens
        prompt[i] += lead_tokens
        need = -(-(int(prompt[i]) + int(output[i])) // block)
        own = lead[: min(len(lead), need)]
        ids = own + list(range(next_id, next_id + need - len(own)))
        next_id += need - len(own)
        per_req.append(ids)
        last_turn[session] = (ids, int(prompt[i]) + int(output[i]))
    return _flatten(per_req, block)


def first_private_ids(ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per request, the index (within its own ids) of its first content id that no other
    request has: from the KV block holding it on, nothing it computes can be a prefix-cache
    hit for anyone else (the KV cache then hashes those blocks only if the request is
    preempted, the one way it can hit them itself). Its length when every id is shared."""
    lengths = np.diff(offsets)
    if len(ids) == 0:
        return lengths.copy()
    owner = np.repeat(np.arange(len(lengths)), lengths)
    if ids.min() >= 0 and ids.max() < 4 * len(ids) + 1024:
        repeated = np.bincount(ids)[ids] > 1
    else:
        _, where, counts = np.unique(ids, return_inverse=True, return_counts=True)
        repeated = counts[where] > 1
    private = ~repeated
    if repeated.any():  # an id seen more than once is still private if one request has all
        sub = np.flatnonzero(repeated)
        order = np.lexsort((owner[sub], ids[sub]))
        sub_ids, sub_owner = ids[sub][order], owner[sub][order]
        starts = np.flatnonzero(np.r_[True, sub_ids[1:] != sub_ids[:-1]])
        alone = np.minimum.reduceat(sub_owner, starts) == np.maximum.reduceat(sub_owner, starts)
        private[sub[order]] = np.repeat(alone, np.diff(np.r_[starts, len(sub)]))
    position = np.arange(len(ids)) - np.repeat(offsets[:-1], lengths)
    first = np.where(private, position, np.iinfo(np.int64).max)
    return np.minimum(np.minimum.reduceat(first, offsets[:-1]), lengths)


def _flatten(per_req: list[list[int]], block: int):
    offsets = np.zeros(len(per_req) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(ids) for ids in per_req])
    flat = np.fromiter((x for ids in per_req for x in ids), dtype=np.int64, count=offsets[-1])
    return flat, offsets, block
