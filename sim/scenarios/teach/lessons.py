"""Teaching scenarios: one mechanism of a serving engine each, shown by running the same requests
twice, one setting apart, and reading the difference off the two runs.

`python -m sim scenario=teach_NAME` runs the lesson's two variants (every step handed to the
timeline, so each request's phases are known), then writes report.md / report.html (the lesson
in one sentence, what to look at, the numbers, the timeline of both runs side by side),
timeline.png / .svg, trace.json (both runs, for ui.perfetto.dev) and summary.json.

Lessons (teach.lesson):
  static_vs_continuous  request-level (static) batching against continuous batching
  chunked_prefill       a long prompt computed whole, or in chunks beside the decodes
  preemption            a KV cache too small for the batch it admitted: preempt and recompute
  prefix_caching        a shared system prompt computed once, or for every request
  head_of_line          first come, first served lets one long prompt hold up short ones
  admission             vLLM admits on the prompt's KV and preempts when out of blocks;
                        TensorRT-LLM (GUARANTEED_NO_EVICT) reserves every request's whole
                        output first, so it admits fewer and never preempts
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from sim.config import SimConfig
from sim.errors import UserError
from sim.run.phases import phase_totals
from sim.run.setup import Setup
from sim.run.simulate import simulate
from sim.run.summary import RunResult
from sim.workload.generate import Workload, generate


@dataclass(frozen=True)
class Variant:
    label: str
    change: Callable[[SimConfig], SimConfig]


@dataclass(frozen=True)
class Lesson:
    title: str
    how: str  # the mechanism, for someone who has never seen a serving engine's scheduler
    variants: tuple[Variant, Variant]
    verdict: Callable[[list[RunResult]], tuple[str, list[tuple]]]  # sentence, figure rows
    look: str  # what to look at in the timeline
    workload: Callable[[SimConfig], Workload] | None = None
    try_next: tuple[str, ...] = ()


def args(cfg: SimConfig, **changes) -> SimConfig:
    return replace(cfg, engine_args=dict(cfg.engine_args) | changes)


def makespan(r: RunResult) -> float:
    """From the first arrival to the last finish (s)."""
    q = r.requests
    return float(q["finish_s"].max() - q["arrival_s"].min())


def time_mean_batch(r: RunResult) -> float:
    """Requests in the batch, averaged over time (each step weighted by its duration)."""
    s = r.steps
    return float(np.average(s["batch_size"], weights=s["duration_s"])) if len(s) else 0.0


def max_itl_ms(r: RunResult) -> float:
    gaps, _ = r.itl
    return float(gaps.max()) * 1e3 if len(gaps) else 0.0


def prefill_tokens(r: RunResult) -> int:
    return int(r.steps["prefill_tokens"].sum())


# ---- the lessons -------------------------------------------------------------------------------
def _static_vs_continuous(rs):
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
        ("request time spent done but held for the batch", f"{_phase_share(st, 'held'):.0%}",
         f"{_phase_share(co, 'held'):.0%}"),
    ]  # fmt: skip
    return sentence, rows


def _phase_share(r: RunResult, phase: str) -> float:
    p = r.phases
    total = float((p["end_s"] - p["start_s"]).sum())
    part = p[p["phase"] == phase]
    return float((part["end_s"] - part["start_s"]).sum()) / total if total else 0.0


def _long_ids(r: RunResult, threshold: int) -> np.ndarray:
    return r.requests["prompt_tokens"].to_numpy() >= threshold


def _chunked(rs):
    whole, chunk = rs
    longs = _long_ids(whole, 4096)
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


def _preemption(rs):
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


def _prefix(rs):
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


def _hol(rs):
    fcfs, capped = rs
    longs = _long_ids(fcfs, 4096)
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


def _admission(rs):
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


def _long_prompts(cfg: SimConfig) -> Workload:
    """The configured traffic with three long prompts arriving while it decodes."""
    from sim.scenarios.long_context.runs import with_long_request

    w = generate(cfg.workload, np.random.default_rng(cfg.seed))
    t = cfg.teach
    for k in range(t.long_prompts):
        w, _ = with_long_request(w, t.long_arrival_s + k * t.long_gap_s, t.long_prompt_tokens,
                                 t.long_output_tokens)  # fmt: skip
    return w


def _long_first(cfg: SimConfig) -> Workload:
    """One long prompt at t=0, then the configured short requests just after it."""
    from sim.scenarios.long_context.runs import with_long_request

    w = generate(cfg.workload, np.random.default_rng(cfg.seed))
    w = replace(w, arrival_s=w.arrival_s + cfg.teach.long_gap_s)
    w, _ = with_long_request(w, 0.0, cfg.teach.long_prompt_tokens, cfg.teach.long_output_tokens)
    return w


def _same_pool_trtllm(cfg: SimConfig) -> SimConfig:
    """TensorRT-LLM with its KV memory fraction (free_gpu_memory_fraction: of the memory left
    after weights, where vLLM's gpu_memory_utilization is of all of it) chosen by bisection so
    its pool holds as many tokens as vLLM's under this config."""
    target = Setup.from_config(cfg).memory.kv_capacity_tokens
    trt = replace(cfg, engine="trtllm")
    lo, hi = 0.001, 0.95
    for _ in range(30):
        mid = (lo + hi) / 2
        if Setup.from_config(args(trt, gpu_memory_utilization=mid)).memory.kv_capacity_tokens < (
            target
        ):
            lo = mid
        else:
            hi = mid
    return args(trt, gpu_memory_utilization=hi)


LESSONS: dict[str, Lesson] = {
    "static_vs_continuous": Lesson(
        title="Static batching against continuous batching",
        how=(
            "A GPU computes a batch of requests at once, one step (one new token for each) at a "
            "time. With static batching the engine starts a batch, runs it until its longest "
            "answer is done, and only then starts the next: a request that finishes early "
            "keeps its slot, and new requests wait outside. With continuous (iteration-level) "
            "batching, as in vLLM, SGLang and TensorRT-LLM, the batch is rebuilt every step: "
            "a finished request leaves at once and a waiting one takes its place."
        ),
        variants=(
            Variant("static batching", lambda c: replace(c, engine="static")),
            Variant("continuous batching (vLLM)", lambda c: c),
        ),
        verdict=_static_vs_continuous,
        look=(
            "In the request strips (bottom), static batching shows orange 'held' bars: requests "
            "already done, waiting for their batch's longest answer, while grey 'queued' bars "
            "wait for the next batch. The batch-size panel saw-tooths down inside each static "
            "batch; with continuous batching it stays near its limit."
        ),
        try_next=("teach.lesson=static_vs_continuous workload.output_sigma=0.3",),
    ),
    "chunked_prefill": Lesson(
        title="Chunked prefill: a long prompt beside the decodes",
        how=(
            "Each step computes the next token of every request already answering (decode, one "
            "token each: cheap) and may also compute prompts (prefill: every prompt token at "
            "once: costly). Up to max_num_batched_tokens tokens go into one step. A prompt "
            "larger than that is cut into chunks over several steps. With a budget large "
            "enough for a whole long prompt, that one step is long, and every request that is "
            "decoding waits for it between two of its tokens."
        ),
        variants=(
            Variant(
                "whole prompts (budget 16,384)", lambda c: args(c, max_num_batched_tokens=16384)
            ),
            Variant("chunks of 1,024 tokens", lambda c: args(c, max_num_batched_tokens=1024)),
        ),
        verdict=_chunked,
        look=(
            "Top panel: the tall blue bars are the long prompts. Whole, each is one tall, wide "
            "step; chunked, they spread over many short steps with decode tokens (green) in "
            "every one. In the request strips the short requests' green decode bars run on "
            "through the chunked prompts."
        ),
        workload=_long_prompts,
    ),
    "preemption": Lesson(
        title="Preemption: when the KV cache runs out",
        how=(
            "Every token a request holds keeps its keys and values (its KV cache) in GPU memory, "
            "in blocks of 16 tokens. vLLM admits a request when its prompt's blocks fit, and "
            "its answer takes a new block every 16 tokens. When no block is free for a running "
            "request's next token, vLLM preempts the newest running request: its blocks are "
            "freed, it goes back to the front of the queue, and when it is admitted again its "
            "whole sequence so far is computed again (recompute)."
        ),
        variants=(
            Variant(
                "small KV cache (1,800 blocks)", lambda c: args(c, num_gpu_blocks_override=1800)
            ),
            Variant("room for all (6,000 blocks)", lambda c: args(c, num_gpu_blocks_override=6000)),
        ),
        verdict=_preemption,
        look=(
            "The KV panel climbs to the red line (the pool) and drops when a request is "
            "preempted; red bars in the request strips are preempted requests waiting, and the "
            "blue bars after them their prompts computed again."
        ),
    ),
    "prefix_caching": Lesson(
        title="Prefix caching: a shared system prompt computed once",
        how=(
            "Requests often start with the same text (a system prompt, a document, earlier "
            "turns of a chat). Its KV is the same for every request, so an engine with prefix "
            "caching keeps the KV blocks of finished requests, looks each new prompt's blocks "
            "up by their content, and computes only the part it has not seen."
        ),
        variants=(
            Variant("prefix caching off", lambda c: args(c, enable_prefix_caching=False)),
            Variant("prefix caching on", lambda c: args(c, enable_prefix_caching=True)),
        ),
        verdict=_prefix,
        look=(
            "Top panel: with caching, the blue prefill bars shrink to each request's own few "
            "hundred tokens after the first request; the blue prefill slivers in the request "
            "strips shorten likewise."
        ),
    ),
    "head_of_line": Lesson(
        title="Head-of-line blocking: one long prompt ahead of short ones",
        how=(
            "vLLM schedules first come, first served: running requests first, each taking as "
            "much of the step's token budget as it needs, then waiting ones in arrival order. A "
            "long prompt that arrived first takes the whole budget, step after step, until it "
            "is done, and the short requests behind it wait. long_prefill_token_threshold caps "
            "how many tokens one request may take in a step, leaving room for the others."
        ),
        variants=(
            Variant("first come, first served", lambda c: c),
            Variant(
                "one request capped at 256 tokens a step",
                lambda c: args(c, long_prefill_token_threshold=256),
            ),
        ),
        verdict=_hol,
        look=(
            "In the request strips, the first row is the long prompt's blue prefill; below it, "
            "grey queued bars. First come, first served: they end together when the long "
            "prompt is done. Capped: they are short, and the long prompt's prefill stretches."
        ),
        workload=_long_first,
    ),
    "admission": Lesson(
        title="Admission: vLLM preempts, TensorRT-LLM reserves",
        how=(
            "Engines differ in when they let a request in. vLLM admits a request as soon as its "
            "prompt's KV blocks fit and lets its answer grow into free blocks, preempting a "
            "request when none are left. TensorRT-LLM's default capacity scheduler "
            "(GUARANTEED_NO_EVICT) admits a request only if the KV of its whole answer (its "
            "maximum output) can be reserved, so it never preempts but runs fewer at a time."
        ),
        variants=(
            Variant("vLLM", lambda c: c),
            Variant("TensorRT-LLM (GUARANTEED_NO_EVICT)", _same_pool_trtllm),
        ),
        verdict=_admission,
        look=(
            "Batch size: vLLM's batch is larger; TensorRT-LLM's grows only as earlier requests "
            "finish. KV blocks: vLLM's touches its limit and falls back at each preemption (red "
            "bars below); TensorRT-LLM stays below its pool, its requests queued (grey) instead."
        ),
    ),
}


@dataclass(frozen=True)
class LessonRuns:
    """A lesson run: its two variants' results and the numbers read off them."""

    lesson: str  # its name (teach.lesson)
    lesson_sentence: str
    definition: Lesson
    results: tuple[RunResult, ...]  # one per variant, in the lesson's order
    rows: tuple[tuple, ...]  # (figure, value per variant)
    simulation_wall_time_s: float
    wall_time_s: float

    @property
    def labels(self) -> list[str]:
        return [v.label for v in self.definition.variants]

    @property
    def summary(self) -> dict:
        labels = self.labels
        return {
            "lesson": self.lesson,
            "lesson_sentence": self.lesson_sentence,
            "figures": {
                name: dict(zip(labels, map(str, values), strict=True))
                for name, *values in self.rows
            },
            "variants": [
                variant_summary(lb, r) for lb, r in zip(labels, self.results, strict=True)
            ],
            "simulation_wall_time_s": self.simulation_wall_time_s,
            "wall_time_s": self.wall_time_s,
        }


def variant_summary(label: str, r: RunResult) -> dict:
    s = r.summary
    keep = ("completed", "duration", "request_throughput", "output_throughput", "mean_ttft_ms",
            "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "p99_itl_ms")  # fmt: skip
    return {
        "label": label,
        "engine": s["backend"].removeprefix("sim:"),
        **{k: s[k] for k in keep},
        "steps": s["sim"]["steps"],
        "preemptions": s["sim"]["preemptions"],
        "mean_batch_size": s["sim"]["mean_batch_size"],
        "prefix_cache_hit_rate": s["sim"]["prefix_cache_hit_rate"],
        "kv_blocks": r.setup.memory.num_blocks,
        "phase_seconds": phase_totals(r.phases),
    }


def run_lesson(cfg: SimConfig, progress=None) -> LessonRuns:
    """Both variants of the lesson, their timelines and the lesson's numbers."""
    name = cfg.teach.lesson
    if name not in LESSONS:
        raise UserError(f"teach.lesson={name!r}: choose one of {', '.join(LESSONS)}")
    lesson = LESSONS[name]
    started = time.perf_counter()
    base = replace(cfg, trace=True, output=replace(cfg.output, progress=False))
    results = []
    for k, v in enumerate(lesson.variants):
        c = v.change(base)
        workload = lesson.workload(c) if lesson.workload else None
        results.append(simulate(c, workload=workload))
        if progress:
            progress(k + 1, len(lesson.variants))
    sentence, rows = lesson.verdict(results)
    wall_s = time.perf_counter() - started
    return LessonRuns(name, sentence, lesson, tuple(results), tuple(rows), wall_s, wall_s)
