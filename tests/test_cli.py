"""The command line end to end: a real run in a chosen dir, and one-line user errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from sim.cli import check_overrides, compose_config, to_sim_config
from sim.paths import REPO_DIR
from tests.conftest import RUN_FILES


def sim(*args, cwd, module: str | None = "sim"):
    env = {**os.environ, "PYTHONPATH": str(REPO_DIR)}
    env.pop("SIM_DEBUG", None)
    return subprocess.run(
        [sys.executable, *(["-m", module] if module else []), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_run_writes_everything_into_the_run_dir(tmp_path):
    out = tmp_path / "run"
    r = sim(f"hydra.run.dir={out}", "workload.num_requests=60", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Serving Benchmark Result" in r.stdout
    for name in RUN_FILES:
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    for key in (
        "completed",
        "duration",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "mean_ttft_ms",
        "median_tpot_ms",
        "std_itl_ms",
        "p50_e2el_ms",
        "p90_ttft_ms",
        "p99_itl_ms",
    ):
        assert key in summary, key
    assert summary["completed"] == 60
    assert summary["sim"]["steps"] == len(pd.read_parquet(out / "steps.parquet"))
    assert len(pd.read_parquet(out / "requests.parquet")) == 60
    assert not list(tmp_path.glob("outputs"))  # nothing written outside the run dir


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["workload.rat=5"], "unknown key workload.rat (did you mean workload.rate?)"),
        (["foo=1"], "unknown key foo"),
        (["workload.rate=-1"], "workload.rate=-1.0: must be > 0"),
        (["workload.num_requests=many"], "workload.num_requests='many': expected an integer"),
        (["scenario=nope"], "scenario='nope' is not a scenario; choose one of:"),
        (["workload=weird"], "workload='weird' is not a workload"),
        (["hardware=h900"], "hardware='h900' is not in the catalogue"),
        (["model=llama-3.1-70b"], "raise parallel.tp"),
        (["engine=vllm@0.0.1"], "vllm 0.0.1 is outside the known range 0.4.0 .. 0.33.0"),
        (["engine=vllm@0.8.45"], "the nearest known: 0.8.5.post1 and 0.9.0"),
        (["hardware=H100-PCIe"], "(did you mean h100-sxm?)"),
        (["engine_args.max_num_seqs=0"], "max_num_seqs=0: must be >= 1"),
        (["engine_args.not_an_arg=3"], "unknown key engine_args.not_an_arg"),
        (["parallel.tp=3"], "must divide"),
        (["parallel.pp=2", "engine=sglang"], "pipeline parallelism is modelled for vLLM's V1"),
        (["parallel.ep=2"], "not a mixture-of-experts model"),
        (["model=qwen3-30b-a3b", "parallel.ep=4"], "or over every GPU of the data-parallel ranks"),
        (
            ["model=qwen3-30b-a3b", "parallel.dp=2", "parallel.ep=2", "engine=sglang"],
            "across data-parallel ranks is modelled for vLLM's V1",
        ),
        (["-m", "workload.rate=5,-2"], "workload.rate=-2.0: must be > 0"),
    ],
)
def test_user_errors_are_one_line(tmp_path, args, expected):
    r = sim(*args, f"hydra.run.dir={tmp_path / 'x'}", cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("sim: error: ") and expected in lines[0], lines[0]
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "x").exists()


def test_multirun_sweeps_each_value_into_its_own_dir(tmp_path):
    r = sim(
        "-m",
        "workload.rate=5,10",
        "workload.num_requests=20",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    rates = sorted(
        json.loads((tmp_path / "sweep" / str(i) / "summary.json").read_text())["request_rate"]
        for i in (0, 1)
    )
    assert rates == [5.0, 10.0]
    # output.report=null (the default): no per-point report.md or plots in a sweep, whose own
    # report covers its points; a single run gets them (test_run_writes_everything...)
    for i in (0, 1):
        assert not (tmp_path / "sweep" / str(i) / "report.md").exists()
        assert not list((tmp_path / "sweep" / str(i)).glob("*.png"))
    assert (tmp_path / "sweep" / "report.md").is_file()
    r = sim(
        "-m",
        "workload.rate=5",
        "workload.num_requests=20",
        "output.report=true",
        f"hydra.sweep.dir={tmp_path / 'asked'}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "asked" / "0" / "report.md").is_file()  # asked for: written


@pytest.mark.parametrize(
    "overrides",
    [
        ["workload.rate=7.5", "engine_args.max_num_seqs=64", "seed=3"],
        ["scenario=chunked_prefill", "engine_args.max_num_batched_tokens=1024"],
        ["engine=sglang", "workload.input_len=300", "output.report=false", "trace=true"],
        ["engine_args.long_prefill_token_threshold=0", "slo.ttft_ms=500", "parallel.tp=2"],
        ["kernel_check.timings=x.csv", "workload.kind=closed_loop", "workload.concurrency=4"],
    ],
)
def test_checked_configs_match_hydras_composition(overrides):
    """check_overrides sets plain key=value overrides on the composed base as plain data (a
    fast path for sweeps of many points): the configs must equal Hydra's own composition."""
    (checked,) = check_overrides(overrides)
    assert checked == to_sim_config(compose_config(overrides))


def test_a_scenarios_own_sweep_checked_as_hydra_composes_each_point(monkeypatch):
    """With -m, check_overrides adds the scenario's sweep (hydra.sweeper.params) and reuses
    the config it composed to read them as the points' base (one composition in all): each
    point is still Hydra's."""
    import sim.cli

    composed = []
    compose = sim.cli.compose  # Hydra's
    monkeypatch.setattr(sim.cli, "compose", lambda *a, **k: composed.append(a) or compose(*a, **k))
    checked = check_overrides(["scenario=chunked_prefill", "workload.rate=4,6"], multirun=True)
    monkeypatch.undo()
    assert len(composed) == 1
    budgets = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
    assert len(checked) == len(budgets) * 2 * 2  # the rate given on the command line wins
    for cfg in (checked[0], checked[-1]):
        args = cfg.engine_args
        point = [
            "scenario=chunked_prefill",
            f"workload.rate={cfg.workload.rate:g}",
            f"engine_args.max_num_batched_tokens={args['max_num_batched_tokens']}",
            f"engine_args.long_prefill_token_threshold={args['long_prefill_token_threshold']}",
        ]
        assert cfg == to_sim_config(compose_config(point))
    assert {c.engine_args["max_num_batched_tokens"] for c in checked} == set(budgets)


def test_trace_replay_from_the_command_line(tmp_path):
    from tests.conftest import shared_data

    trace = shared_data("traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv")
    out = tmp_path / "run"
    r = sim(
        "workload=trace",
        f"workload.path={trace}",
        "workload.num_requests=200",
        f"hydra.run.dir={out}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    reqs = pd.read_parquet(out / "requests.parquet")
    assert len(reqs) == 200 and reqs["arrival_s"].iloc[0] == 0.0
    assert reqs["prompt_tokens"].iloc[:2].tolist() == [374, 396]  # the file's first rows


def test_hydras_second_pass_is_skipped_only_for_sweeps_checked_here(monkeypatch):
    """python -m sim composes and checks every point of a basic sweep before Hydra starts, so
    Hydra's own pass over them is skipped; another sweeper's points keep it."""
    import sim.__main__ as entry  # the entry point's module, for its hook

    calls = []
    monkeypatch.setattr(entry, "_hydra_validate", lambda self, batch: calls.append(batch))

    class BasicSweeper:
        pass

    class OptunaSweeper:
        pass

    entry._checked_already(BasicSweeper(), [["a=1"]])
    entry._checked_already(OptunaSweeper(), [["a=2"]])
    assert calls == [[["a=2"]]]


def test_no_scenario_sets_hydra_mode():
    """A single run skips Hydra's get_mode (sim/__main__.py), which composes the config only
    to read hydra.mode: that holds while no scenario sets it."""
    from hydra import compose, initialize_config_dir

    from sim.cli import group_options
    from sim.paths import SCENARIO_DIR

    with initialize_config_dir(config_dir=str(SCENARIO_DIR), version_base="1.3"):
        for scenario in group_options("scenario"):
            cfg = compose("config", [f"scenario={scenario}"], return_hydra_config=True)
            assert cfg.hydra.mode is None, scenario


COUNT_COMPOSES = """
import sys
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.hydra import Hydra
import sim.__main__ as entry

calls = []
load = ConfigLoaderImpl.load_configuration
def counted(self, *args, **kwargs):
    calls.append(1)
    return load(self, *args, **kwargs)
ConfigLoaderImpl.load_configuration = counted
compose = Hydra.compose_config
sys.argv = ["sim", *sys.argv[1:]]
entry.main()
print("composed", len(calls), "restored", Hydra.compose_config is compose)
"""


def _counted(script: str, tmp_path, *args):
    """`script` (COUNT_COMPOSES or a variant) run as `python -m sim ARGS` of 20 requests."""
    r = sim("-c", script, *args, "workload.num_requests=20", cwd=tmp_path, module=None)
    assert r.returncode == 0, r.stderr
    return r


def test_a_single_run_composes_its_config_once(tmp_path):
    out = tmp_path / "run"
    r = _counted(COUNT_COMPOSES, tmp_path, f"hydra.run.dir={out}", "output.report=false")
    assert "composed 1 restored True" in r.stdout
    assert (out / "summary.json").is_file() and (out / ".hydra" / "config.yaml").is_file()


def test_a_sweep_does_not_compose_its_config_to_learn_its_mode(tmp_path):
    """Hydra's get_mode composes the whole config to read hydra.mode; a sweep takes its mode
    from -m instead (sim/__main__.py), with the same overrides recorded as Hydra's answer
    (None: no scenario sets it) would give."""
    count_get_mode = COUNT_COMPOSES.replace(
        "compose = Hydra.compose_config",
        "modes = []\nget_mode = Hydra.get_mode\n"
        "Hydra.get_mode = lambda *a, **k: modes.append(1) or get_mode(*a, **k)\n"
        "compose = Hydra.compose_config",
    ).replace('print("composed"', 'print("get_mode", len(modes), "composed"')
    out = tmp_path / "sweep"
    args = ("-m", f"hydra.sweep.dir={out}", "hydra/launcher=basic", "workload.rate=2,4")
    r = _counted(count_get_mode, tmp_path, *args)
    assert "get_mode 0 composed" in r.stdout
    for point in ("0", "1"):
        assert (out / point / "summary.json").is_file()
        hydra_yaml = (out / point / ".hydra" / "hydra.yaml").read_text()
        assert "- hydra.mode=MULTIRUN" in hydra_yaml and "mode: MULTIRUN" in hydra_yaml
