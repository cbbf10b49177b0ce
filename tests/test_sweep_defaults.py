"""The chunked-prefill sweep says what it sets besides the swept settings and why, and what "the
engine's default" means, from the resolved settings of the engine and GPU it ran on (issue 41,
item 12: it set max_num_seqs=256 without a word while calling 8192 "the engine's default";
vLLM 0.33 on an H100 defaults to max_num_seqs 1024)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sim.cli import check_overrides
from sim.run.setup import Setup


def stock(hardware: str):
    """The engine out of the box on this GPU (what `scenario=show_engine` prints)."""
    (cfg,) = check_overrides([f"hardware={hardware}"])
    return Setup.from_config(cfg).settings


def sweep(tmp_path, hardware: str):
    cmd = [
        sys.executable, "-m", "sim", "-m", "scenario=chunked_prefill", "hydra/launcher=basic",
        f"hydra.sweep.dir={tmp_path}", f"hardware={hardware}", "workload.num_requests=40",
        "engine_args.max_num_batched_tokens=256,512,8192",
        "engine_args.long_prefill_token_threshold=0", "workload.rate=3", "output.progress=false",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = (tmp_path / "report.md").read_text()
    summary = json.loads((tmp_path / "sweep_summary.json").read_text())
    return done.stdout, report, summary


def test_the_sweep_says_what_it_sets_and_why_on_an_h100(tmp_path):
    s = stock("h100-sxm")
    assert s.max_num_seqs > 256  # the case of the issue: the scenario's 256 is not the engine's
    out, report, summary = sweep(tmp_path, "h100-sxm")
    fixed = f"Every run sets max_num_seqs=256 (the engine's own: {s.max_num_seqs})"
    refused = (
        f"with its own value the engine refuses 2 of the 3 settings swept "
        f"(max_num_batched_tokens (256) must be >= max_num_seqs ({s.max_num_seqs})"
    )
    default = f"max_num_batched_tokens={s.max_num_batched_tokens}"
    where = f"vllm@{s.version} on 1 x NVIDIA H100"
    for text in (report, out):
        assert fixed in text and refused in text, text[-2000:]
        assert where in text
        assert f"its own values of the swept settings are {default}" in text
    e = summary["engine_defaults"]
    assert e["default_settings"] == default
    assert e["fixed"] == [{
        "key": "max_num_seqs", "value": 256, "engine_default": s.max_num_seqs,
        "refused_without_it": 2, "reason": e["fixed"][0]["reason"]}]  # fmt: skip
    assert f"{default} (engine default)" in report


def test_where_the_engine_agrees_nothing_is_called_set(tmp_path):
    """On an A100 the engine's own max_num_seqs is the scenario's 256 (and its budget 2,048):
    the sweep sets nothing the engine would not, and the default named is the A100's."""
    s = stock("a100-80gb")
    if s.max_num_seqs != 256:
        pytest.skip("the catalogue's A100 default changed")
    out, report, summary = sweep(tmp_path, "a100-80gb")
    assert "Every run sets" not in report and "Every run sets" not in out
    assert summary["engine_defaults"]["fixed"] == []
    default = f"max_num_batched_tokens={s.max_num_batched_tokens}"
    assert f"its own values of the swept settings are {default}" in report
    assert summary["engine_defaults"]["default_settings"] == default


def test_an_engine_default_that_is_empty_is_named():
    """A fixed argument the engine leaves unset (speculative_model: "") reads "none", not an
    empty parenthesis."""
    from sim.scenarios.sweep.defaults import Fixed

    text = Fixed("speculative_model", "llama-3.1-8b", "", 0, None).text
    assert text == "speculative_model=llama-3.1-8b (the engine's own: none)"


def test_a_sweep_over_gpus_names_every_gpu_it_resolved_to(tmp_path):
    """A sweep of hardware=... said the runs resolved to the base configuration's GPU alone
    (reports/capacity_hardware read 'on 1 x NVIDIA H100' over three GPUs)."""
    cmd = [
        sys.executable, "-m", "sim", "-m", "hydra/launcher=basic", f"hydra.sweep.dir={tmp_path}",
        "hardware=h100-sxm,a100-80gb", "workload.num_requests=20", "output.progress=false",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "sweep_summary.json").read_text())
    where = summary["engine_defaults"]["resolutions"]
    assert [w.split(" (")[0].split(" x ")[1] for w in where] == [
        "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"]  # fmt: skip
    sentence = f"The runs resolve to {where[0]} or {where[1]}, by the swept keys."
    assert sentence in done.stdout and sentence in (tmp_path / "report.md").read_text()
