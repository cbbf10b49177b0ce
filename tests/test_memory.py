"""The memory plan and the settings the real engine refuses at start-up."""

from __future__ import annotations

import dataclasses

import pytest

from sim.cost.kernels import KernelPricer
from sim.cost.step import CostModel
from sim.engines.resolve import resolve
from sim.engines.vllm import profile_sampler_bytes_per_logit
from sim.errors import UserError
from sim.kv.memory import cuda_total_bytes, plan_memory, trtllm_profile_requests
from sim.paths import HARDWARE_DIR
from sim.specs.hardware import hardware_names, load_hardware
from sim.specs.model_config import load_model
from sim.workload.request import Status
from tests.conftest import shared_data, unit_profile
from tests.test_scheduler_families import make, req

GIB = 2**30


def plan(model="llama-3.1-8b", hardware="h100-sxm", tp=1, engine="vllm", **args):
    hw, m = load_hardware(hardware), load_model(model)
    return plan_memory(hw, m, resolve(engine, hw, m, tp, overrides=args), tp, "auto")


def test_kv_pool_is_what_remains():
    p = plan()
    remaining = (
        int(p.total_bytes * p.gpu_memory_utilization)
        - p.weight_bytes
        - p.activation_bytes
        - p.cudagraph_bytes
        - p.non_torch_bytes
    )
    assert p.kv_cache_bytes == remaining
    assert p.num_blocks == remaining // (131_072 * 16)
    assert p.weight_bytes == 2 * 8_030_261_248


def test_tensor_parallel_splits_weights_and_kv_heads():
    one, four = plan("llama-3.1-70b", "h100-sxm", 4), plan("llama-3.1-70b", "h100-sxm", 8)
    assert one.kv_bytes_per_token == 327_680 // 4 and four.kv_bytes_per_token == 327_680 // 8
    assert four.weight_bytes * 2 == pytest.approx(one.weight_bytes, rel=1e-6)


def test_model_that_does_not_fit():
    with pytest.raises(UserError, match=r"raise parallel\.tp"):
        plan("llama-3.1-70b", "h100-sxm", 1)


def test_max_model_len_beyond_the_pool():
    with pytest.raises(UserError, match="longest that fits"):
        plan("llama-3.1-8b", "rtx-4090", 1, gpu_memory_utilization=0.9)


def test_sglang_caps_requests_at_its_pool_instead_of_refusing():
    """SGLang starts with a pool shorter than the context (tp_worker.py: max_req_len is the
    smaller of the two) and refuses only the requests that do not fit; vLLM refuses to start.
    Qwen3-32B on one H100 (AIConfigurator's sglang@0.5.8.post1 rows): 40,960 tokens of
    context, 10 GiB of KV, more than the pool."""
    hw, m = load_hardware("h100-sxm"), load_model("qwen3-32b")
    settings = resolve("sglang@0.5.8.post1", hw, m, 1, overrides={})
    p = plan_memory(hw, m, settings, 1, "bf16")
    assert settings.max_model_len == 40960 > p.kv_capacity_tokens > 0
    long, short = req("a", p.kv_capacity_tokens, 16), req("b", 1024, 128)
    sched = make("sglang@0.5.8.post1", p.num_blocks - 1, max_model_len=40960)
    assert "do not fit the KV pool" in sched.admission_error(long)
    assert sched.admission_error(short) is None
    with pytest.raises(UserError, match="longest that fits"):
        plan("qwen3-32b", "h100-sxm", 1, engine="vllm@0.11.0")


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ({"max_num_batched_tokens": 8, "max_num_seqs": 4}, "below block_size"),
        ({"max_num_batched_tokens": 100}, "must be >= max_num_seqs"),
        ({"gpu_memory_utilization": 1.5}, r"\(0, 1\]"),
        ({"block_size": 24}, "block_size=24"),
        ({"max_model_len": 10**7}, "max_position_embeddings"),
        ({"enable_chunked_prefill": False, "max_num_batched_tokens": 4096}, "chunked prefill off"),
        ({"max_num_seqs": "many"}, "expected int"),
        ({"num_gpu_blocks_override": -1}, "at least 2 blocks"),
        ({"num_gpu_blocks_override": 100}, "the pool holds"),
    ],
)
def test_impossible_settings(args, match):
    with pytest.raises(UserError, match=match):
        plan(**args)


def test_measured_rtx4090_block_count_is_close():
    """vLLM 0.19 on an RTX 4090 (LLMServingSim's run) allocated 2,588 blocks for Llama-3.1-8B
    at utilisation 0.9, budget 2,048, max_num_seqs 256, no graph-memory subtraction. The prior
    memory plan should land within 10% of that."""
    import json

    meta = json.loads(
        shared_data("LLMServingSim/bench_examples/RTX4090/Llama-3.1-8B/vllm/meta.json").read_text()
    )
    p = plan(
        "llama-3.1-8b",
        "rtx-4090",
        1,
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=2048,
        max_num_seqs=256,
        max_model_len=32768,
        cudagraph_memory_bytes=0,
    )
    assert p.num_blocks == pytest.approx(meta["kv_cache"]["num_gpu_blocks"], rel=0.10)


def test_num_gpu_blocks_override_sets_the_pool():
    """vLLM's --num-gpu-blocks-override replaces the profiled block count (null block included)."""
    p = plan(num_gpu_blocks_override=2588, max_model_len=32768)
    assert p.num_blocks == 2588 and p.kv_capacity_tokens == 2587 * 16


def test_experts_over_every_data_parallel_rank_free_memory():
    hw, m = load_hardware("h200"), load_model("qwen3-30b-a3b")
    s = resolve("vllm@0.19.0", hw, m, 1)
    alone = plan_memory(hw, m, s, 1, "auto")
    spread = plan_memory(hw, m, s, 1, "auto", ep=2)
    experts = m.expert_params * 2  # bf16
    assert alone.weight_bytes - spread.weight_bytes == pytest.approx(experts / 2, rel=1e-6)
    assert spread.num_blocks > alone.num_blocks


def test_larger_budget_and_more_sequences_shrink_the_pool_by_the_profile_peak():
    """Llama-3.1-70B on two H100s at 0.95: raising max_num_batched_tokens 2,048 -> 16,384 and
    max_num_seqs 256 -> 1,024 grows the profile run's peak by what the memory plan derives,
    and the KV pool shrinks by exactly that. Both peaks are the sampler warm-up's (vLLM 0.8.5:
    sort-based top-k/top-p, 38 bytes per logit over max_num_seqs x 128,256 at the sort, plus
    the forward's hidden states), not the forward's."""
    small = plan("llama-3.1-70b", "h100-sxm", 2, "vllm@0.8.5", **OLD, gpu_memory_utilization=0.95)
    large = plan("llama-3.1-70b", "h100-sxm", 2, "vllm@0.8.5", **NEW, gpu_memory_utilization=0.95)

    def sampler(tokens, seqs):
        return tokens * 8192 * 2 + seqs * 128_256 * 38

    assert small.activation_bytes == sampler(2048, 256)
    assert large.activation_bytes == sampler(16384, 1024)
    drop = small.kv_cache_bytes - large.kv_cache_bytes
    assert drop == sampler(16384, 1024) - sampler(2048, 256)
    assert drop / GIB == pytest.approx(3.70, abs=0.01)  # ~3.7 of 7.9 GiB of KV per GPU
    assert large.num_blocks < 0.55 * small.num_blocks


OLD = {"max_num_batched_tokens": 2048, "max_num_seqs": 256, "max_model_len": 4096}
NEW = {"max_num_batched_tokens": 16384, "max_num_seqs": 1024, "max_model_len": 4096}


@pytest.mark.parametrize(
    ("spec", "per_logit"),
    [("vllm@0.6.6", 38), ("vllm@0.7.3", 38), ("vllm@0.8.5", 38), ("vllm@0.19.0", 14)],
)
def test_sampler_warm_up_by_release(spec, per_logit):
    """The sampler's peak per logit by release: V0 and V1 0.8-0.17 sort the vocabulary; V1
    before 0.8 ran no sampler in the profile; from 0.18 the Triton top-k/top-p works in place.
    With a small budget the sampler, not the forward, sets the peak."""
    args = {"max_num_batched_tokens": 1024, "max_num_seqs": 256, "max_model_len": 1024}
    if spec == "vllm@0.6.6":
        args["enable_chunked_prefill"] = True
    p = plan(engine=spec, **args)
    assert profile_sampler_bytes_per_logit("0.7.3", v1=True) == 6  # V1 opt-in: logits only
    forward_rows = 1024 * 4096 * 2
    assert p.activation_bytes == max(
        1024 * 2 * (4 * 4096 + (6144 + 3 * 14336)), forward_rows + 256 * 128_256 * per_logit
    )


def test_forward_sets_the_peak_when_the_budget_is_large_and_sequences_few():
    """vLLM's forward peak is its larger phase, the MLP's: 3 x hidden + 3 x intermediate."""
    p = plan(max_num_batched_tokens=65536, max_num_seqs=8, max_model_len=4096)
    assert p.activation_bytes == 65536 * 2 * (3 * 4096 + 3 * 14336)


def test_other_engines_keep_their_activation_prior():
    """SGLang sizes its pool without activations; TensorRT-LLM subtracts the forward and the
    fp32 logits of its profile run's dummy requests (no vLLM sampler table): max_num_tokens
    filled with requests of min(max_num_tokens, max_seq_len) tokens, one logit row each
    (KvCacheCreator._create_dummy_context_requests), not max_batch_size rows."""
    hw, m = load_hardware("h100-sxm"), load_model("llama-3.1-8b")
    s = resolve("trtllm", hw, m, 1)
    p = plan_memory(hw, m, s, 1, "auto")
    forward = s.max_num_batched_tokens * 2 * (4 * 4096 + (6144 + 3 * 14336))
    assert s.max_model_len >= s.max_num_batched_tokens  # one request fills the budget
    assert trtllm_profile_requests(s) == 1
    logits = 1 * 128_256 * 4
    assert p.activation_bytes == max(forward + logits, 3 * logits)
    # a short max_seq_len splits the budget into more requests, each with its own row:
    # trtllm-bench's 23,552 tokens at max_seq_len 157 (NVIDIA/TensorRT-LLM#6294) make 151
    short = dataclasses.replace(s, max_num_batched_tokens=23552, max_model_len=157)
    assert trtllm_profile_requests(short) == 151
    more = plan_memory(hw, m, short, 1, "auto").activation_bytes
    fwd = 23552 * 2 * (4 * 4096 + (6144 + 3 * 14336))
    assert more == max(fwd + 151 * 128_256 * 4, 3 * 151 * 128_256 * 4)


def test_recompute_preemption_re_prefills_prompt_and_outputs_and_is_priced():
    """vLLM V1 recompute preemption: the victim's blocks are freed and, when it is admitted
    again, its prompt and every token it had generated are prefilled anew (prefix caching
    off, so nothing is found in the cache); the step that does it costs a prefill of that
    length, not a decode."""
    sched = make("vllm@0.9.2", 6, max_model_len=128, enable_prefix_caching=False)
    a, b = req("A", 32, 40), req("B", 32, 40)
    hw, m = load_hardware("h100-sxm"), load_model("llama-3.1-8b")
    settings = resolve("vllm@0.9.2", hw, m, 1, overrides={"enable_prefix_caching": False})
    cost = CostModel(m, settings, 1, "auto", KernelPricer(hw, unit_profile()), unit_profile())
    sched.add_request(a)
    sched.add_request(b)
    recompute_costs, marks, clock = [], {}, 0.0
    while a.status is not Status.FINISHED or b.status is not Status.FINISHED:
        plan_ = sched.schedule(clock)
        for r, n, c in zip(
            plan_.requests, plan_.num_new_tokens, plan_.num_context_tokens, strict=True
        ):
            if r.num_preemptions and marks.get(r.request_id) != r.num_preemptions and c == 0:
                marks[r.request_id] = r.num_preemptions
                assert n == r.prompt_len + r.num_output_tokens  # all of it again, one chunk
                recompute_costs.append((cost.step_cost(plan_).gpu_s, n))
        clock += 1.0
        sched.update_from_output(plan_, clock)
        assert clock < 400
    assert recompute_costs, "the pool of 6 blocks must force a recompute preemption"
    decode = cost.batch_cost([1], [72], 1).gpu_s
    assert all(gpu_s > decode for gpu_s, _ in recompute_costs)
    assert sched.num_preemptions == len(marks)


def test_mxfp4_experts_are_padded_for_the_kernel_that_runs_them():
    """vLLM runs MXFP4 experts on Marlin below SM100 until 0.12 (on Ampere after) and pads
    gpt-oss-120b's 2,880 x 2,880 experts to 2,944 x 3,072 (mxfp4.py): 5.13 GiB more on one
    H100, as vLLM 0.10.1 logged (65.97 GiB loaded, vllm-project/vllm#23278); SGLang and
    Blackwell parts keep the checkpoint's bytes."""
    m = load_model("gpt-oss-120b")
    checkpoint = m.weight_bytes("fp4")

    def weights(engine, hardware, tp=1):
        hw = load_hardware(hardware)
        small = {"max_model_len": 4096, "max_num_seqs": 64} if engine.startswith("vllm") else {}
        settings = resolve(engine, hw, m, tp, overrides=small)
        return plan_memory(hw, m, settings, tp, "fp4").weight_bytes

    assert (weights("vllm@0.11.0", "h100-sxm") - checkpoint) / GIB == pytest.approx(5.13, abs=0.01)
    assert weights("vllm@0.11.0", "h100-sxm") / GIB == pytest.approx(65.97, abs=0.2)  # the log
    assert weights("vllm@0.11.0", "b200") == checkpoint
    assert weights("sglang@0.5.8.post1", "h100-sxm") == checkpoint
    # TP2: 1,440 per rank pads to 1,536, the hidden size to 3,072 as at TP1
    assert weights("vllm@0.11.0", "h100-sxm", 2) > checkpoint // 2
    # Hopper from 0.12 runs the Triton kernel, which pads the intermediate size alone to 64
    # (mxfp4.py of the 0.18.0 wheel): none at TP1 (2,880), TP8's 360 per rank to 384
    assert weights("vllm@0.18.0", "h200") == checkpoint
    from sim.specs.model import DTYPE_BYTES

    expert_bytes = m.expert_params * DTYPE_BYTES["fp4"]  # with its block scales
    assert weights("vllm@0.18.0", "h200", 8) - checkpoint // 8 == pytest.approx(
        expert_bytes / 8 * (384 / 360 - 1), rel=1e-3
    )
    assert weights("vllm@0.19.0", "a100-80gb") > checkpoint  # Ampere keeps Marlin


def test_engines_size_against_the_cuda_visible_total():
    """vLLM multiplies gpu_memory_utilization by torch.cuda.mem_get_info()'s total, which on an
    H100 80GB HBM3 is 79.11 GiB (vllm-project/vllm#48601), not nvidia-smi's 79.65 GiB; GPUs
    without a logged figure keep the catalogue's."""
    h100, a100 = load_hardware("h100-sxm"), load_hardware("a100-80gb")
    assert cuda_total_bytes(h100) == int(79.11 * GIB) < h100.hbm_bytes
    assert cuda_total_bytes(a100) == a100.hbm_bytes
    model = load_model("llama-3.1-8b")
    settings = resolve("vllm@0.6.5", h100, model, 1, overrides={"max_model_len": 8192})
    plan = plan_memory(h100, model, settings, 1, "bf16")
    assert plan.total_bytes == cuda_total_bytes(h100)
    smaller = dataclasses.replace(h100, hbm_bytes=int(70 * GIB))  # never above the catalogue
    assert cuda_total_bytes(smaller) == smaller.hbm_bytes
    logged = {n for n in hardware_names() if load_hardware(n).cuda_total_bytes}
    assert logged <= {"h100-sxm", "h200", "a100-80gb", "a100-40gb"}


def test_a_cuda_total_above_the_gpus_memory_is_refused(tmp_path):
    """A GPU file's cuda_total_bytes is what the driver keeps of hbm_bytes: never more."""
    text = (HARDWARE_DIR / "h100-sxm.yaml").read_text()
    bad = tmp_path / "gpu.yaml"
    bad.write_text(text.replace("cuda_total_bytes: 84943715696", "cuda_total_bytes: 9e99"))
    with pytest.raises(UserError, match="cuda_total_bytes must be a whole number of bytes"):
        load_hardware(str(bad))
    bad.write_text(text.replace("cuda_total_bytes: 84943715696", "cuda_total_bytes: 85520809985"))
    with pytest.raises(UserError, match="at most hbm_bytes"):
        load_hardware(str(bad))
