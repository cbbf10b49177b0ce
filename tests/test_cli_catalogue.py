"""The command line says what it knows: sim's own --help and --version, --list of the
catalogues, "did you mean" for mistyped names, HuggingFace ids as catalogue entries, the link
catalogue refused as a GPU, a missing shared data folder named, and sweeps on every core."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib

import pytest
from hydra import compose, initialize_config_dir

import sim.__main__ as entry
from sim.cli import check_overrides
from sim.config import TASKS, SimConfig
from sim.engines.resolve import parse_engine_spec
from sim.errors import UserError
from sim.paths import HARDWARE_DIR, REPO_DIR, SCENARIO_DIR, SHARED_DATA_DIR, shared_data_missing
from sim.scenarios.listing import SECTIONS, first_comment, listing
from sim.specs.hardware import hardware_names, load_hardware
from sim.specs.model_config import catalogue_name, load_model, model_names
from sim.specs.names import catalogue_match, did_you_mean
from tests.test_cli import sim

PYPROJECT = tomllib.loads((REPO_DIR / "pyproject.toml").read_text())


def imports_of(*args, cwd) -> tuple[subprocess.CompletedProcess, set[str]]:
    """python -X importtime -m sim ARGS: the result and every module it imported."""
    env = {**os.environ, "PYTHONPATH": str(REPO_DIR)}
    env.pop("SIM_DEBUG", None)
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "sim", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    names = {
        line.split("|")[-1].strip() for line in r.stderr.splitlines() if "import time:" in line
    }
    assert "sim.__main__" in names or "sim" in names, r.stderr[-500:]
    return r, names


def test_version_and_help_are_sims_and_start_without_the_simulator(tmp_path):
    r, imported = imports_of("--version", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith(f"sim {PYPROJECT['project']['version']} (Hydra "), r.stdout
    assert "sim.specs" in imported  # the list of imports is read
    assert "sim.scenarios.runner" not in imported and "pandas" not in imported
    r = sim("--help", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for said in ("python -m sim --list", "--hydra-help", "scenario=upgrade_diff", "docs/"):
        assert said in r.stdout, said
    assert "Powered by Hydra" not in r.stdout  # Hydra's generic page
    assert entry.version(tmp_path) == PYPROJECT["project"]["version"]  # no pyproject: metadata


def test_list_every_catalogue_from_its_files(capsys):
    text = listing()
    for section in SECTIONS:
        assert listing(section) in text
    gpus = listing("gpus").splitlines()[1:]
    files = sorted(p.stem for p in HARDWARE_DIR.glob("*.yaml") if p.stem != "links")
    assert [line.split()[0] for line in gpus] == files  # every GPU file, as it is added
    assert not any(line.split()[0] == "links" for line in gpus)
    models = listing("model").splitlines()[1:]  # singular taken too
    assert [line.split()[0] for line in models] == model_names()
    assert (
        "8.0B, 32 layers, GQA 32/8 heads, context 131,072, bf16"
        in models[model_names().index("llama-3.1-8b")]
    )
    scenarios = listing("scenarios").splitlines()[1:]
    paths = sorted((SCENARIO_DIR / "scenario").glob("*.yaml"))
    assert [line.split()[0] for line in scenarios] == [p.stem for p in paths]
    for line, path in zip(scenarios, paths, strict=True):
        assert line.rstrip().endswith(first_comment(path)) and first_comment(path), path
    assert "Why did the upgrade change throughput and latency?" in listing("scenarios")
    engines = listing("engines")
    assert "vllm    0.4.0 .. 0.33.x" in engines and "sglang" in engines
    # each rule set with what its releases' changelogs name since the rule set before
    (deepgemm,) = [x for x in engines.splitlines() if x.strip().startswith("sglang@0.4.4.post2 ")]
    assert "SGL_ENABLE_JIT_DEEPGEMM" in deepgemm
    (trt,) = [x for x in engines.splitlines() if x.strip().startswith("trtllm@1.0.0 ")]
    assert "not read" in trt
    with pytest.raises(UserError, match="--list nope: not a catalogue; choose one of: models"):
        listing("nope")


def test_list_from_the_command_line(tmp_path):
    r = sim("--list", "gpus", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("GPUs (hardware=NAME") and "h100-sxm" in r.stdout
    assert "Models" not in r.stdout
    r = sim("--list=enginez", cwd=tmp_path)
    assert r.returncode == 2 and "did you mean engines?" in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("name", "choices", "expected"),
    [
        ("h100", "gpus", " (did you mean h100-sxm?)"),
        ("h200-sxm", "gpus", " (did you mean h200?)"),
        ("rtx4090", "gpus", " (did you mean rtx-4090?)"),
        ("llama3-8b", "models", " (did you mean llama-3.1-8b?)"),
        ("qwen3-235b", "models", " (did you mean qwen3-235b-a22b?)"),
        ("gpt-5", "models", ""),
    ],
)
def test_did_you_mean(name, choices, expected):
    options = hardware_names() if choices == "gpus" else model_names()
    assert did_you_mean(name, options) == expected


def test_unknown_names_suggest_the_closest():
    with pytest.raises(UserError, match=r"hardware='h100' is not in the catalogue \(did you mean"):
        load_hardware("h100")
    with pytest.raises(UserError, match=r"model='llama3-8b' .*did you mean llama-3\.1-8b\?"):
        load_model("llama3-8b")
    with pytest.raises(UserError, match=r"unknown engine 'vlm' \(did you mean vllm\?\)"):
        parse_engine_spec("vlm@0.10.2")


def test_unknown_scenario_suggests_the_closest():
    with pytest.raises(UserError, match=r"\(did you mean chunked_prefill\?\).*--list scenarios"):
        check_overrides(["scenario=chunked-prefill"])


@pytest.mark.parametrize(
    ("hf_id", "entry_name"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("meta-llama/Llama-3.1-8B", "llama-3.1-8b"),
        ("meta-llama/Meta-Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b-hf"),
        ("Qwen/Qwen2.5-7B-Instruct-1M", "qwen2.5-7b-instruct-1m"),
        ("google/gemma-3-27b-pt", "gemma-3-27b-it"),
        ("deepseek-ai/DeepSeek-V3.2-Exp", "deepseek-v3.2-exp"),
        ("openai/gpt-oss-120b", "gpt-oss-120b"),
    ],
)
def test_huggingface_ids_select_their_catalogue_entry(hf_id, entry_name):
    assert catalogue_name(hf_id) == entry_name
    assert load_model(hf_id) == load_model(entry_name)  # the entry itself, by its name


@pytest.mark.parametrize(
    ("hf_id", "suggested"),
    [
        ("Qwen/Qwen3-8B-FP8", "qwen3-8b"),  # another checkpoint dtype: not the same entry
        ("mistralai/Mistral-7B-Instruct-v0.2", "mistral-7b-v0.1"),  # another version
    ],
)
def test_huggingface_ids_of_other_checkpoints_are_refused(hf_id, suggested):
    with pytest.raises(UserError, match=f"did you mean {suggested}.*a HuggingFace id is taken"):
        load_model(hf_id)


def test_every_catalogue_name_matches_only_itself():
    names = model_names()
    assert all(catalogue_match(name, names) == name for name in names)


def test_the_link_catalogue_is_not_a_gpu():
    assert "links" not in hardware_names()
    for name in ("links", str(HARDWARE_DIR / "links.yaml")):
        with pytest.raises(UserError, match=r"holds the links between GPU servers.*not a GPU"):
            load_hardware(name)
    with pytest.raises(UserError) as err:
        load_hardware("h100")
    assert "links" not in str(err.value)


def test_single_run_with_a_huggingface_id_says_which_entry_and_loads_no_joblib(tmp_path):
    out = tmp_path / "run"
    r, imported = imports_of(
        "model=meta-llama/Llama-3.1-8B-Instruct",
        "workload.num_requests=20",
        "output.report=false",
        f"hydra.run.dir={out}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "sim: model=meta-llama/Llama-3.1-8B-Instruct is the catalogue's llama-3.1-8b" in r.stderr
    assert "sim.scenarios.runner" in imported  # the list of imports is read
    assert not {"joblib", "hydra_plugins.hydra_joblib_launcher._core"} & imported
    assert json.loads((out / "summary.json").read_text())["completed"] == 20


@pytest.mark.parametrize(
    ("overrides", "launcher"),
    [([], "JoblibLauncher"), (["hydra/launcher=basic"], "BasicLauncher")],
)
def test_sweeps_run_on_every_core_unless_told_otherwise(overrides, launcher):
    with initialize_config_dir(config_dir=str(SCENARIO_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith(launcher)


@pytest.mark.parametrize(
    ("argv", "task", "added"),
    [
        (["workload.rate=1,2"], "simulate", []),  # joblib, config.yaml's default
        (["scenario=capacity", "hardware=h100-sxm,h200"], "capacity", ["hydra/launcher=basic"]),
        (["scenario=capacity", "hardware=a40,h200", "hydra/launcher=joblib"], "capacity", []),
        (["workload.rate=1,2", "hydra/launcher=ray"], "simulate", []),
    ],
)
def test_sweeps_of_scenarios_that_fan_out_keep_one_point_at_a_time(monkeypatch, argv, task, added):
    """A sweep's points run at once, unless each point fans out on every core itself."""
    assert set(TASKS) >= entry.SELF_PARALLEL_TASKS
    monkeypatch.setattr(sys, "argv", ["sim", "-m", *argv])
    configs = [SimConfig(task=task)]
    entry._choose_launcher(argv, configs)
    assert sys.argv == ["sim", "-m", *argv, *added]


def test_a_missing_shared_data_folder_is_named(tmp_path, capsys):
    absent = tmp_path / "shared" / "data"
    note = shared_data_missing(absent / "traces" / "x.csv")
    assert f"{absent} is not on this machine" in note and str(SHARED_DATA_DIR) in note
    assert shared_data_missing(tmp_path / "x.csv") == ""  # not shared data: nothing to add
    r = sim(
        "workload=trace",
        f"workload.path={absent}/t.csv",
        f"hydra.run.dir={tmp_path}/r",
        cwd=tmp_path,
    )
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "does not exist; the shared data folder" in r.stderr and "SHARED_DATA_DIR" in r.stderr

    from sim.calibrate.__main__ import main as calibrate
    from sim.scenarios.validate.importers.command import main as importers
    from sim.scenarios.validate.suite import build_cases

    assert importers(["llmservingsim", str(absent / "LLMServingSim"), "--out", "x.yaml"]) == 2
    assert "the shared data folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        calibrate(["--data", str(absent), "--out", str(tmp_path / "cal")])
    assert "give --data PATH of your copy" in capsys.readouterr().err
    with pytest.raises(UserError, match=r"the shared data folder .* give --data PATH"):
        build_cases(absent, tmp_path / "suite")


def test_pytest_says_why_tests_skip():
    assert "-rs" in PYPROJECT["tool"]["pytest"]["ini_options"]["addopts"].split()
