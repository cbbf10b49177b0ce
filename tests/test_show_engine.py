"""scenario=show_engine from the command line, and sim.compare over a sweep."""

from __future__ import annotations

import json

from tests.test_cli import sim


def test_show_engine_prints_and_writes_the_settings(tmp_path):
    out = tmp_path / "show"
    r = sim(
        "scenario=show_engine",
        "engine=vllm@0.8.5",
        "hardware=a100-80gb",
        f"hydra.run.dir={out}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert "max_num_batched_tokens" in r.stdout and "PR #17073" in r.stdout
    summary = json.loads((out / "summary.json").read_text())
    settings = summary["engine_settings"]
    assert settings["max_num_seqs"] == {
        "value": 1024,
        "category": "defaults",
        "rule": settings["max_num_seqs"]["rule"],
    }
    assert "70" in settings["max_num_seqs"]["rule"]
    assert settings["cudagraph_mode"]["value"] == "PIECEWISE"
    assert settings["cudagraph_mode"]["category"] == "kernels"
    assert summary["memory_plan"]["num_blocks"] > 1000
    assert (out / "settings.md").read_text().startswith("# vllm@0.8.5")


def test_show_engine_refuses_what_the_release_cannot_load(tmp_path):
    r = sim("scenario=show_engine", "engine=vllm@0.8.3", "model=qwen3-30b-a3b", cwd=tmp_path)
    assert r.returncode == 2
    assert "Qwen3MoeForCausalLM first appears in vLLM 0.8.4" in r.stderr


def test_compare_tabulates_a_sweep(tmp_path):
    sweep = tmp_path / "sweep"
    r = sim(
        "-m",
        "engine=vllm@0.6.6,sglang",
        "workload.num_requests=30",
        "output.report=false",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    r = sim(str(sweep), "--out", str(tmp_path / "t.md"), cwd=tmp_path, module="sim.compare")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert "req/s" in lines[0] and len(lines) == 4
    assert "sim:vllm@0.6.6" in lines[2] and "sim:sglang@0.5.23" in lines[3]
    assert (tmp_path / "t.md").read_text().strip() == r.stdout.strip()


def test_show_engine_shows_the_settings_and_plan_before_a_refusal(tmp_path):
    """70B at TP2 on an 80 GB GPU with the 128K default context (issue 25): the settings and
    the memory plan, then the refusal with its fix, and exit 2 as before."""
    out = tmp_path / "show"
    r = sim(
        "scenario=show_engine",
        "model=llama-3.1-70b",
        "parallel.tp=2",
        "hardware=h100-sxm",
        f"hydra.run.dir={out}",
        cwd=tmp_path,
    )
    assert r.returncode == 2
    assert "max_num_batched_tokens" in r.stdout and "KV cache: 3.34 GiB per GPU" in r.stdout
    assert "the longest that fits is 21840 tokens" in r.stderr
    assert "engine_args.max_model_len" in r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["engine_settings"]["max_model_len"]["value"] == 131072
    assert summary["memory_plan"]["kv_capacity_tokens"] == 21840
    assert "the longest that fits is 21840 tokens" in summary["refusal"]
    assert "would refuse to start" in (out / "settings.md").read_text()


def test_show_engine_without_room_for_the_weights(tmp_path):
    out = tmp_path / "show"
    r = sim("scenario=show_engine", "model=llama-3.1-70b", f"hydra.run.dir={out}", cwd=tmp_path)
    assert r.returncode == 2 and "weights need 131.4 GiB" in r.stderr
    assert "KV cache: none" in r.stdout and "max_num_seqs" in r.stdout
    assert json.loads((out / "summary.json").read_text())["memory_plan"] is None
