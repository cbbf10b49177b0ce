"""The silicon importer's account of the KV cache AIConfigurator's benchmarks ran with: an FP8
KV cache for FP8 checkpoints, and AIPerf's pool of 100 reused prompts served from vLLM's
prefix cache for the runs whose measured rate needs more prefill than the GPUs have."""

from __future__ import annotations

import yaml

from sim.scenarios.validate.cases import load_cases
from sim.scenarios.validate.importers.reused_prompts import (
    AIPERF_PROMPTS,
    KV_BLOCK,
    benchmark_run,
    fp8_kv_checkpoint,
)
from sim.scenarios.validate.importers.silicon import silicon
from sim.scenarios.validate.runs import run_case
from tests.conftest import config

HEADER = (
    "id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,"
    "batch_size,tp_size,pp_size,attention_dp_size,moe_ep_size,silicon_ttft_ms,silicon_tpot_ms\n"
)
LLAMA = "nvidia/Llama-3.1-8B-Instruct-FP8"
RUN = "source_file=/data/h200_sxm/vllm/0.12.0/llama.csv; silicon_concurrency="
OTHER = "source_file=/data/h100_sxm/vllm/0.12.0/qwen.csv; silicon_concurrency="
ROWS = (
    # 112 x 1000-token prompts every 1.19 s on one H200: 1.3 PFLOP/s of prefill alone
    f"fast,{RUN}112,vllm,0.12.0,{LLAMA},h200_sxm,fp8,agg,1000,100,112,1,1,,1,71.91,11.25\n"
    # the same run at 16 clients: physically possible, reused all the same
    f"slow,{RUN}16,vllm,0.12.0,{LLAMA},h200_sxm,fp8,agg,8000,100,16,1,1,,1,447.24,15.53\n"
    f"bf16,{OTHER}8,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,,agg,1024,128,8,2,1,,1,154.2,18.0\n"
)


def _cases(tmp_path, rows=ROWS) -> dict[str, dict]:
    path = tmp_path / "silicon.csv"
    path.write_text(HEADER + rows)
    cases, _ = silicon(path, tmp_path / "cases.yaml", backends=["vllm"])
    return {c["id"]: c for c in cases}


def test_fp8_and_nvfp4_checkpoints_get_an_fp8_kv_cache():
    fp8 = (LLAMA, "Qwen/Qwen3-235B-A22B-FP8", "nvidia/DeepSeek-R1-NVFP4", "deepseek-ai/DeepSeek-R1")
    for hf in fp8:
        assert fp8_kv_checkpoint(hf), hf
    for hf in ("Qwen/Qwen3-32B", "openai/gpt-oss-120b", "meta-llama/Llama-3.1-8B-Instruct"):
        assert not fp8_kv_checkpoint(hf), hf


def test_a_run_with_a_physically_impossible_row_replays_aiperfs_prompt_pool(tmp_path):
    cases = _cases(tmp_path)
    fast, slow, bf16 = cases["aic-fast"], cases["aic-slow"], cases["aic-bf16"]
    assert fast["flags"] == ["prefill_above_peak"] and "flags" not in slow
    for c, isl in ((fast, 1000), (slow, 8000)):
        loop = c["workload"]["closed_loop"]
        shared = loop["shared_prefix_tokens"]
        # the prompt stays isl tokens; its cached part is whole blocks, at least one token not
        assert shared + loop["input_len"] == isl and shared % KV_BLOCK == 0
        assert 1 <= loop["input_len"] <= KV_BLOCK
        assert loop["num_shared_prefixes"] == AIPERF_PROMPTS
        assert c["engine_args"]["enable_prefix_caching"] is True
        assert c["launch"]["engine_args"]["enable_prefix_caching"] is True
        assert c["engine_args"]["kv_cache_dtype"] == "fp8" and "AIPerf" in c["notes"]
    # another run, a BF16 checkpoint: unique prompts and the engine's KV dtype
    loop = bf16["workload"]["closed_loop"]
    assert "shared_prefix_tokens" not in loop and loop["input_len"] == 1024
    assert "kv_cache_dtype" not in bf16["engine_args"]
    assert "enable_prefix_caching" not in bf16["engine_args"]  # the engine's own: on
    out = tmp_path / "cases.yaml"
    out.write_text(yaml.safe_dump({"cases": list(cases.values())}))
    assert all(x.error is None for x in load_cases([out], config()))


def test_without_an_impossible_row_the_prompts_stay_unique(tmp_path):
    cases = _cases(tmp_path, ROWS.split("\n", 1)[1])  # the run without its 112-client row
    assert "shared_prefix_tokens" not in cases["aic-slow"]["workload"]["closed_loop"]
    assert cases["aic-slow"]["engine_args"]["kv_cache_dtype"] == "fp8"


def test_sglang_rows_launched_by_the_generator_get_the_fp8_kv_cache_too(tmp_path):
    sglang = (
        "sg,src,sglang,0.5.9,deepseek-ai/DeepSeek-R1,h200_sxm,fp8,agg,1024,1024,4,8,1,,1,260,10\n"
        "old,src,sglang,0.5.1.post1,Qwen/Qwen3-235B-A22B-FP8,h200_sxm,fp8,agg,1024,1024,4,8,1,,1,"
        "260,10\n"
    )
    path = tmp_path / "silicon.csv"
    path.write_text(HEADER + sglang)
    cases = {c["id"]: c for c in silicon(path, tmp_path / "cases.yaml")[0]}
    assert cases["aic-sg"]["launch"]["engine_args"]["kv_cache_dtype"] == "fp8"
    assert "engine_args" not in cases["aic-old"]  # before the generator: SGLang's defaults
    assert "shared_prefix_tokens" not in cases["aic-sg"]["workload"]["closed_loop"]


def test_runs_are_told_apart_by_source_file_model_and_engine(tmp_path):
    class Row:
        silicon_data_source = f"{RUN}16"
        model_path, backend, backend_version, system = LLAMA, "vllm", "0.12.0", "h200_sxm"

    other = Row()
    other.silicon_data_source = f"{RUN}112"
    assert benchmark_run(Row()) == benchmark_run(other)
    other.backend_version = "0.11.0"
    assert benchmark_run(Row()) != benchmark_run(other)


def test_reused_prompts_cut_the_prefill_stalls_of_decode(tmp_path):
    """The measured row (TPOT 11.25 ms) cannot have prefilled 112 fresh prompts per 100 decode
    steps; from AIPerf's pool most are cache hits, and the simulated TPOT falls."""
    cases = _cases(tmp_path, ROWS.split("\n", 1)[0] + "\n")
    reused = cases["aic-fast"]
    fresh = yaml.safe_load(yaml.safe_dump(reused))
    loop = fresh["workload"]["closed_loop"]
    loop["input_len"] += loop.pop("shared_prefix_tokens")
    del loop["num_shared_prefixes"]
    for c in (reused, fresh):
        c["workload"]["closed_loop"]["num_requests"] = 2 * 112  # keep the test short
    out = tmp_path / "two.yaml"
    out.write_text(yaml.safe_dump({"cases": [reused, {**fresh, "id": "fresh"}]}))
    a, b = (run_case(c) for c in load_cases([out], config()))
    assert a.error is None and b.error is None
    assert a.predicted["mean_tpot_ms"] < 0.8 * b.predicted["mean_tpot_ms"]
