"""Each lesson's verdict: its sentence (what the change buys, then what it costs) and its table,
read off the lesson's two runs (every number in a lesson's report comes from here; the costs
from sim/scenarios/teach/costs.py)."""

from __future__ import annotations

from sim.scenarios.teach.costs import Figure, Verdict, auto_digits, verdict
from sim.scenarios.teach.measures import (
    long_ids,
    makespan,
    max_itl_ms,
    phase_share,
    prefill_tokens,
    time_mean_batch,
)


def static_vs_continuous(rs) -> Verdict:
    st, co = rs
    a, b = makespan(st), makespan(co)
    held = Figure("request time spent done but held for the batch",
                  "the share of request time spent done but held", "", True,
                  lambda r: phase_share(r, "held"), lambda v: f"{v:.0%}")  # fmt: skip
    buys = (
        f"Continuous batching finished the same {len(co.requests)} requests in {b / a:.0%} of "
        f"the time static batching took ({b:.1f} s against {a:.1f} s): a slot freed by a "
        f"finished request is refilled at the next step, so the batch stays full (mean batch "
        f"size {time_mean_batch(co):.0f} against {time_mean_batch(st):.0f})."
    )
    rows = [
        ("all requests done (s)",),
        ("mean batch size (time-weighted)", f"{time_mean_batch(st):.1f}",
         f"{time_mean_batch(co):.1f}"),
        ("output tokens / s",),
        ("mean TTFT (ms)",),
        (held.name,),
    ]  # fmt: skip
    return verdict(rs, "continuous batching", buys, rows, (held,))


def chunked_prefill(rs) -> Verdict:
    whole, chunk = rs
    longs = long_ids(whole, 4096)
    budget = [r.setup.settings.max_num_batched_tokens for r in rs]
    n_long = int(longs.sum())
    plen = int(whole.requests.loc[longs, "prompt_tokens"].max())
    long_ttft = Figure("long prompts' mean TTFT (ms)", f"the {n_long} long prompts' mean TTFT",
                       "ms", True, lambda r: float(r.requests.loc[longs, "ttft_s"].mean()) * 1e3,
                       lambda v: f"{v:,.0f}")  # fmt: skip
    buys = (
        f"Computed in one step, a {plen:,}-token prompt stalls every request that is decoding: "
        f"the longest gap between two of their tokens was {auto_digits(max_itl_ms(whole))} ms; "
        f"cut into {budget[1]:,}-token chunks beside the decodes it was "
        f"{auto_digits(max_itl_ms(chunk))} ms."
    )
    rows = [
        ("token budget per step", f"{budget[0]:,}", f"{budget[1]:,}"),
        ("longest gap between two tokens (ms)",),
        ("p99 inter-token latency (ms)",),
        (long_ttft.name,),
        ("longest step (ms)", *(auto_digits(r.steps["duration_s"].max() * 1e3) for r in rs)),
    ]  # fmt: skip
    return verdict(rs, f"{budget[1]:,}-token chunks", buys, rows, (long_ttft,))


def preemption(rs) -> Verdict:
    small, big = rs
    prompt = int(small.requests["prompt_tokens"].sum())
    pre = [int(r.summary["sim"]["preemptions"]) for r in rs]
    blocks = [r.setup.memory.num_blocks for r in rs]
    redo = Figure("prefill tokens computed again", "prefill tokens computed again", "", True,
                  lambda r: prefill_tokens(r) - prompt, lambda v: f"{v:,.0f}")  # fmt: skip
    preempted = Figure("preemptions", "preemptions", "", True,
                       lambda r: float(r.summary["sim"]["preemptions"]),
                       lambda v: f"{v:,.0f}")  # fmt: skip
    again = redo.read(small)
    buys = (
        f"With {blocks[0]:,} KV blocks for a batch that grows to need more, vLLM preempted the "
        f"newest running request {pre[0]} times, freeing its blocks and recomputing it later: "
        f"{again:,} tokens (prompts and answers so far) were computed again, "
        f"{again / prompt:.0%} on top of the {prompt:,} prompt tokens, and the last request "
        f"finished after {makespan(small):.1f} s against "
        f"{makespan(big):.1f} s with {blocks[1]:,} blocks ({pre[1]} preemptions)."
    )
    rows = [
        ("KV blocks (16 tokens each)", f"{blocks[0]:,}", f"{blocks[1]:,}"),
        (preempted.name,),
        (redo.name,),
        ("all requests done (s)",),
        ("p99 TPOT (ms)",),
    ]  # fmt: skip
    return verdict(rs, f"{blocks[1]:,} blocks", buys, rows, (preempted, redo))


def prefix_caching(rs) -> Verdict:
    off, on = rs
    hit = on.summary["sim"]["prefix_cache_hit_rate"]
    computed = Figure("prefill tokens computed", "prefill tokens computed", "", True,
                      lambda r: float(prefill_tokens(r)), lambda v: f"{v:,.0f}")  # fmt: skip
    peak = Figure("peak KV blocks in use", "the peak of KV blocks in use", "", True,
                  lambda r: float(r.steps["kv_blocks_used"].max()),
                  lambda v: f"{v:,.0f}")  # fmt: skip
    buys = (
        f"With prefix caching, {hit:.0%} of prompt tokens came from KV blocks already in the "
        f"cache: the engine computed {prefill_tokens(on):,} tokens of prefill instead of "
        f"{prefill_tokens(off):,}, and mean TTFT fell from "
        f"{auto_digits(off.summary['mean_ttft_ms'])} to "
        f"{auto_digits(on.summary['mean_ttft_ms'])} ms."
    )
    rows = [
        ("prefix-cache hit rate (prompt tokens)", "0%", f"{hit:.0%}"),
        (computed.name,),
        ("mean TTFT (ms)",),
        (peak.name,),
    ]  # fmt: skip
    return verdict(rs, "prefix caching", buys, rows, (computed, peak))


def head_of_line(rs) -> Verdict:
    fcfs, capped = rs
    longs = long_ids(fcfs, 4096)
    cap = capped.setup.settings.long_prefill_token_threshold
    plen = int(fcfs.requests.loc[longs, "prompt_tokens"].iloc[0])

    def short_ttft(q: float):
        return lambda r: float(r.requests.loc[~longs, "ttft_s"].quantile(q)) * 1e3

    median = Figure("short requests' median TTFT (ms)", "the short requests' median TTFT",
                    "ms", True, short_ttft(0.5))  # fmt: skip
    p99 = Figure("short requests' p99 TTFT (ms)", "the short requests' p99 TTFT", "ms", True,
                 short_ttft(0.99))  # fmt: skip
    long_ttft = Figure("long prompt's TTFT (s)", "the long prompt's TTFT", "s", True,
                       lambda r: float(r.requests.loc[longs, "ttft_s"].iloc[0]),
                       lambda v: f"{v:.2f}")  # fmt: skip
    short = [median.read(r) for r in rs]
    buys = (
        f"First come, first served gives a {plen:,}-token prompt that arrived first the whole "
        f"budget of every step until it is done, so the {int((~longs).sum())} short requests "
        f"behind it waited: their median TTFT was {median.fmt(short[0])} ms; capping one "
        f"request's share of a step at {cap} tokens (long_prefill_token_threshold) let them in "
        f"beside it, median {median.fmt(short[1])} ms."
    )
    rows = [
        ("long_prefill_token_threshold", "0 (none)", str(cap)),
        (median.name,),
        (p99.name,),
        (long_ttft.name,),
    ]
    return verdict(rs, f"the {cap}-token cap", buys, rows, (median, p99, long_ttft))


def admission(rs) -> Verdict:
    vl, tr = rs
    pre = [int(r.summary["sim"]["preemptions"]) for r in rs]
    tok = [r.setup.memory.kv_capacity_tokens for r in rs]
    prompt = int(vl.requests["prompt_tokens"].sum())
    again = [prefill_tokens(r) - prompt for r in rs]
    preempted = Figure("preemptions", "preemptions", "", True,
                       lambda r: float(r.summary["sim"]["preemptions"]),
                       lambda v: f"{v:,.0f}")  # fmt: skip
    computed = Figure("prefill tokens computed", "prefill tokens computed", "", True,
                      lambda r: float(prefill_tokens(r)), lambda v: f"{v:,.0f}")  # fmt: skip
    buys = (
        f"With the same {min(tok):,}-token KV pool, vLLM admitted requests on their prompts' "
        f"blocks and ran a mean batch of {time_mean_batch(vl):.0f}, preempting {pre[0]} times "
        f"as their answers grew and computing {again[0]:,} tokens again; TensorRT-LLM reserved "
        f"each request's whole answer up front and ran a batch of {time_mean_batch(tr):.0f} "
        f"with {pre[1]} preemptions and {again[1]:,} tokens computed again."
    )
    rows = [
        ("KV pool (tokens)", f"{tok[0]:,}", f"{tok[1]:,}"),
        ("mean batch size (time-weighted)", f"{time_mean_batch(vl):.1f}",
         f"{time_mean_batch(tr):.1f}"),
        (preempted.name,),
        (computed.name,),
        ("all requests done (s)",),
        ("mean TTFT (ms)",),
    ]  # fmt: skip
    return verdict(rs, "reserving every answer", buys, rows, (preempted, computed))
