"""scenario=validate and the importers: schema errors, failing cases, a tiny case file end to
end, and each importer on a small file (and on ../shared/data where it is present)."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest
import yaml

from sim.errors import UserError
from sim.run.simulate import simulate
from sim.scenarios.validate.cases import load_cases
from sim.scenarios.validate.importers.catalogue import catalogue_model
from sim.scenarios.validate.importers.guidellm import guidellm
from sim.scenarios.validate.importers.llmservingsim import llmservingsim
from sim.scenarios.validate.importers.silicon import block_scaled_fp8, decode_floor_ms, silicon
from sim.scenarios.validate.runs import run_all
from sim.scenarios.validate.suite import build_cases, main
from sim.scenarios.validate.targets import targets
from sim.scenarios.validate.validation import Row, Validation, rows
from tests.conftest import config, shared_data
from tests.test_cli import sim

BASE = config()
TINY = {"closed_loop": {"concurrency": 4, "num_requests": 12, "input_len": 64, "output_len": 8}}


def case(**changes) -> dict:
    c = {
        "id": "tiny",
        "engine": "vllm@0.10.2",
        "hardware": "h100-sxm",
        "model": "llama-3.1-8b",
        "cost_profile": "prior",
        "workload": TINY,
        "measured": {"mean_ttft_ms": 20.0, "mean_tpot_ms": 5.0},
    }
    return c | changes


def write(tmp_path, cases, name="cases.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"cases": cases}))
    return path


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"model": None}, "missing key(s) model"),
        ({"workload": {**TINY, "burst": {"num_requests": 3}}}, "exactly one of"),
        ({"workload": {"closed_loop": {"concurrency": 2}}}, "missing num_requests"),
        ({"workload": {"closed_loop": {**TINY["closed_loop"], "speed": 3}}}, "unknown key speed"),
        (
            {"workload": {"poisson": {"rate": 2, "num_requests": 3}}},
            "give input_len and output_len",
        ),
        ({"measured": [1.0]}, "measured: expected a mapping"),  # a bad value: a row's reason
        ({"measured": {}}, "measured: expected a mapping"),
        ({"parallel": {"tp": 2, "cp": 2}}, "parallel: expected a mapping"),
        ({"workload": {"bench_json": "nowhere.json"}}, "nowhere.json: no such file"),
        ({"dtype": "fp3"}, "dtype='fp3': choose one of"),
    ],
)
def test_schema_errors_are_error_rows(tmp_path, bad, message):
    data = {k: v for k, v in (case() | bad).items() if v is not None}
    good = case(id="good")
    cases = load_cases([write(tmp_path, [data, good])], BASE)
    assert cases[0].error and message in cases[0].error, cases[0].error
    assert cases[1].error is None


def test_file_errors_stop_before_anything_runs(tmp_path):
    (tmp_path / "x.yaml").write_text("- just a list\n")
    with pytest.raises(UserError, match="expected a mapping with a list under `cases:`"):
        load_cases([tmp_path / "x.yaml"], BASE)
    with pytest.raises(UserError, match="does not exist"):
        load_cases([tmp_path / "missing.yaml"], BASE)
    cases = load_cases([write(tmp_path, [case(), case()])], BASE)
    assert cases[1].error == "duplicate case id 'tiny'"


def test_a_duplicate_case_id_is_reported_not_hidden(tmp_path):
    """The second case of an id is a failed row of its own (results come back by position; by
    id, the first case's result used to stand in for it and the error was lost)."""
    cases = load_cases([write(tmp_path, [case(), case()])], BASE)
    results = run_all(cases, jobs=1)
    assert results[0].error is None and results[1].error == "duplicate case id 'tiny'"
    v = Validation(tuple(cases), tuple(results), "cases.yaml").summary["validation"]
    assert v["num_cases"] == 2 and v["num_failed"] == 1


def test_a_failing_case_does_not_stop_the_others(tmp_path):
    cases = load_cases(
        [
            write(
                tmp_path,
                [
                    case(id="no-such-model", model="gpt-17"),
                    case(id="too-big", model="llama-3.1-405b"),
                    case(id="ok"),
                ],
            )
        ],
        BASE,
    )
    results = run_all(cases, jobs=1)
    assert "not in the catalogue" in results[0].error
    assert "raise parallel.tp" in results[1].error
    assert results[2].error is None and results[2].predicted["mean_ttft_ms"] > 0


def test_predictions_are_the_simulators_own(tmp_path):
    (c,) = load_cases([write(tmp_path, [case()])], BASE)
    (res,) = run_all([c], jobs=1)
    direct = simulate(c.config).summary
    table = rows([c], [res])
    for r in table:
        assert r.predicted == pytest.approx(direct[r.metric])
        expected = 100 * (direct[r.metric] - r.measured) / r.measured
        assert r.error_pct == pytest.approx(expected)


def test_tiny_case_file_end_to_end(tmp_path):
    lengths = tmp_path / "lengths.csv"
    with lengths.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["num_prefill_tokens", "num_decode_tokens"])
        w.writerows([[100 + 10 * i, 5 + i] for i in range(30)])
    cases = [
        case(id="closed"),
        case(
            id="poisson",
            hardware="h200",
            workload={"poisson": {"rate": 5.0, "num_requests": 20, "lengths": "lengths.csv"}},
            measured={"output_throughput": 40.0, "p99_ttft_ms": 30.0},
        ),
        case(id="broken", model="nope"),
    ]
    path = write(tmp_path, cases)
    out = tmp_path / "run"
    r = sim("scenario=validate", f"validate.cases={path}", f"hydra.run.dir={out}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "validate: 3 cases (1 could not be simulated)" in r.stdout
    table = list(csv.DictReader((out / "validation.csv").open()))
    assert list(table[0]) == [
        *("case", "metric", "measured", "predicted", "error_pct"),  # as they always were
        *("reason", "band_low", "band_high"),
    ]
    assert {(t["case"], t["metric"]) for t in table} == {
        ("closed", "mean_ttft_ms"),
        ("closed", "mean_tpot_ms"),
        ("poisson", "output_throughput"),
        ("poisson", "p99_ttft_ms"),
        ("broken", "-"),  # the refused case: one row with its reason
    }
    assert "not in the catalogue" in next(t for t in table if t["case"] == "broken")["reason"]
    v = json.loads((out / "summary.json").read_text())["validation"]
    assert v["num_cases"] == 3 and v["num_failed"] == 1
    assert set(v["median_abs_pct_error"]) == {r["metric"] for r in table} - {"-"}
    assert set(v["by_slice"]) == {"hardware", "engine", "workload", "model"}
    assert set(v["by_slice"]["hardware"]) == {"h100-sxm", "h200"}
    assert set(v["by_slice"]["workload"]) == {"closed_loop", "poisson"}
    errs = [abs(float(t["error_pct"])) for t in table if t["metric"] == "mean_ttft_ms"]
    assert v["median_abs_pct_error"]["mean_ttft_ms"] == pytest.approx(np.median(errs), rel=1e-4)
    report = (out / "report.md").read_text()
    assert "## Worst cases" in report and "| broken |" in report
    assert (out / "validation_mean_ttft_ms.png").stat().st_size > 0


def test_the_command_line_needs_a_case_file(tmp_path):
    r = sim("scenario=validate", cwd=tmp_path)
    assert r.returncode == 2 and "validate.cases=FILE" in r.stderr
    r = sim("scenario=validate", "validate.cases=[a.yaml,b.yaml]", cwd=tmp_path)
    assert r.returncode == 2 and "a.yaml does not exist" in r.stderr


def test_warmup_requests_are_run_but_not_measured():
    cold = simulate(config(workload={"num_requests": 40, "warmup_requests": 0}))
    warm = simulate(config(workload={"num_requests": 40, "warmup_requests": 10}))
    assert len(warm.requests) == 40 and warm.summary["completed"] == 30
    measured = warm.requests[warm.requests.request_id >= 10]
    assert warm.summary["mean_ttft_ms"] == pytest.approx(measured.ttft_s.mean() * 1e3)
    assert cold.summary["completed"] == 40


# ---- importers --------------------------------------------------------------------------------
def test_catalogue_names_from_huggingface_ids():
    assert catalogue_model("nvidia/Llama-3.1-8B-Instruct-FP8")[0] == "llama-3.1-8b"
    assert catalogue_model("Qwen/Qwen3-235B-A22B-FP8")[0] == "qwen3-235b-a22b"
    assert catalogue_model("Qwen/Qwen3-30B-A3B-Instruct-2507")[0] == "qwen3-30b-a3b"
    name, note = catalogue_model("deepseek-ai/DeepSeek-R1")
    assert name == "deepseek-v3" and "architecture" in note
    assert catalogue_model("zhipuai/GLM-5") == ("zhipuai/GLM-5", None)


def test_silicon_rows_with_experts_over_more_gpus_than_their_tp_are_skipped(tmp_path):
    """vLLM's data-parallel attention: tp_size 2 with moe_tp_size 4 is four GPUs whose experts
    span all four; simulated as TP2 it would be half the deployment, so the row is skipped
    and counted, as the disaggregated ones are."""
    path = tmp_path / "silicon.csv"
    path.write_text(
        "id,backend,backend_version,model_path,system,mode,isl,osl,batch_size,tp_size,"
        "moe_tp_size,moe_ep_size,silicon_ttft_ms,silicon_tpot_ms\n"
        "dp,vllm,0.12.0,Qwen/Qwen3-235B-A22B-FP8,h200_sxm,agg,8000,100,4,2,4,1,820.5,43.8\n"
        "tp,vllm,0.12.0,Qwen/Qwen3-235B-A22B-FP8,h200_sxm,agg,8000,100,4,4,4,1,642.2,30.1\n"
        "blank,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,agg,1024,128,8,2,,0,154.2,18.0\n"
    )
    cases, skipped = silicon(path, tmp_path / "cases.yaml")
    assert [c["id"] for c in cases] == ["aic-tp", "aic-blank"]
    (why,) = skipped
    assert skipped[why] == 1 and "data-parallel attention" in why


def test_a_silicon_row_faster_than_its_kv_and_weights_allow_is_flagged(tmp_path):
    """512 gpt-oss-120b sequences of 1024 + 4096 tokens on eight H100s: their KV (about 97 GB)
    and the experts they touch take about 6 ms to read at HBM peak, so a measured TPOT of
    3.57 ms means fewer ran at once; four of them at 3.64 ms are physical."""
    path = tmp_path / "silicon.csv"
    path.write_text(
        "id,backend,backend_version,model_path,system,precision,mode,isl,osl,batch_size,"
        "tp_size,silicon_ttft_ms,silicon_tpot_ms\n"
        "c512,vllm,0.11.2,openai/gpt-oss-120b,h100_sxm,fp4,agg,1024,8192,512,8,9000,3.5714\n"
        "c4,vllm,0.11.2,openai/gpt-oss-120b,h100_sxm,fp4,agg,1024,8192,4,8,34.3,3.6379\n"
    )
    cases, _ = silicon(path, tmp_path / "cases.yaml")
    flagged = {c["id"]: c.get("flags", []) for c in cases}
    assert flagged == {"aic-c512": ["decode_below_floor"], "aic-c4": []}
    floor = decode_floor_ms("gpt-oss-120b", "h100-sxm", "fp4", 512, 1024 + 4096, 8)
    assert 5.0 < floor < 8.0 and "fewer requests" in cases[0]["notes"]


def test_silicon_rows_become_closed_loop_cases(tmp_path):
    path = tmp_path / "silicon.csv"
    header = (
        "id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,"
        "batch_size,tp_size,pp_size,attention_dp_size,moe_ep_size,silicon_ttft_ms,silicon_tpot_ms"
    )
    path.write_text(
        header + "\n"
        "r1,src,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,,agg,1024,128,8,2,1,,1,154.2,18.0\n"
        "r2,src,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,,disagg,1024,128,8,2,1,,1,150.0,17.0\n"
        "r3,src,sglang,0.5.9,openai/gpt-oss-120b,h200_sxm,fp4,agg,1024,1024,16,4,1,1,4,60,6\n"
        "r4,src,vllm,,Qwen/Qwen3-32B,h100_sxm,,agg,1024,128,8,2,1,,1,154.2,18.0\n"
        # 112 x 1000-token prompts every 1.19 s on one H200: 1.3 PFLOP/s of prefill alone
        "r5,src,vllm,0.12.0,nvidia/Llama-3.1-8B-Instruct-FP8,h200_sxm,fp8,agg,1000,100,112,1,1,,"
        "1,71.91,11.25\n"
    )
    cases, skipped = silicon(path, tmp_path / "cases.yaml", backends=["vllm", "sglang"])
    assert [c["id"] for c in cases] == ["aic-r1", "aic-r3", "aic-r5"]
    assert skipped == {
        "disaggregated prefill/decode (not modelled)": 1,
        "no engine version recorded": 1,
    }
    assert "flags" not in cases[0] and "flags" not in cases[1]
    assert cases[2]["flags"] == ["prefill_above_peak"] and "cached prompt" in cases[2]["notes"]
    c = cases[0]
    assert c["engine"] == "vllm@0.12.0" and c["hardware"] == "h100-sxm"
    assert c["model"] == "qwen3-32b" and c["dtype"] == "bf16" and c["parallel"]["tp"] == 2
    loop = c["workload"]["closed_loop"]
    assert (loop["concurrency"], loop["input_len"], loop["output_len"]) == (8, 1024, 128)
    # ten requests per client, the first wave counted (AIConfigurator's benchmark runners)
    assert "warmup_requests" not in loop and loop["num_requests"] == 80
    # the server AIConfigurator's generator launches for 8 clients of 1024 + 128 tokens
    assert c["engine_args"] == {
        "max_num_seqs": 8,
        "max_num_batched_tokens": 8 + 1024 + 1500,
        "max_model_len": 1024 + 128 + 1500,
    }
    assert cases[1]["engine_args"] == {  # SGLang 0.5.9: the generator's SGLang launch
        "max_num_seqs": 16,
        "max_prefill_tokens": 1024 + 1500,
        "enable_mixed_chunk": True,
    }
    # Little's law: 8 requests in flight, each 154.2 + 127 x 18 ms, 128 tokens
    assert c["measured"]["output_throughput"] == pytest.approx(8 * 128 / 2.4402, rel=1e-4)
    assert cases[1]["dtype"] == "fp4" and cases[1]["parallel"]["ep"] == 4
    out = tmp_path / "cases.yaml"
    out.write_text(yaml.safe_dump({"cases": cases}))
    loaded = load_cases([out], BASE)
    assert all(x.error is None for x in loaded)


def test_silicon_sample_imports():
    path = shared_data("aiconfigurator/silicon_sample.csv")
    cases, skipped = silicon(path, path.parent / "x.yaml", ["vllm"], ["h100_sxm", "h200_sxm"])
    assert len(cases) > 250 and skipped
    assert {c["hardware"] for c in cases} == {"h100-sxm", "h200"}


def test_llmservingsim_runs_import_with_their_own_percentiles(tmp_path):
    root = shared_data("LLMServingSim/bench_examples")
    out = tmp_path / "cases.yaml"
    cases = {c["id"]: c for c in llmservingsim([str(root)], out)}
    assert len(cases) == 4
    c = cases["llmservingsim-RTXPRO6000-Llama-3.1-8B"]
    # the figures of that run's validation/summary.txt (vLLM column)
    assert c["measured"]["mean_ttft_ms"] == pytest.approx(7097.2, abs=0.1)
    assert c["measured"]["p90_ttft_ms"] == pytest.approx(16852.7, abs=0.1)
    assert c["measured"]["mean_tpot_ms"] == pytest.approx(32.5, abs=0.05)
    assert c["entry_point"] == "offline" and c["engine"] == "vllm@0.19.0"
    assert c["engine_args"] == {"max_num_seqs": 128, "max_num_batched_tokens": 2048}
    moe = cases["llmservingsim-RTXPRO6000-Qwen3-30B-A3B-Instruct-2507"]
    # expert parallelism over both data-parallel ranks' GPUs
    assert moe["parallel"]["dp"] == 2 and moe["parallel"]["ep"] == 2
    # the server's GPU-to-GPU link as the run's own config.json records it (16 GB/s, 20 us)
    tp2 = cases["llmservingsim-RTXPRO6000-Qwen3-32B"]["parallel"]
    assert tp2 == {"tp": 2, "link_bytes_per_s": 16e9, "link_latency_s": pytest.approx(2e-5)}
    assert "link_bytes_per_s" not in c["parallel"]  # one GPU: no link
    out.write_text(yaml.safe_dump({"cases": list(cases.values())}))
    loaded = load_cases([out], BASE)
    assert all(x.error is None and x.requests for x in loaded)


def _guidellm_benchmark(strategy: dict, old: bool) -> dict:
    def dist(mean, median, p90, p99):
        return {
            "successful": {
                "mean": mean,
                "median": median,
                "percentiles": {"p50": median, "p90": p90, "p99": p99},
            }
        }

    metrics = {
        "time_to_first_token_ms": dist(50.0, 40.0, 90.0, 120.0),
        "inter_token_latency_ms": dist(8.0, 7.5, 10.0, 12.0),
        "time_per_output_token_ms": dist(9.0, 8.0, 11.0, 13.0),
        "request_latency": dist(1.2, 1.1, 1.5, 1.9),
        "prompt_token_count": dist(512.4, 512, 512, 512),
        "output_token_count": dist(128.0, 128, 128, 128),
        "output_tokens_per_second": dist(1500.0, 20.0, 0, 0),
        "requests_per_second": dist(11.0, 0.5, 0, 0),
    }
    totals = {"successful": 64, "errored": 0, "incomplete": 0, "total": 64}
    if old:  # 0.2-0.3: args and request_totals on the benchmark
        return {"args": {"strategy": strategy}, "request_totals": totals, "metrics": metrics}
    return {"config": {"strategy": strategy}, "metrics": {**metrics, "request_totals": totals}}


@pytest.mark.parametrize("old", [False, True])
def test_guidellm_benchmarks_become_cases(tmp_path, old):
    data = {
        "benchmarks": [
            _guidellm_benchmark({"type_": "concurrent", "streams": 16}, old),
            _guidellm_benchmark({"type_": "constant", "rate": 4.0}, old),
            _guidellm_benchmark({"type_": "synchronous"}, old),
        ]
    }
    path = tmp_path / "gl.json"
    path.write_text(json.dumps(data))
    cases, skipped = guidellm([path], tmp_path / "c.yaml", "vllm@0.10.2", "h100-sxm", "qwen3-8b", 1)
    assert skipped == {"synchronous strategy (no fixed rate or concurrency)": 1}
    loop = cases[0]["workload"]["closed_loop"]
    assert loop == {"concurrency": 16, "num_requests": 64, "input_len": 512, "output_len": 128}
    m = cases[0]["measured"]
    assert m["mean_ttft_ms"] == 50.0 and m["p99_ttft_ms"] == 120.0
    assert m["mean_tpot_ms"] == 8.0  # GuideLLM's inter-token latency is vllm bench's TPOT
    assert m["mean_e2el_ms"] == 1200.0  # request_latency is in seconds
    assert m["output_throughput"] == 1500.0  # the mean of a rate, not its median
    assert cases[1]["workload"] == {
        "constant": {"rate": 4.0, "num_requests": 64, "input_len": 512, "output_len": 128}
    }
    out = tmp_path / "c.yaml"
    out.write_text(yaml.safe_dump({"cases": cases}))
    assert all(c.error is None for c in load_cases([out], BASE))


def test_bench_json_cases_take_the_files_metrics(tmp_path):
    bench = {
        "input_lens": [100, 200, 150],
        "output_lens": [10, 20, 15],
        "request_rate": 2.0,
        "burstiness": 1.0,
        "max_concurrency": None,
        "mean_ttft_ms": 33.0,
        "p99_tpot_ms": 9.0,
        "output_throughput": 30.0,
        "ttfts": [0.03, 0.035, 0.034],
        "itls": [[0.008] * 9, [0.009] * 19, [0.0085] * 14],
    }
    (tmp_path / "run.json").write_text(json.dumps(bench))
    data = case(workload={"bench_json": "run.json"})
    data.pop("measured")
    (c,) = load_cases([write(tmp_path, [data])], BASE)
    assert c.error is None
    assert c.measured == {"mean_ttft_ms": 33.0, "p99_tpot_ms": 9.0, "output_throughput": 30.0}
    (res,) = run_all([c], jobs=1)
    assert set(res.ks) == {"ttft", "itl"}
    ttft = res.ks["ttft"]
    assert 0 <= ttft.statistic <= 1 and [ttft.num_measured, ttft.num_predicted] == [3, 3]


def test_a_slower_server_link_slows_tensor_parallel_runs():
    base = {
        "model": "qwen3-32b",
        "hardware": "rtx-pro-6000",
        "parallel": {"tp": 2},
        "workload": {"kind": "burst", "num_requests": 16, "length_dist": "fixed"},
    }
    fast = simulate(config(**base))
    slow = simulate(config(**base | {"parallel": {"tp": 2, "link_bytes_per_s": 4e9}}))
    slower = simulate(
        config(**base | {"parallel": {"tp": 2, "link_bytes_per_s": 4e9, "link_latency_s": 1e-4}})
    )
    steps = [r.summary["sim"]["steps"] for r in (fast, slow, slower)]
    assert steps[0] == steps[1] == steps[2]  # same schedule, dearer steps
    span = [r.summary["duration"] for r in (fast, slow, slower)]
    assert span[0] < span[1] < span[2]


def test_suite_targets_over_vllm_rows_and_llmservingsim_runs():
    def row(case, engine, metric, err, flags=""):
        # measured, predicted, workload and model: not read by the targets
        return Row(case, metric, 1.0, None, err, "h200", engine, "closed_loop", "m", flags)

    table = [
        row("aic-a", "vllm@0.12.0", "mean_tpot_ms", 4.0),
        row("aic-b", "vllm@0.12.0", "mean_tpot_ms", -8.0),
        row("aic-c", "vllm@0.12.0", "mean_tpot_ms", 150.0, "prefill_above_peak"),
        row("aic-d", "sglang@0.5.9", "mean_tpot_ms", 30.0),
        row("llmservingsim-x", "vllm@0.19.0", "p50_ttft_ms", -16.0),
        row("llmservingsim-x", "vllm@0.19.0", "mean_ttft_ms", 50.0),
    ]
    got = {(t.target, t.metric): t for t in targets(table)}
    tpot = got[("vLLM rows of the silicon sample on H100/H200", "mean_tpot_ms")]
    assert tpot.value_pct == 8.0 and tpot.met and tpot.num_values == 3
    assert tpot.unflagged.median_abs_pct_error == 6.0 and tpot.unflagged.num_values == 2
    assert got[("SGLang rows of the silicon sample on H100/H200", "mean_tpot_ms")].met is None
    lss = got[("llmservingsim-x", "p50_ttft_ms")]
    assert lss.value_pct == 16.0 and lss.met is False
    assert ("llmservingsim-x", "mean_ttft_ms") not in got  # means are reported, not targeted


def test_suite_builds_its_case_files_from_the_shared_data(tmp_path):
    files, notes = build_cases(shared_data(""), tmp_path)
    loaded = load_cases(files, BASE)
    assert len(loaded) > 500
    engines = {c.data["engine"].split("@")[0] for c in loaded}
    assert engines == {"vllm", "sglang", "trtllm"}  # trtllm: the committed validation/ files
    assert sum(c.id.startswith("llmservingsim-") for c in loaded) == 4
    visible = [f for f in files if f.parent.name == "validation"]
    assert visible and all(f.suffix == ".yaml" for f in visible)
    assert any("disaggregated" in n for n in notes)


def test_block_scaled_fp8_checkpoints():
    assert block_scaled_fp8("deepseek-ai/DeepSeek-R1")
    assert block_scaled_fp8("Qwen/Qwen3-235B-A22B-FP8")
    assert not block_scaled_fp8("Qwen/Qwen3-32B")  # online fp8: per-tensor
    assert not block_scaled_fp8("nvidia/Llama-3.1-8B-Instruct-FP8")  # ModelOpt: per-tensor
    small = {"num_requests": 8}
    r = simulate(
        config(
            small, model="qwen3-30b-a3b", hardware="h200", dtype="fp8_block", cost_profile="auto"
        )
    )
    priced = r.summary["sim"]["priced_with"]
    assert priced["gemm"] == "gemm/fp8_block" and priced["moe"] == "moe/fp8_block"
    assert r.summary["completed"] == 8


def test_validation_suite_end_to_end_on_a_small_copy(tmp_path):
    """The suite's one command on a shared-data folder holding two silicon rows and one
    LLMServingSim run: case files, report with targets, summary.json, validation.csv."""
    run = shared_data("LLMServingSim/bench_examples/RTXPRO6000/Llama-3.1-8B")
    data = tmp_path / "data"
    shutil.copytree(run, data / "LLMServingSim/bench_examples/RTXPRO6000/Llama-3.1-8B")
    (data / "aiconfigurator").mkdir(parents=True)
    (data / "aiconfigurator/silicon_sample.csv").write_text(
        "id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,"
        "batch_size,tp_size,pp_size,attention_dp_size,moe_ep_size,silicon_ttft_ms,silicon_tpot_ms\n"
        "a,src,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,,agg,256,16,4,2,1,,1,60.0,15.0\n"
        "b,src,sglang,0.5.9,Qwen/Qwen3-32B,h100_sxm,,agg,256,16,4,2,1,,1,60.0,15.0\n"
    )
    out = tmp_path / "report"
    none = tmp_path / "no-visible-cases"  # validation/'s public runs are checked elsewhere
    none.mkdir()
    assert (
        main(["--data", str(data), "--out", str(out), "--jobs", "1", "--visible", str(none)]) == 0
    )
    v = json.loads((out / "summary.json").read_text())["validation"]
    assert v["num_cases"] == 3 and v["num_failed"] == 0
    names = {(t["target"], t["metric"]) for t in v["targets"]}
    assert ("vLLM rows of the silicon sample on H100/H200", "mean_tpot_ms") in names
    assert ("llmservingsim-RTXPRO6000-Llama-3.1-8B", "p90_ttft_ms") in names
    assert set(v["client_sensitivity"]) == {"mean_tpot_ms", "output_throughput", "mean_ttft_ms"}
    assert names >= {("all cases of the suite", "TPOT"), ("all cases of the suite", "ITL")}
    assert [t["target"] for t in v["targets"]][:3] == [
        "vLLM rows of the silicon sample on H100/H200"
    ] * 3
    # the vLLM row: 4 settings, its first wave left out (it counts it, ten requests per
    # client), the engine's default launch (its arguments are the generator's, assumed) and a
    # front end; the LLMServingSim run: cold / warm
    band = v["settings_band"]
    assert band["num_cases"] == 2 and band["num_extra_runs"] == 5 + 2
    assert len(band["settings"]) == 8 and v["slices"]
    report = (out / "report.md").read_text()
    assert "## Targets" in report and "python -m sim.validation_suite" in report
    assert (out / "cases/silicon.yaml").is_file() and (out / "validation.csv").is_file()
    with pytest.raises(SystemExit):
        main(["--nope"])
    assert main(["--data", str(tmp_path / "missing"), "--out", str(out)]) == 2
