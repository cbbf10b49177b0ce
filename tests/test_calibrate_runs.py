"""Calibration to a deployment's own runs (python -m sim.calibrate --runs, calibration=PATH):
the fit recovers terms the simulator itself was run with, the terms apply to the same bits step
by step and fast-forwarded, a calibration file is matched, carried and checked, and what cannot
be fitted is refused in one line naming the fix."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from sim.calibrate.__main__ import main
from sim.config import SimConfig
from sim.errors import UserError
from sim.run.calibration import TERMS, Terms, outside, read
from sim.run.setup import Setup
from sim.run.simulate import simulate
from sim.scenarios.fit_runs.cli import base_config
from sim.scenarios.fit_runs.fit import choose_terms, fit
from sim.scenarios.fit_runs.inputs import read_runs
from sim.scenarios.validate.cases import build_case
from sim.scenarios.validate.runs import run_case

REPO = Path(__file__).resolve().parents[1]
TRUTH = Terms(decode_scale=1.15, prefill_scale=1.3, cpu_step_ms=1.5, frontend_ms=20.0)
DEPLOYMENT = {"engine": "vllm@0.10.1", "hardware": "h100-sxm", "model": "llama-3.1-8b"}


def _case(cid: str, concurrency: int, measured=None, input_len=2048, output_len=128) -> dict:
    body = {"concurrency": concurrency, "num_requests": max(8, 3 * concurrency),
            "input_len": input_len, "output_len": output_len}  # fmt: skip
    placeholder = {"mean_tpot_ms": 1, "mean_ttft_ms": 1, "output_throughput": 1}
    return {"id": cid, **DEPLOYMENT, "workload": {"closed_loop": body},
            "measured": measured or placeholder}  # fmt: skip


def _measured_by_the_simulator(cases: list[dict], terms: Terms, where: Path) -> list[dict]:
    """The cases with what the simulator predicts at `terms` as their measurements."""
    out = []
    for d in cases:
        result = run_case(build_case(d, where / "runs.yaml", base_config()), terms)
        out.append(d | {"measured": {k: round(v, 6) for k, v in result.predicted.items()}})
    return out


def _write(path: Path, cases: list[dict]) -> Path:
    path.write_text(yaml.safe_dump({"cases": cases}, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("runs")
    cases = [_case(f"c{c}", c) for c in (1, 4, 16, 40)]
    return _write(where / "runs.yaml", _measured_by_the_simulator(cases, TRUTH, where))


@pytest.fixture(scope="module")
def calibration(synthetic, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cal") / "cal.yaml"
    assert main(["--runs", str(synthetic), "--out", str(out), "--jobs", "1"]) == 0
    return out


def test_the_fit_recovers_perturbed_terms_within_5_percent(calibration):
    (dep,) = yaml.safe_load(calibration.read_text())["deployments"]
    assert dep["fitted"] == [t.name for t in TERMS]
    for name, truth in TRUTH.as_dict().items():
        value = dep["terms"][name]["value"]
        assert abs(value / truth - 1) <= 0.05, (name, value, truth)
        assert dep["terms"][name]["sd"] is not None
    for run in dep["runs"]:
        assert all(abs(e) < 0.02 for e in run["error_after"].values())
        assert run["held_out_error"] is not None
    assert dep["envelope"]["concurrency"] == [1.0, 40.0]
    assert dep["envelope"]["input_len"] == [2048.0, 2048.0]
    for suffix in (".md", ".png"):
        assert calibration.with_suffix(suffix).is_file()


def test_the_same_runs_write_the_same_bytes(synthetic, calibration, tmp_path):
    again = tmp_path / "cal.yaml"
    assert main(["--runs", str(synthetic), "--out", str(again), "--jobs", "1"]) == 0
    assert again.read_bytes() == calibration.read_bytes().replace(
        str(calibration).encode(), str(again).encode()
    )


@pytest.mark.parametrize("engine", ["vllm@0.10.1", "sglang@0.5.9", "vllm@0.6.3"])
@pytest.mark.parametrize("kind", ["poisson", "closed_loop"])
def test_calibrated_runs_are_the_same_step_by_step_and_fast_forwarded(engine, kind):
    wl = {"kind": kind, "num_requests": 120, "length_dist": "lognormal", "rate": 12.0}
    if kind == "closed_loop":
        wl |= {"concurrency": 12, "rate": None}
    cfg = SimConfig.from_mapping({"engine": engine, "workload": wl})
    frames = []
    for ff in (True, False):
        c = replace(cfg, fast_forward=ff)
        result = simulate(c, setup=Setup.from_config(c, terms=TRUTH))
        frames.append(result.requests.to_csv())
        assert result.summary["calibration"]["terms"] == TRUTH.as_dict()
    assert frames[0] == frames[1]


def test_terms_at_their_priors_change_no_bit():
    cfg = SimConfig.from_mapping({"workload": {"num_requests": 80}})
    plain = simulate(cfg)
    primed = simulate(cfg, setup=Setup.from_config(cfg, terms=Terms()))
    assert primed.requests.to_csv() == plain.requests.to_csv()


def test_each_term_moves_what_it_names():
    cfg = SimConfig.from_mapping({"workload": {"kind": "closed_loop", "concurrency": 8,
                                               "num_requests": 40, "rate": None}})  # fmt: skip
    base = simulate(cfg).summary

    def at(**kw):
        return simulate(cfg, setup=Setup.from_config(cfg, terms=Terms(**kw))).summary

    assert at(decode_scale=1.5)["mean_tpot_ms"] > 1.3 * base["mean_tpot_ms"]
    assert at(prefill_scale=2.0)["mean_ttft_ms"] > 1.3 * base["mean_ttft_ms"]
    assert at(cpu_step_ms=5.0)["mean_tpot_ms"] > base["mean_tpot_ms"] + 4.0
    assert at(frontend_ms=100.0)["mean_ttft_ms"] > base["mean_ttft_ms"] + 90.0


def test_a_matching_run_gets_the_terms_another_release_those_that_carry(calibration):
    def applied(**kw):
        cfg = SimConfig.from_mapping({"calibration": str(calibration), **DEPLOYMENT} | kw)
        return Setup.from_config(cfg).calibration

    same = applied()
    assert same.record["deployment"]["engine"] == "vllm@0.10.1"
    assert set(same.record["terms"]) == {t.name for t in TERMS}
    other = applied(engine="vllm@0.12.0")
    assert other.terms.cpu_step_ms == 0.0 and other.terms.decode_scale == same.terms.decode_scale
    assert other.record["not_carried"] == ["cpu_step_ms"] and "carried" in other.record["note"]
    none = applied(model="qwen3-8b")
    assert none.terms is None and none.record["deployment"] is None
    assert "no deployment" in none.record["reason"] and "qwen3-8b" in none.record["reason"]
    assert applied(parallel={"tp": 2}).terms is None  # another parallelism: another deployment


def test_a_run_outside_the_envelope_says_which_dimension_and_how_far(calibration):
    cfg = SimConfig.from_mapping(
        {"calibration": str(calibration), **DEPLOYMENT,
         "workload": {"kind": "closed_loop", "concurrency": 80, "num_requests": 80, "rate": None,
                      "input_len": 2048, "output_len": 128}}
    )  # fmt: skip
    rec = simulate(cfg).summary["calibration"]
    dims = {o["dimension"]: o for o in rec["outside_envelope"]}
    assert "concurrency" in dims and "2x the largest calibrated (40)" in dims["concurrency"]["by"]
    assert "input_len" not in dims
    assert outside({"rate": [1.0, 2.0]}, {"rate": 0.5})[0]["by"].startswith("0.5x the smallest")


def test_the_command_line_says_the_calibration(calibration, tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "sim", f"calibration={calibration}", "engine=vllm@0.10.1",
         "workload.num_requests=30", "output.report=false", f"hydra.run.dir={tmp_path / 'r'}"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "calibration: llama-3.1-8b on h100-sxm, vllm@0.10.1" in run.stdout
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert set(summary["calibration"]) >= {"path", "deployment", "terms"}


@pytest.mark.parametrize(
    "doc, says",
    [
        ("calibration: 2\ndeployments: []\n", "not a calibration file"),
        ("calibration: 1\ndeployments: []\n", "no deployments"),
        ("calibration: 1\ndeployments:\n- deployment: {model: x}\n  terms: {warp: {value: 1}}\n",
         "unknown term"),
        ("calibration: 1\ndeployments:\n- deployment: {model: x}\n"
         "  terms: {decode_scale: {value: 9}}\n", "outside [0.5, 2]"),
    ],
)  # fmt: skip
def test_a_broken_calibration_file_is_refused(tmp_path, doc, says):
    path = tmp_path / "cal.yaml"
    path.write_text(doc)
    with pytest.raises(UserError, match=says.replace("[", r"\[")):
        read(path)
    with pytest.raises(UserError, match="calibration="):
        read(tmp_path / "missing.yaml")


def _refused(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()  # (the fit's progress lines before it)
    errors = [line for line in err if line.startswith("sim.calibrate: error: ")]
    assert len(errors) == 1 and err[-1] == errors[0]
    return errors[0]


def test_no_runs_is_refused(tmp_path, capsys):
    empty = _write(tmp_path / "none.yaml", [])
    assert "no runs" in _refused(capsys, ["--runs", str(empty), "--out", str(tmp_path / "c.yaml")])


def test_fewer_runs_than_terms_is_refused(synthetic, tmp_path, capsys):
    terms = "decode_scale,prefill_scale"
    argv = ["--runs", str(synthetic), "--only", "c1", "--terms", terms, "--out", str(tmp_path)]
    line = _refused(capsys, [*argv[:-1], str(tmp_path / "c.yaml")])
    assert "2 terms need at least 2 runs; 1 given" in line and "fit fewer terms" in line


def test_terms_are_taken_as_the_runs_allow(synthetic):
    runs = read_runs([str(synthetic)], None, {}, base_config())
    assert choose_terms(runs[:1], None) == ["decode_scale"]
    assert choose_terms(runs[:2], None) == ["decode_scale", "prefill_scale"]
    assert choose_terms(runs[:3], None) == ["decode_scale", "prefill_scale", "frontend_ms"]
    with pytest.raises(UserError, match="no such term"):
        choose_terms(runs, ["warp"])


def test_contradictory_runs_are_refused(synthetic, tmp_path, capsys):
    (first, *_), where = yaml.safe_load(synthetic.read_text())["cases"], tmp_path
    twin = first | {"id": "twin", "measured": {k: v * 1.5 for k, v in first["measured"].items()}}
    runs = _write(where / "runs.yaml", [first, twin])
    line = _refused(capsys, ["--runs", str(runs), "--out", str(where / "c.yaml")])
    assert "contradict each other" in line and "twin" in line


def test_a_run_the_terms_cannot_reproduce_is_refused_with_its_metric(synthetic, tmp_path, capsys):
    cases = yaml.safe_load(synthetic.read_text())["cases"]
    cases[1]["measured"]["mean_tpot_ms"] *= 3  # no term makes one concurrency 3x slower
    runs = _write(tmp_path / "runs.yaml", cases)
    line = _refused(capsys, ["--runs", str(runs), "--out", str(tmp_path / "c.yaml"), "--jobs", "1"])
    assert "cannot be reproduced" in line and "measured" in line and "%" in line


def test_a_bench_json_of_another_model_is_refused(tmp_path, capsys):
    bench = {"model_id": "meta-llama/Llama-3.1-8B-Instruct", "input_lens": [100] * 4,
             "output_lens": [20] * 4, "request_rate": 2.0, "max_concurrency": None,
             "mean_tpot_ms": 9.0, "mean_ttft_ms": 30.0}  # fmt: skip
    path = tmp_path / "run.json"
    path.write_text(json.dumps(bench))
    deployment = ["engine=vllm@0.10.1", "hardware=h100-sxm", "model=qwen3-8b"]
    line = _refused(capsys, ["--runs", str(path), "--out", str(tmp_path / "c.yaml"), *deployment])
    assert "not model=qwen3-8b" in line


def test_a_json_without_the_needed_fields_is_refused(tmp_path, capsys):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"mean_tpot_ms": 9.0}))
    line = _refused(capsys, ["--runs", str(path), "--out", str(tmp_path / "c.yaml"),
                             "engine=vllm@0.10.1", "hardware=h100-sxm"])  # fmt: skip
    assert "without the fields a run needs" in line and "--save-result" in line


def test_a_bench_json_needs_its_deployment(tmp_path, capsys):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"input_lens": [10], "output_lens": [5], "mean_tpot_ms": 9.0}))
    line = _refused(capsys, ["--runs", str(path), "--out", str(tmp_path / "c.yaml")])
    assert "add engine=" in line


def test_a_bench_json_run_is_calibrated(tmp_path):
    bench = {"model_id": "meta-llama/Llama-3.1-8B-Instruct", "input_lens": [512] * 24,
             "output_lens": [64] * 24, "request_rate": 4.0, "burstiness": 1.0,
             "max_concurrency": None, "mean_tpot_ms": 9.0, "mean_ttft_ms": 40.0}  # fmt: skip
    path = tmp_path / "run.json"
    path.write_text(json.dumps(bench))
    out = tmp_path / "c.yaml"
    assert main(["--runs", str(path), "--out", str(out), "--tolerance", "0.5",
                 "engine=vllm@0.10.1", "hardware=h100-sxm"]) == 0  # fmt: skip
    (dep,) = yaml.safe_load(out.read_text())["deployments"]
    assert dep["fitted"] == ["decode_scale"] and dep["deployment"]["model"] == "llama-3.1-8b"


def test_the_held_out_study_calibrates_on_the_lowest_concurrency(synthetic, tmp_path):
    out = tmp_path / "held.yaml"
    assert main(["--runs", str(synthetic), "--held-out", "--out", str(out), "--jobs", "1"]) == 0
    doc = yaml.safe_load(out.read_text())
    (dep,) = doc["deployments"]
    assert dep["calibrated_on"] == "c1" and dep["held_out_runs"] == 3
    assert list(dep["terms"]) == ["decode_scale"]
    assert doc["pooled"]["after"]["tpot"] < doc["pooled"]["before"]["tpot"]
    assert out.with_suffix(".md").is_file() and out.with_suffix(".png").is_file()


def test_runs_the_simulator_meets_leave_the_terms_at_their_priors(tmp_path):
    cases = _measured_by_the_simulator([_case("a", 2), _case("b", 8)], Terms(), tmp_path)
    runs = read_runs([str(_write(tmp_path / "runs.yaml", cases))], None, {}, base_config())
    result = fit(runs, ["decode_scale", "prefill_scale"], jobs=1)
    assert result.terms["decode_scale"] == pytest.approx(1.0, abs=0.01)
    assert result.terms["prefill_scale"] == pytest.approx(1.0, abs=0.01)
    assert result.iterations == 1  # the first move is under the convergence threshold


def test_a_guidellm_result_is_calibrated_per_benchmark(tmp_path):
    from tests.test_validate import _guidellm_benchmark

    data = {
        "benchmarks": [
            _guidellm_benchmark({"type_": "concurrent", "streams": 4}, False),
            _guidellm_benchmark({"type_": "concurrent", "streams": 16}, False),
        ]
    }
    path = tmp_path / "guidellm.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "c.yaml"
    argv = ["--runs", str(path), "--out", str(out), "--tolerance", "100", "--jobs", "1"]
    assert main([*argv, "engine=vllm@0.10.1", "hardware=h100-sxm", "model=llama-3.1-8b"]) == 0
    (dep,) = yaml.safe_load(out.read_text())["deployments"]
    assert len(dep["runs"]) == 2 and dep["fitted"] == ["decode_scale", "prefill_scale"]
    assert dep["envelope"]["concurrency"] == [4.0, 16.0]
