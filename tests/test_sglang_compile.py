"""SGLang's torch.compile arguments (sim/engines/sglang_03.py): enable_torch_compile taken by
every release under its own name, the batch sizes each release compiles, and the measured
decode ratio (sgl-project/sglang#1008) they carry."""

from __future__ import annotations

import json

import pytest

from sim.engines import sglang_03
from sim.engines.resolve import resolve
from sim.errors import UserError
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model
from tests.test_cli import sim

CAPTURED = (1, 2, 4, *range(8, 161, 8))  # 0.3.0-0.3.5 decode graphs (cuda_graph_runner.py)


def settings(spec: str, **args):
    return resolve(spec, load_hardware("h100-sxm"), load_model("llama-3.1-8b"), 1, "server", args)


@pytest.mark.parametrize("release", ["0.3.0", "0.3.2", "0.3.4", "0.3.5", "0.3.6", "0.5.23"])
def test_enable_torch_compile_is_an_sglang_argument(release):
    off = settings(f"sglang@{release}")
    assert off.compile is False and off.display_name("compile") == "enable_torch_compile"
    assert "enable_torch_compile False (server_args.py)" in off.rules["compile"]
    on = settings(f"sglang@{release}", enable_torch_compile=True)
    assert on.compile is True
    assert on.rules["compile"] == "user override (engine_args.enable_torch_compile)"
    shown = {r["name"]: r["value"] for r in on.records()}
    assert shown["enable_torch_compile"] is True


@pytest.mark.parametrize(
    "release, name",
    [
        ("0.3.0", None),
        ("0.3.1", None),
        ("0.3.2", "max_torch_compile_bs"),
        ("0.3.4", "max_torch_compile_bs"),
        ("0.3.5", "torch_compile_max_bs"),
        ("0.3.6", "torch_compile_max_bs"),
    ],
)
def test_the_compile_limit_by_its_release_own_name(release, name):
    assert sglang_03.limit_name(release) == name


def test_compiled_sizes_fixed_before_0_3_2_then_up_to_the_limit():
    assert sglang_03.compiled_sizes("0.3.0", CAPTURED) == (1, 2, 4, 8, 16, 24, 32)
    assert sglang_03.compiled_sizes("0.3.0", CAPTURED, 8) == (1, 2, 4, 8, 16, 24, 32)  # fixed
    assert sglang_03.compiled_sizes("0.3.5", CAPTURED) == (1, 2, 4, 8, 16, 24, 32)
    assert sglang_03.compiled_sizes("0.3.5", CAPTURED, 8) == (1, 2, 4, 8)
    assert sglang_03.compiled_sizes("0.3.5", CAPTURED, 64)[-1] == 64
    # a list size that is not captured is not compiled either (0.3.0 with graphs up to 16)
    assert sglang_03.compiled_sizes("0.3.0", (1, 2, 4, 8, 16)) == (1, 2, 4, 8, 16)


def test_the_decode_ratio_is_the_measured_one_at_batch_1_and_none_past_the_limit():
    compiled = sglang_03.compiled_sizes("0.3.5", CAPTURED)
    ratios = [sglang_03.compiled_decode_ratio(b, compiled) for b in compiled]
    assert ratios[0] == pytest.approx(6.42 / 7.37, abs=1e-3)  # sgl-project/sglang#1008
    assert ratios == sorted(ratios) and all(r < 1 for r in ratios)
    assert sglang_03.compiled_decode_ratio(40, compiled) == 1.0  # captured, not compiled
    assert sglang_03.compiled_decode_ratio(1, ()) == 1.0  # compile off
    rule = sglang_03.compile_rule("0.3.5", True)
    assert "torch_compile_max_bs (default 32)" in rule and "sgl-project/sglang#1008" in rule


def test_the_issue_command_runs(tmp_path):
    out = tmp_path / "run"
    r = sim(
        "engine=sglang@0.3.0",
        "+engine_args.enable_torch_compile=true",
        "workload.num_requests=20",
        f"hydra.run.dir={out}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed"] == 20


def test_disable_cuda_graph_is_sglangs_enforce_eager_and_no_one_elses():
    """SGLang's --disable-cuda-graph (server_args.py of every release from 0.3.0): every step
    eager, as vLLM's enforce_eager; another family refuses it by name."""
    off = settings("sglang@0.3.0", disable_cuda_graph=True)
    assert off.cudagraph_mode == "NONE" and off.compile is False
    assert off.rules["cudagraph_mode"] == "user override (engine_args.disable_cuda_graph)"
    with pytest.raises(UserError, match="disable_cuda_graph is not a vllm argument"):
        settings("vllm@0.10.0", disable_cuda_graph=True)
