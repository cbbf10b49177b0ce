"""scenario=long_context: hand-checked golden numbers, the walk against the engine, the fit logic,
sparse attention's pricing, every catalogue model, and the command end to end."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from sim.config import SimConfig
from sim.errors import UserError
from sim.run.rundir import RECORD
from sim.scenarios.long_context.arithmetic import (
    flops_crossover_tokens,
    kv_bytes_sequence_per_gpu,
    max_context_tokens,
    prefill_flops,
)
from sim.scenarios.long_context.runs import (
    Context,
    chunk_tokens,
    fit_for_simulation,
    long_request_figures,
    prefill_split,
    sim_config,
    simulate_run,
    with_long_request,
)
from sim.scenarios.long_context.study import run_long_context
from sim.scenarios.long_context.text import memory_sentence
from sim.specs.model_config import load_model, model_names
from sim.workload.generate import Workload

GIB = 2**30
M = 1_048_576


def config(**kw) -> SimConfig:
    lc = {"background": False, "architectures": [], "jobs": 1} | kw.pop("long_context", {})
    return SimConfig.from_mapping({"parallel": {"tp": 8}, "long_context": lc} | kw)


# ---- golden numbers, worked by hand ---------------------------------------------------------
def test_llama_8b_kv_at_a_million_tokens_is_128_gib():
    # 32 layers x 8 KV heads x 128 dims x (K and V) x 2 bytes = 131,072 B per token
    m = load_model("llama-3.1-8b")
    assert m.kv_bytes_per_token() == 32 * 8 * 128 * 2 * 2 == 131_072
    assert m.kv_bytes_for_sequence(M) == 128 * GIB == 137_438_953_472
    # on 8 GPUs each keeps one KV head: an eighth
    assert kv_bytes_sequence_per_gpu(m, M, "auto", 8) == 16 * GIB
    assert kv_bytes_sequence_per_gpu(m, M, "fp8", 8) == 8 * GIB


def test_deepseek_v3_mla_bytes():
    # 61 layers x (kv_lora_rank 512 + rope 64) x 2 bytes = 70,272 B per token, replicated on
    # every TP rank (so 8 GPUs each hold all of it)
    m = load_model("deepseek-v3")
    assert m.kv_bytes_per_token() == 61 * (512 + 64) * 2 == 70_272
    assert m.kv_bytes_for_sequence(M) == 70_272 * M == 73_685_532_672  # 68.625 GiB
    assert kv_bytes_sequence_per_gpu(m, M, "auto", 8) == 70_272 * M
    # decode context parallelism over the 8 ranks shards it
    assert kv_bytes_sequence_per_gpu(m, M, "auto", 8, cp=8) == 70_272 * M // 8


def test_llama_8b_attention_linear_flop_crossover():
    # linear: 2 x 6,979,588,096 non-embedding parameters per token, plus the LM head once
    # (2 x 128,256 x 4,096); attention: 4 x 32 heads x 128 dims x 32 layers = 524,288 FLOPs
    # per causal pair, n(n+1)/2 pairs. Attention >= linear when
    #   262,144 n (n + 1) >= 13,959,176,192 n + 1,050,673,152
    # i.e. n^2 - 53,249.03125 n - 4,008 >= 0: n >= 53,249.107, so 53,250.
    m = load_model("llama-3.1-8b")
    assert m.params.total - m.params.embedding == 6_979_588_096
    linear, attention = prefill_flops(m, 1)
    assert linear == 13_959_176_192 + 1_050_673_152
    assert attention == 524_288
    root = (53_249.03125 + math.sqrt(53_249.03125**2 + 4 * 4_008)) / 2
    assert flops_crossover_tokens(m) == math.ceil(root) == 53_250


def test_windowed_and_linear_layers_are_bounded():
    gemma = load_model("gemma-3-27b-it")  # 52 sliding (1,024) + 10 full layers
    per = gemma.kv_bytes_per_token_by_kind()
    assert gemma.kv_bytes_for_sequence(M) == per["full"] * M + per["sliding"] * 1024
    nxt = load_model("qwen3-next-80b-a3b")
    assert nxt.kv_bytes_for_sequence(M) - nxt.kv_bytes_for_sequence(M // 2) == (
        nxt.kv_bytes_per_token_by_kind()["full"] * (M // 2)
    )


# ---- memory: fit, the longest context ---------------------------------------------------------
def test_max_context_is_the_boundary_of_the_pool():
    m = load_model("gemma-3-27b-it")
    pool = 40 * GIB
    n = max_context_tokens(m, "auto", pool, tp=4)
    assert kv_bytes_sequence_per_gpu(m, n, "auto", 4) <= pool
    assert kv_bytes_sequence_per_gpu(m, n + 1, "auto", 4) > pool


def test_llama_8b_needs_four_h100s_for_a_million_tokens():
    # one H100: 128 GiB of KV; two: 64 GiB + 7.5 GiB of weights > 0.92 x 79.6 GiB; four fit
    cfg = config(parallel={"tp": 1})
    ctx = Context.of(cfg)
    given, fit = fit_for_simulation(ctx)
    assert not given.fits
    longest = max_context_tokens(ctx.model, "auto", given.kv_pool_bytes_per_gpu, tp=1)
    assert longest == given.max_context_tokens < M
    assert "128.0 GiB" in given.why and f"the longest that fits: {longest:,} tokens" in given.why
    assert not ctx.fit(2).fits
    assert (fit.tp, fit.pp) == (4, 1)
    study = run_long_context(cfg)
    assert study.memory.fits is False and study.memory.min_tp_to_fit == 4
    assert study.at.parallel == "tp=4"


# ---- time: the walk is the engine's TTFT ------------------------------------------------------
@pytest.mark.parametrize(("tp", "pp"), [(8, 1), (2, 2)])
def test_walk_equals_the_engines_ttft_and_no_token_is_lost(tp, pp):
    prompt, output = 100_000, 8
    ctx = Context.of(config(parallel={"tp": tp, "pp": pp}, long_context={"prompt_tokens": prompt}))
    fit = ctx.fit(tp, pp)
    cost = ctx.cost_model(tp, pp)
    split, rows = prefill_split(cost, prompt, chunk_tokens(cost.settings, prompt))
    w, _ = with_long_request(None, 0.0, prompt, output)
    run = simulate_run(sim_config(ctx, fit), ctx.model, w, keep=True)
    engine = long_request_figures(run.requests, 0)
    assert engine.ttft_s == pytest.approx(split.total_s, rel=1e-12)
    assert sum(split.breakdown().values()) == pytest.approx(split.total_s, rel=1e-12)
    steps = run.steps
    # every prompt token prefilled once; one token from the prefill, the rest one per decode
    assert int(steps["prefill_tokens"].sum()) == prompt
    assert int(steps["decode_tokens"].sum()) == output - 1
    assert [r["prompt_tokens"] for r in rows] == [4096, 8192, 16384, 32768, 65536, prompt]


def test_sparse_attention_is_linear_beyond_top_k_but_its_indexer_is_not():
    hw_cfg = config(model="deepseek-v3.2")
    cost = Context.of(hw_cfg).cost_model(8)
    pr, m = cost.pricer, cost.model
    a, topk = m.mla, m.indexer.topk_tokens
    latent = a.latent_dim * 2

    def sparse(c):
        return float(
            pr.sparse_mla_prefill_s(4096, c, 16, a.latent_dim, a.kv_lora_rank, latent, topk)
        )

    def indexer(c):
        ix = m.indexer
        return float(pr.indexer_s(4096, c, ix.num_heads, ix.head_dim, ix.bytes_per_token))

    # past top-k every query attends to exactly topk positions: the cost stops growing
    assert sparse(200_000) == pytest.approx(sparse(400_000), rel=1e-9)
    # the indexer scores every earlier position: twice the context, about twice the time
    assert indexer(400_000) / indexer(200_000) == pytest.approx(2.0, rel=0.02)
    # decode reads at most topk latents, whatever the context
    dec = [float(pr.mla_decode_s(c, 16, a.latent_dim, a.kv_lora_rank, latent, topk)) for c in (
        10_000, 1_000_000)]  # fmt: skip
    assert dec[0] == dec[1]


# ---- the scenario ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", model_names())
def test_every_catalogue_model_gets_an_answer(name):
    cfg = config(model=name, hardware="h200", long_context={"prompt_tokens": 262_144})
    try:
        study = run_long_context(cfg)
    except UserError as exc:  # a model the engine does not serve: one clear line
        assert "\n" not in str(exc) and name in str(exc)
        return
    m = study.memory
    assert m.kv_bytes_sequence > 0 and m.weights_bytes_per_gpu > 0
    assert study.ttft_s > 0 and study.decode_ms_per_token > 0
    assert m.fits == (m.why_not == "")
    b = study.prefill.breakdown()
    assert sum(b.values()) == pytest.approx(study.ttft_s, rel=1e-9)


def test_nothing_fits_is_said_plainly():
    cfg = config(hardware="rtx-4090", long_context={"prompt_tokens": 1 << 27})
    study = run_long_context(cfg)
    assert not study.memory.fits and study.memory.min_gpus_to_fit is None
    assert not study.simulated
    assert "No configuration" in memory_sentence(study)


SUMMARY_KEYS = (
    "kv_bytes_per_token", "kv_bytes_sequence", "weights_bytes_per_gpu", "fits",
    "min_tp_to_fit", "max_context_tokens", "ttft_s", "ttft_breakdown_s",
    "decode_ms_per_token", "cotenant", "architectures",
)  # fmt: skip


def run_cli(out, *args):
    cmd = [sys.executable, "-m", "sim", "scenario=long_context", f"hydra.run.dir={out}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def test_command_end_to_end(tmp_path):
    args = (
        "long_context.prompt_tokens=131072", "long_context.output_tokens=64",
        "long_context.arrival_s=5", "long_context.budgets=[2048]", "workload.rate=8",
        "long_context.architectures=[llama-3.1-8b,deepseek-v3.2,gemma-3-27b-it]",
    )  # fmt: skip
    done = run_cli(tmp_path / "a", *args)
    assert done.returncode == 0, done.stderr
    s = json.loads((tmp_path / "a" / "summary.json").read_text())
    for key in SUMMARY_KEYS:
        assert key in s, key
    assert set(s["ttft_breakdown_s"]) == {"linear", "attention", "communication", "overhead"}
    assert set(s["cotenant"]) == {"with", "without"}
    for side in ("with", "without"):
        c = s["cotenant"][side]
        assert c["finished"] == c["num_requests"] > 0
        assert {"p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms"} <= set(c)
    # the long request makes everyone else slower, never faster
    assert s["cotenant"]["with"]["p99_tpot_ms"] > s["cotenant"]["without"]["p99_tpot_ms"]
    assert [a["model"] for a in s["architectures"]] == [
        "llama-3.1-8b", "deepseek-v3.2", "gemma-3-27b-it"]  # fmt: skip
    for a in s["architectures"]:
        assert {"model", "kv_bytes_sequence", "ttft_s", "decode_ms_per_token", "fits"} <= set(a)
    report = (tmp_path / "a" / "report.md").read_text()
    breaks = report.split("## What breaks, in the order you meet it")[1].split("## 1.")[0]
    for label in ("1. **Memory.**", "2. **Time to first token.**", "3. **Decode.**",
                  "4. **Everyone else.**"):  # fmt: skip
        assert label in breaks
    for png in ("ttft_scaling.png", "timeline.png", "architectures.png"):
        assert (tmp_path / "a" / png).stat().st_size > 10_000
        assert f"]({png})" in report
    # the same config and seed: the same outputs (wall time aside)
    again = run_cli(tmp_path / "b", *args)
    assert again.returncode == 0, again.stderr
    t = json.loads((tmp_path / "b" / "summary.json").read_text())
    s.pop("wall_time_s"), t.pop("wall_time_s")
    assert s == t
    for name in ("requests.parquet", "steps.parquet", "ttft_scaling.png", "timeline.png"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    # every file it writes is recorded as this run's output: none is "no run of sim recorded"
    recorded = (tmp_path / "a" / RECORD).read_text().split()
    assert {"ttft_scaling.csv", "architectures.csv"} <= set(recorded)
    assert "no run of sim recorded" not in done.stderr + again.stderr


def test_bad_input_is_one_line(tmp_path):
    done = run_cli(tmp_path, "long_context.prompt_tokens=0")
    assert done.returncode == 2 and "long_context.prompt_tokens" in done.stderr
    done = run_cli(tmp_path, "model=no-such-model")
    assert done.returncode == 2 and "not in the catalogue" in done.stderr
    assert "Traceback" not in done.stderr


def test_co_tenants_are_the_same_requests_with_and_without():
    bg = np.array([0.0, 1.0, 2.0, 3.0])
    w = Workload(bg, np.full(4, 100), np.full(4, 10), np.arange(1, 33), np.arange(0, 40, 8)[:5],
                 16, None, "four")  # fmt: skip
    mixed, k = with_long_request(w, 1.5, 5000, 4)
    assert k == 2 and len(mixed) == 5 and mixed.prompt_len[k] == 5000
    assert list(mixed.arrival_s) == [0.0, 1.0, 1.5, 2.0, 3.0]
    lengths = np.diff(mixed.content_offsets)
    assert lengths[k] == -(-5004 // 16) and list(np.delete(lengths, k)) == [8, 8, 8, 8]
    # the long request's content is its own
    own = mixed.content_ids[mixed.content_offsets[k] : mixed.content_offsets[k + 1]]
    assert not set(own) & set(w.ids)
