"""Each lesson's verdict: its sentence and its table, read off the lesson's two runs (every
number in a lesson's report comes from here)."""

from __future__ import annotations

from sim.scenarios.teach.measures import (
    long_ids,
    makespan,
    max_itl_ms,
    phase_share,
    prefill_tokens,
    time_mean_batch,
)


def static_vs_continuous(rs):
    st, co = rs
    a, b = makespan(st), makespan(co)
    sentence = (
        f"Continuous batching finished the same {len(co.requests)} requests in {b / a:.0%} of "
        f"the time static batching took ({b:.1f} s against {a:.1f} s): a slot freed by a "
        f"finished request is refilled at the next step, so the batch stays full (mean batch "
        f"size {time_mean_batch(co):.0f} against {time_mean_batch(st):.0f})."
    )
    rows = [
        ("all requests done (s)", f"{a:.2f}", f"{b:.2f}"),
        ("mean batch size (time-weighted)", f"{time_mean_batch(st):.1f}",
         f"{time_mean_batch(co):.1f}"),
        ("output tokens / s", f"{st.summary['output_throughput']:,.0f}",
         f"{co.summary['output_throughput']:,.0f}"),
        ("mean TTFT (ms)", f"{st.summary['mean_ttft_ms']:,.0f}",
         f"{co.summary['mean_ttft_ms']:,.0f}"),
        ("request time spent done but held for the batch", f"{phase_share(st, 'held'):.0%}",
         f"{phase_share(co, 'held'):.0%}"),
    ]  # fmt: skip
    return sentence, rows


def chunked_prefill(rs):
    whole, chunk = rs
    longs = long_ids(whole, 4096)
    lt = [float(r.requests.loc[longs, "ttft_s"].mean()) * 1e3 for r in rs]
    budget = [r.setup.settings.max_num_batched_tokens for r in rs]
    n_long = int(longs.sum())
    plen = int(whole.requests.loc[longs, "prompt_tokens"].max())
    sentence = (
        f"Computed in one step, a {plen:,}-token prompt stalls every request that is decoding: "
        f"the longest gap between two of their tokens was {max_itl_ms(whole):,.0f} ms; cut into "
        f"{budget[1]:,}-token chunks beside the decodes it was {max_itl_ms(chunk):,.0f} ms, "
        f"while the {n_long} long prompts' mean TTFT went from {lt[0]:,.0f} to {lt[1]:,.0f} ms."
    )
    rows = [
        ("token budget per step", f"{budget[0]:,}", f"{budget[1]:,}"),
        ("longest gap between two tokens (ms)", f"{max_itl_ms(whole):,.1f}",
         f"{max_itl_ms(chunk):,.1f}"),
        ("p99 inter-token latency (ms)", f"{whole.summary['p99_itl_ms']:.1f}",
         f"{chunk.summary['p99_itl_ms']:.1f}"),
        ("long prompts' mean TTFT (ms)", f"{lt[0]:,.0f}", f"{lt[1]:,.0f}"),
        ("longest step (ms)", f"{whole.steps['duration_s'].max() * 1e3:,.1f}",
         f"{chunk.steps['duration_s'].max() * 1e3:,.1f}"),
    ]  # fmt: skip
    return sentence, rows


def preemption(rs):
    small, big = rs
    prompt = int(small.requests["prompt_tokens"].sum())
    redo = [prefill_tokens(r) - prompt for r in rs]
    pre = [int(r.summary["sim"]["preemptions"]) for r in rs]
    blocks = [r.setup.memory.num_blocks for r in rs]
    sentence = (
        f"With {blocks[0]:,} KV blocks for a batch that grows to need more, vLLM preempted the "
        f"newest running request {pre[0]} times, freeing its blocks and recomputing it later: "
        f"{redo[0]:,} tokens (prompts and answers so far) were computed again, "
        f"{redo[0] / prompt:.0%} on top of the {prompt:,} prompt tokens, and the last request "
        f"finished after {makespan(small):.1f} s against "
        f"{makespan(big):.1f} s with {blocks[1]:,} blocks ({pre[1]} preemptions)."
    )
    rows = [
        ("KV blocks (16 tokens each)", f"{blocks[0]:,}", f"{blocks[1]:,}"),
        ("preemptions", pre[0], pre[1]),
        ("prefill tokens computed again", f"{redo[0]:,}", f"{redo[1]:,}"),
        ("all requests done (s)", f"{makespan(small):.2f}", f"{makespan(big):.2f}"),
        ("p99 TPOT (ms)", f"{small.summary['p99_tpot_ms']:.1f}",
         f"{big.summary['p99_tpot_ms']:.1f}"),
    ]  # fmt: skip
    return sentence, rows


def prefix_caching(rs):
    off, on = rs
    hit = on.summary["sim"]["prefix_cache_hit_rate"]
    sentence = (
        f"With prefix caching, {hit:.0%} of prompt tokens came from KV blocks already in the "
        f"cache: the engine computed {prefill_tokens(on):,} tokens of prefill instead of "
        f"{prefill_tokens(off):,}, and mean TTFT fell from {off.summary['mean_ttft_ms']:,.0f} "
        f"to {on.summary['mean_ttft_ms']:,.0f} ms."
    )
    rows = [
        ("prefix-cache hit rate (prompt tokens)", "0%", f"{hit:.0%}"),
        ("prefill tokens computed", f"{prefill_tokens(off):,}", f"{prefill_tokens(on):,}"),
        ("mean TTFT (ms)", f"{off.summary['mean_ttft_ms']:,.1f}",
         f"{on.summary['mean_ttft_ms']:,.1f}"),
        ("peak KV blocks in use", f"{off.steps['kv_blocks_used'].max():,}",
         f"{on.steps['kv_blocks_used'].max():,}"),
    ]  # fmt: skip
    return sentence, rows


def head_of_line(rs):
    fcfs, capped = rs
    longs = long_ids(fcfs, 4096)
    short = [float(r.requests.loc[~longs, "ttft_s"].median()) * 1e3 for r in rs]
    lt = [float(r.requests.loc[longs, "ttft_s"].iloc[0]) for r in rs]
    cap = capped.setup.settings.long_prefill_token_threshold
    plen = int(fcfs.requests.loc[longs, "prompt_tokens"].iloc[0])
    sentence = (
        f"First come, first served gives a {plen:,}-token prompt that arrived first the whole "
        f"budget of every step until it is done, so the {int((~longs).sum())} short requests "
        f"behind it waited: their median TTFT was {short[0]:,.0f} ms; capping one request's "
        f"share of a step at {cap} tokens (long_prefill_token_threshold) let them in beside "
        f"it, median {short[1]:,.0f} ms, while the long prompt's TTFT went from {lt[0]:.2f} "
        f"to {lt[1]:.2f} s."
    )
    rows = [
        ("long_prefill_token_threshold", "0 (none)", str(cap)),
        ("short requests' median TTFT (ms)", f"{short[0]:,.1f}", f"{short[1]:,.1f}"),
        ("short requests' p99 TTFT (ms)",
         f"{float(fcfs.requests.loc[~longs, 'ttft_s'].quantile(0.99)) * 1e3:,.1f}",
         f"{float(capped.requests.loc[~longs, 'ttft_s'].quantile(0.99)) * 1e3:,.1f}"),
        ("long prompt's TTFT (s)", f"{lt[0]:.3f}", f"{lt[1]:.3f}"),
    ]  # fmt: skip
    return sentence, rows


def admission(rs):
    vl, tr = rs
    pre = [int(r.summary["sim"]["preemptions"]) for r in rs]
    tok = [r.setup.memory.kv_capacity_tokens for r in rs]
    sentence = (
        f"With the same {min(tok):,}-token KV pool, vLLM admitted requests on their prompts' "
        f"blocks and ran a mean batch of {time_mean_batch(vl):.0f}, preempting {pre[0]} times "
        f"as their answers grew; TensorRT-LLM reserved each request's whole answer up front, "
        f"ran a batch of {time_mean_batch(tr):.0f} with {pre[1]} preemptions, and finished "
        f"after {makespan(tr):.1f} s against vLLM's {makespan(vl):.1f} s."
    )
    rows = [
        ("KV pool (tokens)", f"{tok[0]:,}", f"{tok[1]:,}"),
        ("mean batch size (time-weighted)", f"{time_mean_batch(vl):.1f}",
         f"{time_mean_batch(tr):.1f}"),
        ("preemptions", pre[0], pre[1]),
        ("prefill tokens computed", f"{prefill_tokens(vl):,}", f"{prefill_tokens(tr):,}"),
        ("all requests done (s)", f"{makespan(vl):.2f}", f"{makespan(tr):.2f}"),
        ("mean TTFT (ms)", f"{vl.summary['mean_ttft_ms']:,.0f}",
         f"{tr.summary['mean_ttft_ms']:,.0f}"),
    ]  # fmt: skip
    return sentence, rows
