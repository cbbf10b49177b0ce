"""What AIConfigurator's benchmark of a silicon row does to the KV cache that the row does not
record: the KV cache's dtype its generator launches, and the prompts its benchmark client reuses.

FP8 KV cache. AIConfigurator resolves a deployment's KV-cache quantisation from the checkpoint
(ai-dynamo/aiconfigurator aic-core/src/aiconfigurator_core/sdk/models/helpers.py at 095f58a,
_infer_quant_modes_from_raw_config, lines 644-662: a checkpoint quantised fp8, fp8_block or
nvfp4 gets kvcache_quant_mode fp8; before 2026-02-11, src/aiconfigurator/sdk/task.py
_get_quant_mode at ae7ece35a^ gave every FP8 deployment on SM >= 89 an fp8 KV cache), and its
generator passes the result's kvcache column on as the worker's kv_cache_dtype
(src/aiconfigurator/generator/module_bridge.py lines 159-160), which
config/backend_config_mapping.yaml (lines 54-58) turns into vLLM's --kv-cache-dtype fp8
(backend_templates/vllm/cli_args.0.12.0.j2 line 8), and SGLang's --kv-cache-dtype fp8_e4m3
(mapping lines 59-62, rule_plugin/benchmark/sglang.rule line 23). Both rules agree on
checkpoints that carry FP8 or NVFP4 weights themselves; they differ on BF16 checkpoints
quantised online and on gpt-oss (MXFP4), which keep the engine's default. It goes with the
generator's launch: rows that keep the engine's defaults keep its KV dtype too.

Reused prompts. The generator leaves prefix caching at the engine's default, on in vLLM V1: its
rules only ever set disable_prefix_cache = false (rule_plugin/benchmark/vllm.rule line 19, when
the workload shares a prefix), and --no-enable-prefix-caching is written only when that key is
true (cli_args.0.12.0.j2 line 17). Its benchmark script
(config/backend_templates/benchmark/bench_run.sh.j2) runs AIPerf with --random-seed 100 and no
--num-dataset-entries, so every request's prompt is drawn, with replacement, from AIPerf's
default pool of 100 synthetic prompts (ai-dynamo/aiperf at db4f639:
aiperf/common/config/config_defaults.py ConversationDefaults.NUM = 100, "reused until
benchmarking is complete"; aiperf/dataset/dataset_manager.py picks one with a seeded
random.choice). The project's older runner (src/aiconfigurator/eval/benchmarks/
genai_perf_runner.py at ca9dffd61) instead sent 12 x concurrency distinct prompts. Which of the
two measured a row is not recorded; a run whose measured rate needs more prefill compute than
the GPUs have (the prefill_above_peak flag) must have reused cached prompts, so every row of
that run (the same source file, model, engine and GPU) is replayed with AIPerf's pool.
"""

from __future__ import annotations

import re

AIPERF_PROMPTS = 100  # AIPerf's default number of distinct synthetic prompts
KV_BLOCK = 16  # vLLM's KV block on CUDA: a prompt's cached part is whole blocks, and a prompt
# served whole from the cache still computes its last token (vLLM V1 caps a hit at len - 1)
REUSE_NOTE = (
    "the prompts drawn with replacement from AIPerf's default pool of 100, as AIConfigurator's "
    "benchmark script runs it, and served from vLLM's prefix cache (on by default: the "
    "generator does not turn it off), since another row of the same run needs more prefill "
    "compute than the GPUs have"
)


def fp8_kv_checkpoint(hf_id: str) -> bool:
    """Whether AIConfigurator launches a checkpoint with an FP8 KV cache: those carrying FP8 or
    NVFP4 weights (nvidia/*-FP8, Qwen/*-FP8, *-NVFP4, DeepSeek's native block FP8)."""
    name = hf_id.rsplit("/", 1)[-1].upper()
    return bool(re.search(r"(^|[-_])(NV)?FP(8|4)($|[-_])", name)) or hf_id.startswith(
        "deepseek-ai/"
    )


def benchmark_run(row) -> tuple:
    """The run a silicon row belongs to: its source file (the silicon_data_source's
    source_file=, else the whole field less its per-row concurrency) with the model, engine,
    release and GPU."""
    source = str(getattr(row, "silicon_data_source", "") or "")
    found = re.search(r"source_file=([^;]*)", source)
    key = found.group(1).strip() if found else re.sub(r"silicon_concurrency=\d+", "", source)
    return (key, str(row.model_path), str(row.backend), str(row.backend_version), str(row.system))


def replay_reused_prompts(cases: list[dict], runs: list[tuple]) -> int:
    """Give every vLLM case of a run holding a prefill_above_peak row AIPerf's pool of prompts
    and vLLM's prefix cache; returns how many cases changed."""
    reused = {
        run
        for case, run in zip(cases, runs, strict=True)
        if "prefill_above_peak" in case.get("flags", ())
    }
    changed = 0
    for case, run in zip(cases, runs, strict=True):
        if run not in reused or not case["engine"].startswith("vllm@"):
            continue
        loop = case["workload"]["closed_loop"]
        isl = loop["input_len"]
        shared = (isl - 1) // KV_BLOCK * KV_BLOCK
        if shared <= 0:
            continue
        loop["shared_prefix_tokens"] = shared
        loop["num_shared_prefixes"] = AIPERF_PROMPTS
        loop["input_len"] = isl - shared  # the prompt stays isl tokens long
        for args in (case.get("engine_args"), case.get("launch", {}).get("engine_args")):
            if args is not None:
                args["enable_prefix_caching"] = True
        case["notes"] = f"{case['notes']}; {REUSE_NOTE}"
        changed += 1
    return changed
