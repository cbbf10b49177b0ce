"""Hand-worked step sequences, one small scenario per scheduler family.

Each test builds a family's scheduler on a tiny KV pool (16-token blocks unless said), feeds
it requests at given steps, and checks what every step runs: [(request, new tokens), ...].
Step k runs from time k - 1 to k.
"""

from __future__ import annotations

import itertools

from sim.engines.resolve import resolve
from sim.kv.manager import KVCacheManager
from sim.run.engine import SCHEDULERS
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model
from sim.workload.request import Request, Status

_ids = itertools.count(1000)


def req(name: str, prompt: int, output: int) -> Request:
    """Request `name` (its id is ord(name)) with content of its own (no shared prefix)."""
    base = next(_ids) * 1000
    return Request(
        request_id=ord(name),
        arrival_s=0.0,
        prompt_len=prompt,
        max_output_len=output,
        content_ids=list(range(base, base + (prompt + output) // 16 + 2)),
        content_block_tokens=16,
    )


def make(spec: str, num_blocks: int, block_size: int = 16, **engine_args):
    s = resolve(
        spec, load_hardware("h100-sxm"), load_model("llama-3.1-8b"), 1, overrides=engine_args
    )
    kv = KVCacheManager(num_blocks + 1, block_size, s.enable_prefix_caching)  # + null block
    return SCHEDULERS[s.scheduler](s, kv, 1000)


def drive(sched, arrivals: dict[int, list[Request]], steps: int) -> list[list[tuple[str, int]]]:
    """Run `steps` steps; requests in arrivals[k] join before step k. Returns each step's
    [(name, new tokens)], checking the scheduler's invariants after every step."""
    out = []
    for k in range(1, steps + 1):
        for r in arrivals.get(k, []):
            r.arrival_s = k - 1.0
            sched.add_request(r)
        plan = sched.schedule(k - 1.0)
        pairs = zip(plan.requests, plan.num_new_tokens, strict=True)
        out.append([(chr(r.request_id), n) for r, n in pairs])
        sched.update_from_output(plan, float(k))
        sched.check_invariants()
    return out


def test_vllm_v0_prefill_first_stalls_decodes():
    """V0 without chunked prefill: a step that admits prompts runs only those prefills."""
    sched = make("vllm@0.6.6", 40, max_model_len=64)
    a, b, c = req("A", 32, 3), req("B", 32, 3), req("C", 16, 2)
    steps = drive(sched, {1: [a, b], 3: [c]}, 4)
    assert steps == [
        [("A", 32), ("B", 32)],  # both prompts whole
        [("A", 1), ("B", 1)],
        [("C", 16)],  # C's prefill runs alone: A and B wait a step
        [("A", 1), ("B", 1), ("C", 1)],
    ]
    assert a.finish_s == b.finish_s == c.finish_s == 4.0


def test_vllm_v0_swap_preemption_keeps_the_computed_tokens():
    """Six blocks, two requests growing to 72 tokens: the newest is swapped out over PCIe
    and comes back where it stopped instead of recomputing its prompt."""
    sched = make("vllm@0.6.6", 6, max_model_len=128, preemption_mode="swap")
    a, b = req("A", 32, 40), req("B", 32, 40)
    steps = drive(sched, {1: [a, b]}, 90)
    prefill = sum(n for step in steps for _, n in step if n > 1)
    assert prefill == 64  # the two prompts once each: nothing recomputed
    assert b.num_preemptions >= 1 and b.num_output_tokens == 40 and a.num_output_tokens == 40
    assert sched.num_preemptions >= 1 and not sched.swapped
    assert sched.cpu_blocks_free == sched.cpu_blocks_total


def test_vllm_v0_recompute_preemption_recomputes():
    sched = make("vllm@0.6.6", 6, max_model_len=128)
    a, b = req("A", 32, 40), req("B", 32, 40)
    steps = drive(sched, {1: [a, b]}, 120)
    prefill = sum(n for step in steps for _, n in step if n > 1)
    assert b.num_preemptions >= 1 and prefill > 64  # B's prompt and outputs again
    assert a.status is b.status is Status.FINISHED


def test_vllm_v0_multi_step_holds_new_requests_for_the_window():
    sched = make("vllm@0.6.6", 40, max_model_len=64, num_scheduler_steps=4)
    a, c = req("A", 16, 8), req("C", 16, 2)
    steps = drive(sched, {1: [a], 3: [c]}, 7)
    assert steps[:6] == [
        [("A", 16)],
        [("A", 1)],  # a 4-step decode window starts
        [("A", 1)],  # C arrived, but the window is not over
        [("A", 1)],
        [("A", 1)],
        [("C", 16)],
    ]


def test_vllm_v1_mixes_decodes_and_prefill_chunks():
    sched = make("vllm@0.10.2", 40, max_num_batched_tokens=24, max_num_seqs=4)
    a, b = req("A", 16, 3), req("B", 40, 2)
    steps = drive(sched, {1: [a], 2: [b]}, 5)
    assert steps == [
        [("A", 16)],
        [("A", 1), ("B", 23)],  # decode first, then a chunk of B with the rest of the budget
        [("A", 1), ("B", 17)],  # A's last token; B's prefill done
        [("B", 1)],
        [],
    ]


def test_sglang_prefill_first_chunks_and_stalls_decodes():
    """SGLang: a step is all prefill or all decode; a long prompt goes in chunks of
    chunked_prefill_size and the running requests wait for all of them. (Without the overlap
    scheduler, so that C is seen by the step after it arrives: tests/test_sglang_mixed_chunk.py
    holds the overlap's one-step planning lag.)"""
    sched = make("sglang@0.4.6", 40, chunked_prefill_size=16, disable_overlap_schedule=True)
    a, b, c = req("A", 40, 3), req("B", 8, 3), req("C", 40, 2)
    steps = drive(sched, {1: [a, b], 4: [c]}, 9)
    assert steps == [
        [("A", 16)],  # A becomes the chunked request
        [("A", 16)],
        [("A", 8), ("B", 8)],  # A's last chunk, then B whole in the chunk left
        [("C", 16)],  # C arrived: prefill first, A and B stall
        [("C", 16)],
        [("C", 8)],
        [("A", 1), ("B", 1), ("C", 1)],
        [("A", 1), ("B", 1)],
        [],
    ]


def test_sglang_admission_reserves_max_new_tokens():
    """Nine blocks (144 tokens): A needs 16 + 60 and B the same; admitted together they would
    claim 152, so B waits for a running request to leave (batch_is_full)."""
    sched = make("sglang@0.4.6", 9)
    a, b = req("A", 16, 60), req("B", 16, 60)
    steps = drive(sched, {1: [a, b]}, 62)
    assert steps[0] == [("A", 16)]
    assert b.first_scheduled_s == a.finish_s == 60.0
    assert sched.num_retractions == 0


def test_sglang_retracts_to_the_back_of_the_queue():
    """The ratio lets B in beside A (A's future tokens count at 0.7); when the pool runs dry
    the request with fewer outputs is retracted and recomputed later (without the overlap
    scheduler's planning lag, which would admit B a step later and change when the pool runs
    dry)."""
    sched = make("sglang@0.4.6", 9, chunked_prefill_size=16, disable_overlap_schedule=True)
    a, b, c = req("A", 16, 60), req("B", 16, 60), req("C", 16, 4)
    drive(sched, {1: [a], 2: [b], 30: [c]}, 400)
    assert sched.num_retractions >= 1 and b.num_preemptions >= 1
    assert all(r.status is Status.FINISHED for r in (a, b, c))
    assert c.first_scheduled_s < b.finish_s  # B went to the back, behind C
    assert sched.new_token_ratio == sched.init_ratio  # idle resets it


def test_trtllm_guaranteed_no_evict_reserves_the_whole_sequence():
    """Five blocks: A reserves ceil((16 + 40) / 16) = 4, so B (2 blocks) waits for A."""
    sched = make("trtllm", 5, tokens_per_block=16)
    a, b = req("A", 16, 40), req("B", 16, 8)
    steps = drive(sched, {1: [a, b]}, 50)
    assert steps[0] == [("A", 16)]
    assert b.first_scheduled_s == a.finish_s == 40.0
    assert sched.num_preemptions == 0


def test_trtllm_max_utilization_packs_then_pauses():
    sched = make("trtllm", 5, tokens_per_block=16, capacity_scheduler_policy="MAX_UTILIZATION")
    a, b = req("A", 16, 40), req("B", 16, 40)
    steps = drive(sched, {1: [a, b]}, 120)
    assert steps[0] == [("A", 16), ("B", 16)]  # both start at once
    assert sched.num_preemptions >= 1 and b.num_preemptions >= 1  # the newest is paused
    assert a.status is b.status is Status.FINISHED


def test_trtllm_mixes_context_and_generation_and_refuses_long_prompts():
    sched = make("trtllm", 40, tokens_per_block=16, max_num_tokens=64)
    a, c = req("A", 16, 4), req("C", 32, 2)
    steps = drive(sched, {1: [a], 2: [c]}, 3)
    assert steps == [[("A", 16)], [("A", 1), ("C", 32)], [("A", 1), ("C", 1)]]
    assert "exceeds max_num_tokens 64" in sched.admission_error(req("L", 100, 1))


def test_orca_takes_the_whole_sequence_up_front():
    sched = make("orca", 40)
    a = req("A", 16, 40)
    drive(sched, {1: [a]}, 1)
    assert sched.kv.num_used_blocks == 4  # ceil((16 + 40) / 16), not 1


def test_static_batch_runs_to_its_longest_member():
    sched = make("static", 40)
    a, b, c = req("A", 16, 2), req("B", 16, 4), req("C", 16, 1)
    steps = drive(sched, {1: [a, b], 2: [c]}, 6)
    assert steps == [
        [("A", 16), ("B", 16)],
        [("A", 1), ("B", 1)],  # A is done after this step but keeps its row
        [("B", 1)],
        [("B", 1)],
        [("C", 16)],  # C waited for the whole batch
        [],
    ]
    assert a.finish_s == b.finish_s == 4.0  # the batch's responses complete together
    assert a.last_token_s == 2.0


def test_vllm_v1_priority_serves_the_urgent_first_and_preempts_the_least():
    sched = make(
        "vllm", 40, max_num_batched_tokens=16, max_num_seqs=1, scheduling_policy="priority"
    )
    a, b, c = req("A", 16, 2), req("B", 16, 2), req("C", 16, 2)
    a.priority, b.priority, c.priority = 0, 5, 1
    steps = drive(sched, {1: [a, b, c]}, 6)
    assert [s[0][0] for s in steps] == ["A", "A", "C", "C", "B", "B"]  # by priority, not arrival
