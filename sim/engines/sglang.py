"""SGLang's defaults and derivation rules (ServerArgs), release by release.

Read from the released sources of 0.3.6, 0.4.6 and 0.5.10.post1 (sdists) and 0.5.23 (wheel):
srt/server_args.py (0.5.23: srt/arg_groups/), managers/scheduler.py, managers/schedule_policy.py,
model_executor/model_runner.py, model_executor/cuda_graph_runner.py, global_config.py. GPU
memory tiers compare the memory nvidia-smi reports (MiB; H100-SXM 81559, H200 143771).

0.3.0 .. 0.3.5 were read from their wheels (`pip download sglang==0.3.N --no-deps`): the same
files, with managers/tp_worker.py and managers/policy_scheduler.py in place of scheduler.py and
schedule_policy.py before 0.3.3. What differs from 0.3.6: no overlap scheduler before 0.3.4 and
opt-in in 0.3.4-0.3.5 (enable_overlap_schedule); no GPU-memory tiers (chunk 8192, graphs up to
160 on every GPU); mem_fraction_static 0.83 at TP 8; before 0.3.5 the ratios of global_config.py
(0.7, floor 0.1 x schedule_conservativeness, 0.001 per step) and lpm at any queue length; before
0.3.3 no batch_is_full, so admission is retried at every step; 0.3.0's request pool holds
5120. 0.3.0-0.3.3 also run up to 10 decode steps between admissions (num_continue_decode_steps),
but stop after one when a running request streams, as every simulated request does.

0.4.3, 0.4.3.post3, 0.4.4.post2, 0.4.5.post1 (wheels; their .postN read beside them): the
block-FP8 GEMM kernel, its JIT and schedule_policy's default, sim/engines/sglang_fp8.py.

0.4.7, 0.4.8, 0.5.3 and 0.5.6 (wheels; 0.5.1.post1, 0.5.2, 0.5.6.post2, 0.5.8.post1 and 0.5.9 read
beside them, the same rules) differ from their neighbours in the GPU-memory defaults
(sim/engines/sglang_memory.py) and in retraction (managers/schedule_batch.py retract_decode):
until 0.5.2 a batch retracts until 20 decode steps' tokens per request are free; from 0.5.3 until
one more step fits (check_decode_mem), the new ratio's denominator gaining 1 from 0.5.6. Qwen3
and Llama 4 are in 0.4.8's srt/models/; gpt-oss, Qwen3-Next and DeepSeek-V3.2 arrive by 0.5.3,
Kimi-Linear by 0.5.6.

Rule sets read from the release itself where the changelog (sim/engines/changelogs/sglang.yaml)
showed a modelled change between the lines above (wheels; server_args.py, cuda_graph_runner.py,
model_runner.py, utils.py): 0.3.5.post2 (memory tiers below 25,000 MiB), 0.4.0 (mem_fraction_static
0.81 at TP 8, graphs to 8 below 25,000 MiB), 0.4.0.post1 (80 at TP >= 4 there), 0.4.5.post3 (the
13 GiB rule above 81,920 MiB), 0.4.6.post2 (the 96 GiB tier), 0.4.7.post1 (the fixed reserves of
0.4.8): sim/engines/sglang_memory.py; the attention backend by release (FA3 on Hopper from
0.4.5.post1, its architecture list by release, which 0.4.6.post4 and post5 shorten), 0.3.1.post1
(Triton on ROCm), 0.4.6.post5 (aiter on ROCm), 0.5.0rc0 and
0.5.0rc2 (gpt-oss's backend): sim/engines/sglang_attention.py; 0.5.1 and 0.5.1.post1 (DeepGEMM
on SM90 alone, then on SM90 and later again): sim/engines/sglang_fp8.py; 0.5.3rc2, whose
package is 0.5.3's but for version.py: the rules of 0.5.3; 0.5.4.post1 (graphs to 24, not 16,
on 20-35 GiB GPUs at TP < 4): sim/engines/sglang_memory.py; 0.5.4.post2 (Kimi-Linear without the
radix cache) and 0.5.5.post2 (Qwen3-Next's radix cache turns the overlap scheduler off):
_hybrid_models below; 0.5.6.post1 (trtllm_mha on every Blackwell, SM120 included), 0.5.7 (on
SM100 alone) and 0.5.8 (FA3 for every MHA model on Hopper): sim/engines/sglang_attention.py;
0.5.10rc0, whose server_args.py differs from 0.5.10's only in branches not modelled (NSA's TRT-LLM
prefill, FlashInfer all-reduce fusion, gpt-oss's MoE kernel under driver 595, Whisper): the rules
of 0.5.10 (its piecewise prefill graphs on by default included; read in both wheels); 0.5.14
(mamba_radix_cache_strategy 'auto': Qwen3-Next keeps the overlap scheduler, Kimi-Linear keeps its
radix cache) and 0.5.16 (Kimi-Linear keeps the overlap scheduler too): _hybrid_models below;
0.5.20 (chunk 4096 and graphs to 48 / 160 on 20-35 GiB GPUs): sim/engines/sglang_memory.py.
Releases checked with no modelled change: sim/engines/changelogs/reviewed_sglang.yaml.

enable_mixed_chunk (off by default; read in the 0.5.1.post1, 0.5.6.post2 and 0.5.9 wheels'
managers/scheduler.py and schedule_policy.py) lets a prefill step carry the running decodes:
sim/schedulers/sglang.py.
"""

from __future__ import annotations

from dataclasses import replace

from sim.engines import sglang_03, sglang_attention, sglang_fp8, sglang_memory
from sim.engines.overheads import cpu_overheads
from sim.engines.settings import user_value
from sim.engines.versions import release_key, version_tuple
from sim.specs.hardware import Hardware
from sim.specs.model import ModelSpec

RELEASES = (
    "0.3.0",
    "0.3.1",
    "0.3.1.post1",
    "0.3.2",
    "0.3.3",
    "0.3.4",
    "0.3.5",
    "0.3.5.post2",
    "0.3.6",
    "0.4.0",
    "0.4.0.post1",
    "0.4.3",
    "0.4.3.post3",
    "0.4.4.post2",
    "0.4.5.post1",
    "0.4.5.post3",
    "0.4.6",
    "0.4.6.post2",
    "0.4.6.post4",
    "0.4.6.post5",
    "0.4.7",
    "0.4.7.post1",
    "0.4.8",
    "0.5.0rc0",
    "0.5.0rc2",
    "0.5.1",
    "0.5.1.post1",
    "0.5.3rc2",
    "0.5.3",
    "0.5.4.post1",
    "0.5.4.post2",
    "0.5.5.post2",
    "0.5.6",
    "0.5.6.post1",
    "0.5.7",
    "0.5.8",
    "0.5.10rc0",
    "0.5.10",
    "0.5.14",
    "0.5.16",
    "0.5.20",
    "0.5.23",
)
# The last release read (of RELEASES) whose srt/models/ lacks an architecture of the catalogue;
# releases between it and the next one read are not known either way. (0.3.0-0.3.5 have the
# same catalogue architectures as 0.3.6: Llama, Mistral, Mixtral, Qwen2.)
ARCHITECTURE_ABSENT_THROUGH = {
    "DeepseekV3ForCausalLM": "0.3.6",
    "Gemma3ForConditionalGeneration": "0.3.6",
    "Llama4ForConditionalGeneration": "0.3.6",
    "Qwen3ForCausalLM": "0.3.6",
    "Qwen3MoeForCausalLM": "0.3.6",
    "DeepseekV32ForCausalLM": "0.4.8",
    "GptOssForCausalLM": "0.4.8",
    "KimiLinearForCausalLM": "0.5.3",
    "Qwen3NextForCausalLM": "0.4.8",
    "MiniMaxText01ForCausalLM": "0.5.23",
}
MIB = 2**20
INIT_RATIO = 0.7  # init_new_token_ratio (x schedule_conservativeness, at most 1)
MIN_RATIO_FACTOR = 0.14  # min_new_token_ratio = init x 0.14
DECAY_STEPS = 600  # the ratio falls from init to min over 600 decode steps
OLD_MIN_RATIO = 0.1  # before 0.3.5: base_min_new_token_ratio (x schedule_conservativeness)
OLD_DECAY = 0.001  # before 0.3.5: new_token_ratio_decay per decode step
KIMI_NO_RADIX_FROM = "0.5.4.post2"  # server_args.py: KimiLinearForCausalLM -> no radix cache
QWEN3_NEXT_FROM = "0.5.5.post2"  # Qwen3NextForCausalLM with the radix cache -> no overlap
MAMBA_AUTO_FROM = "0.5.14"  # mamba_radix_cache_strategy 'auto': extra_buffer keeps the overlap
KIMI_EXTRA_BUFFER_FROM = "0.5.16"  # arg_groups/overrides.py: Kimi-Linear takes extra_buffer too
LPM_MAX_QUEUE = 128  # 0.3.5+: above this many waiting requests, lpm falls back to fcfs
APPLICABLE = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_prefill_tokens",
    "max_model_len",
    "enable_prefix_caching",
    "attention_backend",
    "cudagraph_mode",
    "cudagraph_capture_sizes",
    "compile",
    "fp8_gemm_backend",
    "jit_first_use",
    "scheduler",
    "policy",
    "preemption_mode",
    "async_scheduling",
    "enable_mixed_chunk",
    "new_token_ratio",
    "min_new_token_ratio",
    "new_token_ratio_decay",
    "retract_decode_steps",
    "retract_ratio_offset",
    "cpu_step_overhead_s",
    "cpu_per_seq_overhead_s",
    "cpu_output_per_seq_s",
    "cpu_exposed_s",
    "prefix_hash_s_per_token",
    "gpu_memory_utilization",
    "block_size",
    "kv_cache_dtype",
    "non_torch_memory_bytes",
)
NAMES = {
    "max_num_seqs": "max_running_requests",
    "max_num_batched_tokens": "chunked_prefill_size",
    "max_model_len": "context_length",
    "enable_prefix_caching": "disable_radix_cache",
    "policy": "schedule_policy",
    "async_scheduling": "disable_overlap_schedule",
    "new_token_ratio": "init_new_token_ratio",
    "gpu_memory_utilization": "mem_fraction_static",
    "block_size": "page_size",
    "cudagraph_capture_sizes": "cuda_graph_bs",
    "compile": "enable_torch_compile",
}


def releases(engine: str) -> tuple[str, ...]:
    return RELEASES


def unsupported_model(version: str, model: ModelSpec) -> str | None:
    """Why SGLang `version` cannot load `model`, if it is known not to."""
    absent = ARCHITECTURE_ABSENT_THROUGH.get(model.architecture)
    if absent is None:
        return None
    newest = absent == RELEASES[-1]  # absent from every release read
    if newest or version_tuple(version) <= version_tuple(absent):
        where = f"SGLang {absent}'s srt/models/"
        if version in RELEASES and version_tuple(version) < version_tuple(absent):
            where = f"SGLang {version}'s srt/models/ (nor in any release read up to {absent})"
        return (
            f"SGLang {version} cannot serve {model.name}: {model.architecture} is not in "
            f"{where}" + ("" if newest else "; use a later release")
        )
    return None


def defaults(
    engine: str,
    release: str,
    hw: Hardware,
    model: ModelSpec,
    tp: int,
    entry_point: str,
    overrides: dict | None = None,
):
    v = version_tuple(release)
    at = f"sglang {release}"
    mem_mib = hw.hbm_bytes / MIB
    values, rules = {}, {}

    def put(knob, value, rule):
        values[knob], rules[knob] = value, rule

    names = _names(v)
    loop = "managers/scheduler.py" if v >= (0, 3, 3) else "managers/tp_worker.py"
    put("scheduler", "sglang", f"{at}: prefill-first scheduler ({loop})")
    chunk, graph_bs, tier = sglang_memory.chunk_and_graph_bs(release, mem_mib, tp)
    put("max_num_batched_tokens", chunk, f"{at}: chunked_prefill_size {chunk}: {tier}")
    values["graph_max_bs"] = graph_bs
    rules["cudagraph_capture_sizes"] = f"{at}: cuda_graph_max_bs {graph_bs}: {tier}"
    if v < (0, 3, 5):
        rules["cudagraph_capture_sizes"] = (
            f"{at}: capture sizes up to {graph_bs}, fixed (model_executor/cuda_graph_runner.py; "
            "no cuda_graph_max_bs before 0.3.5)"
        )
    put("max_prefill_tokens", 16384, f"{at}: max_prefill_tokens 16384")
    put("max_num_seqs", 4096, f"{at}: max_running_requests derived from the KV pool")
    put("max_model_len", _max_model_len(model, overrides, names), "derived from the model")
    put("enable_chunked_prefill", True, f"{at}: chunked prefill by chunked_prefill_size")
    put("enable_prefix_caching", True, f"{at}: radix cache on")
    put("long_prefill_token_threshold", 0, "not an SGLang setting")
    put("policy", *sglang_fp8.policy(release))
    put("preemption_mode", "recompute", f"{at}: retracted requests are recomputed")
    put("scheduler_reserve_full_isl", False, "not an SGLang setting")
    put("async_scheduling", *_overlap(v, at))
    for knob, (value, rule) in _hybrid_models(release, model, overrides or {}, at).items():
        put(knob, value, rule)
    put("enable_mixed_chunk", False, f"{at}: enable_mixed_chunk off (server_args.py)")
    put("async_output_proc", True, f"{at}: detokenisation in its own process")
    put("num_scheduler_steps", 1, "not an SGLang setting")
    put("capacity_policy", "", "not an SGLang setting")
    init, low, decay = token_ratios(release, 1.0)
    if v < (0, 3, 5):
        put("new_token_ratio", init, f"{at}: init_new_token_ratio 0.7 (global_config.py)")
        put("min_new_token_ratio", low, f"{at}: base_min_new_token_ratio 0.1 (global_config.py)")
        put("new_token_ratio_decay", decay, f"{at}: 0.001 per decode step (global_config.py)")
    else:
        put("new_token_ratio", init, f"{at}: init_new_token_ratio 0.7 (global config)")
        put("min_new_token_ratio", low, f"{at}: init x 0.14 = {low:.3f}")
        put("new_token_ratio_decay", decay, f"{at}: (init - min) / 600 per decode step")
    if v < (0, 5, 3):
        put("retract_decode_steps", 20, f"{at}: retract until 20 decode steps' tokens are free")
    else:
        put("retract_decode_steps", 1, f"{at}: retract until one more decode step fits")
    if v < (0, 5, 6):
        put("retract_ratio_offset", 0, f"{at}: new ratio = (decoded + 20 x left) / max_new_tokens")
    else:
        put("retract_ratio_offset", 1, f"{at}: the new ratio's denominator gains 1")
    cpu, rule = cpu_overheads("sglang", release)
    for knob, value in cpu.items():
        put(knob, value, rule)
    mla = model.mla is not None
    cuda = hw.vendor == "nvidia"
    frac, why = sglang_memory.mem_fraction(release, mem_mib, tp, chunk, graph_bs, mla, cuda)
    why = f"{at}: mem_fraction_static {why} (srt/server_args.py)"
    context = _max_model_len(model, overrides, names)
    aiter = sglang_attention.aiter_fraction(release, hw, model, context)
    if aiter:
        frac, why = round(frac * aiter[0], 3), f"{why}; {aiter[1]}"
    put("gpu_memory_utilization", frac, why)
    backend, page, _ = attention_backend(engine, release, hw, model, "auto")
    put(
        "block_size",
        page,
        f"{at}: page_size {page}"
        + (" (token-level radix cache)" if page == 1 else f" (the {backend} backend needs it)"),
    )
    put("kv_cache_dtype", "auto", f"{at}: auto")
    put("swap_space_bytes", 0, "not an SGLang setting")
    put("block_watermark", 0.0, "not an SGLang setting")
    put("num_gpu_blocks_override", 0, "not an SGLang setting")
    put("cudagraph_mode", "FULL_DECODE_ONLY", f"{at}: decode batches run as CUDA graphs")
    put("compile", False, sglang_03.compile_rule(release, False))
    backend, jit, backend_rule, jit_rule = sglang_fp8.fp8_gemm(release, hw)
    put("fp8_gemm_backend", backend, backend_rule)
    put("jit_first_use", jit, jit_rule)
    return values, rules, APPLICABLE, names


def _names(v) -> dict:
    """The engine's own argument names: the overlap switch is enable_overlap_schedule in
    0.3.4-0.3.5 and absent before (server_args.py)."""
    names = dict(NAMES)
    if v < (0, 3, 6):
        del names["async_scheduling"]
        if v >= (0, 3, 4):
            names["async_scheduling"] = "enable_overlap_schedule"
    return names


def _hybrid_models(release: str, model: ModelSpec, overrides: dict, at: str) -> dict:
    """Kimi-Linear and Qwen3-Next, models of linear-attention layers (server_args.py
    model-specific adjustments, read in the 0.5.4.post2, 0.5.5.post2, 0.5.6 and 0.5.10 wheels):
    Kimi-Linear runs without the radix cache from 0.5.4.post2; Qwen3-Next with it (its
    MambaRadixCache) turns the overlap scheduler off from 0.5.5.post2 (0.5.10: the default
    no_buffer strategy does the same). From 0.5.14 both keep the radix cache and
    mamba_radix_cache_strategy 'auto' takes extra_buffer, which keeps the overlap scheduler on,
    for the architectures of _support_mamba_cache_extra_buffer (with linear_attn_backend
    'triton', the default) and no_buffer, overlap off, for the rest: Qwen3-Next is listed from
    0.5.14, Kimi-Linear from 0.5.16 (server_args.py in 0.5.14, srt/arg_groups/overrides.py
    _MAMBA_EXTRA_BUFFER_ARCHS from 0.5.15; read in the 0.5.14-0.5.17 and 0.5.19-0.5.23 wheels).
    The extra buffer's mamba state slots are not counted in the KV budget (sim/kv/memory.py)."""
    key = release_key(release)
    if key >= release_key(KIMI_EXTRA_BUFFER_FROM) or (
        key >= release_key(MAMBA_AUTO_FROM) and model.architecture == "Qwen3NextForCausalLM"
    ):
        return {}
    if key >= release_key(MAMBA_AUTO_FROM) and model.architecture == "KimiLinearForCausalLM":
        radix = not _truthy(overrides.get("disable_radix_cache", False))
        if radix and _truthy(overrides.get("enable_prefix_caching", True)):
            why = f"{at}: overlap scheduler off: Kimi-Linear's mamba radix cache takes no_buffer"
            return {"async_scheduling": (False, why + " (server_args.py)")}
        return {}
    if model.architecture == "KimiLinearForCausalLM" and key >= release_key(KIMI_NO_RADIX_FROM):
        return {"enable_prefix_caching": (False, f"{at}: radix cache off for KimiLinearForCausalLM"
                                          " (server_args.py: not yet supported)")}  # fmt: skip
    if model.architecture == "Qwen3NextForCausalLM" and key >= release_key(QWEN3_NEXT_FROM):
        radix = not _truthy(overrides.get("disable_radix_cache", False))
        if radix and _truthy(overrides.get("enable_prefix_caching", True)):
            why = f"{at}: overlap scheduler off: Qwen3-Next's MambaRadixCache does not overlap"
            return {"async_scheduling": (False, why + " (server_args.py)")}
    return {}


def _truthy(value) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _overlap(v, at: str) -> tuple[bool, str]:
    if v < (0, 3, 4):
        return False, f"{at}: no overlap scheduler (it arrives, opt-in, in 0.3.4)"
    if v < (0, 3, 6):
        return False, f"{at}: overlap scheduler off (enable_overlap_schedule False, experimental)"
    return True, f"{at}: overlap scheduler on (disable_overlap_schedule False)"


def token_ratios(release: str, conservativeness: float) -> tuple[float, float, float]:
    """(init, floor, decay per decode step) of new_token_ratio under schedule_conservativeness.
    From 0.3.5 (managers/scheduler.py): init = 0.7 x c, floor = init x 0.14, decaying to it
    over 600 steps. Before (managers/tp_worker.py, then scheduler.py; global_config.py): only
    the floor scales, 0.1 x c; init 0.7 and 0.001 per step are fixed."""
    c = conservativeness
    if version_tuple(release) < (0, 3, 5):
        return INIT_RATIO, min(OLD_MIN_RATIO * c, 1.0), OLD_DECAY
    init = min(INIT_RATIO * c, 1.0)
    low = min(init * MIN_RATIO_FACTOR, 1.0)
    return init, low, (init - low) / DECAY_STEPS


def lpm_queue_limit(release: str) -> int | None:
    """Above this many waiting requests lpm falls back to arrival order (0.3.5+,
    managers/schedule_policy.py); None: lpm sorts a queue of any length (0.3.0-0.3.4)."""
    return LPM_MAX_QUEUE if version_tuple(release) >= (0, 3, 5) else None


def admission_waits_for_a_finish(release: str) -> bool:
    """0.3.3+ (managers/scheduler.py batch_is_full): after an admission fails, none is tried
    until a running request finishes or is retracted. 0.3.0-0.3.2 (managers/tp_worker.py
    get_new_prefill_batch) try again at every step."""
    return version_tuple(release) >= (0, 3, 3)


def capture_sizes(release: str, max_bs: int) -> tuple[tuple[int, ...], str]:
    return sglang_memory.capture_sizes(version_tuple(release), max_bs)


def attention_backend(
    engine: str, release: str, hw: Hardware, model: ModelSpec, kv_dtype: str
) -> tuple[str, int, str]:
    return sglang_attention.attention_backend(release, hw, model)


def after_memory(settings, pool_tokens: int):
    """max_running_requests: half the pool's tokens, within the request pool's size (0.3.0:
    a pool of up to 5120 requests, of which one stays free; model_runner.py, tp_worker.py)."""
    first = version_tuple(settings.rule_set) < (0, 3, 1)
    req_pool = min(
        max(int(pool_tokens / settings.max_model_len * 512), 2048), 5120 if first else 4096
    )
    value = max(1, min(pool_tokens // 2, req_pool - (1 if first else 0)))
    rule = (
        f"sglang {settings.rule_set}: min(KV pool {pool_tokens} tokens / 2, request pool "
        f"{req_pool}{' - 1' if first else ''}) (model_runner.py init_memory_pool)"
    )
    return replace(settings, max_num_seqs=value, rules={**settings.rules, "max_num_seqs": rule})


def _max_model_len(model: ModelSpec, overrides: dict | None, names: dict) -> int:
    """The context the engine derives its budgets from: the user's, else the model's."""
    value = user_value(overrides, "max_model_len", names)
    return int(value) if value is not None else model.max_position_embeddings
