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

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from sim.config import SimConfig
from sim.run.setup import Setup
from sim.run.summary import RunResult
from sim.scenarios.long_context.runs import with_long_request
from sim.scenarios.teach import verdicts
from sim.scenarios.teach.costs import Verdict
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
    verdict: Callable[[list[RunResult]], Verdict]  # its sentence (gain, then price), its table
    look: str  # what to look at in the timeline
    workload: Callable[[SimConfig], Workload] | None = None
    try_next: tuple[str, ...] = ()


def args(cfg: SimConfig, **changes) -> SimConfig:
    return replace(cfg, engine_args=dict(cfg.engine_args) | changes)


def _long_prompts(cfg: SimConfig) -> Workload:
    """The configured traffic with three long prompts arriving while it decodes."""
    w = generate(cfg.workload, np.random.default_rng(cfg.seed))
    t = cfg.teach
    for k in range(t.long_prompts):
        w, _ = with_long_request(w, t.long_arrival_s + k * t.long_gap_s, t.long_prompt_tokens,
                                 t.long_output_tokens)  # fmt: skip
    return w


def _long_first(cfg: SimConfig) -> Workload:
    """One long prompt at t=0, then the configured short requests just after it."""
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
            "a finished request leaves at once and a waiting one takes its place. The price: a "
            "newcomer's prompt is computed in a step beside the running requests' decodes, and "
            "they wait for it between two of their tokens."
        ),
        variants=(
            Variant("static batching", lambda c: replace(c, engine="static")),
            Variant("continuous batching (vLLM)", lambda c: c),
        ),
        verdict=verdicts.static_vs_continuous,
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
            "decoding waits for it between two of its tokens. Chunks have a price too: every "
            "step that carries one is slower than a step of decodes alone, and the long prompt "
            "needs several steps before its first token."
        ),
        variants=(
            Variant(
                "whole prompts (budget 16,384)", lambda c: args(c, max_num_batched_tokens=16384)
            ),
            Variant("chunks of 1,024 tokens", lambda c: args(c, max_num_batched_tokens=1024)),
        ),
        verdict=verdicts.chunked_prefill,
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
            "whole sequence so far is computed again (recompute). With room for everyone, "
            "nobody is preempted, but the batch is larger and each of its steps a little slower."
        ),
        variants=(
            Variant(
                "small KV cache (1,800 blocks)", lambda c: args(c, num_gpu_blocks_override=1800)
            ),
            Variant("room for all (6,000 blocks)", lambda c: args(c, num_gpu_blocks_override=6000)),
        ),
        verdict=verdicts.preemption,
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
        verdict=verdicts.prefix_caching,
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
            "how many tokens one request may take in a step, leaving room for the others; the "
            "long prompt then takes more steps, and the requests decoding beside it wait for "
            "every one of them."
        ),
        variants=(
            Variant("first come, first served", lambda c: c),
            Variant(
                "one request capped at 256 tokens a step",
                lambda c: args(c, long_prefill_token_threshold=256),
            ),
        ),
        verdict=verdicts.head_of_line,
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
        verdict=verdicts.admission,
        look=(
            "Batch size: vLLM's batch is larger; TensorRT-LLM's grows only as earlier requests "
            "finish. KV blocks: vLLM's touches its limit and falls back at each preemption (red "
            "bars below); TensorRT-LLM stays below its pool, its requests queued (grey) instead."
        ),
    ),
}
