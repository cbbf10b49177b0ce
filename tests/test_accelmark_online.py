"""AccelMark's suite_C online cases are simulated with the workload and launch the runner used
(validation/accelmark.yaml, validation/data/accelmark_lengths.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
LENGTHS = ROOT / "validation" / "data" / "accelmark_suite_c_online.csv"


def _generator():
    spec = importlib.util.spec_from_file_location(
        "accelmark_lengths", ROOT / "validation" / "data" / "accelmark_lengths.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _online_cases() -> list[dict]:
    cases = yaml.safe_load((ROOT / "validation" / "accelmark.yaml").read_text())["cases"]
    return [c for c in cases if c["id"].endswith("-online-qps5")]


def test_lengths_file_is_the_runs_requests():
    gen = _generator()
    df = pd.read_csv(LENGTHS)
    assert len(df) == gen.WARMUP + gen.ONLINE_REQUESTS == 310
    prompt = df["num_prefill_tokens"].to_numpy()
    # the ten warm-up requests are the dataset's first ten, sent again first in the timed run
    assert (prompt[: gen.WARMUP] == prompt[gen.WARMUP : 2 * gen.WARMUP]).all()
    # sharegpt_standard_v1's first 300 prompts: 64..592 tokens, mean 239.6, plus the template
    timed = prompt[gen.WARMUP :] - gen.CHAT_TEMPLATE_TOKENS
    assert (timed.min(), timed.max()) == (64, 592)
    assert abs(timed.mean() - 239.62) < 0.01
    out = df["num_decode_tokens"].to_numpy()
    assert out.max() <= gen.MAX_TOKENS and out.min() >= 1
    assert abs(out.mean() - gen.MEAN_OUTPUT) < 1.0
    np.testing.assert_array_equal(out, gen.outputs(len(df)))  # seeded: the file is reproducible


def test_online_cases_replay_the_file_with_the_runners_launch():
    cases = _online_cases()
    assert len(cases) == 9
    for c in cases:
        body = c["workload"]["poisson"]
        assert body["lengths"] == "data/accelmark_suite_c_online.csv"
        assert (body["rate"], body["num_requests"], body["warmup_requests"]) == (5.0, 310, 10)
        if c["engine"] == "vllm@0.7.3":
            # runners/nvidia_vllm_47f5d58e/runner.py builds AsyncEngineArgs without max_num_seqs
            assert "max_num_seqs" not in c["engine_args"]


CALIBRATION = ROOT / "validation" / "data" / "accelmark_calibration.yaml"
IN_PROCESS_PER_SEQ_S = 1.1e-4  # validation/accelmark.yaml's vLLM 0.7.3 cases


def _predicted_tpot(tmp_path: Path, per_seq_s: float) -> dict[str, float]:
    from sim.config import SimConfig
    from sim.run.simulate import simulate
    from sim.scenarios.validate.cases import load_cases

    data = yaml.safe_load(CALIBRATION.read_text())
    for case in data["cases"]:
        case["engine_args"]["cpu_per_seq_overhead_s"] = per_seq_s
        case["workload"]["poisson"]["lengths"] = str(LENGTHS)
    path = tmp_path / f"calibration_{per_seq_s:g}.yaml"
    path.write_text(yaml.safe_dump(data))
    return {
        c.id: simulate(c.config).summary["median_tpot_ms"]
        for c in load_cases([str(path)], SimConfig())
    }


def test_in_process_cpu_cost_is_the_calibration_runs():
    """The per-sequence CPU time the vLLM 0.7.3 cases carry is the one that reproduces the A800's
    saturated runs: each run's value interpolated between two settings, then averaged."""
    import tempfile

    measured = {
        c["id"]: c["measured"]["median_tpot_ms"]
        for c in yaml.safe_load(CALIBRATION.read_text())["cases"]
    }
    lo, hi = 7e-5, 1.5e-4
    with tempfile.TemporaryDirectory() as tmp:
        at_lo, at_hi = _predicted_tpot(Path(tmp), lo), _predicted_tpot(Path(tmp), hi)
    fits = []
    for case, tpot in measured.items():
        assert at_lo[case] < tpot < at_hi[case], case  # the default engine line is too fast
        fits.append(lo + (hi - lo) * (tpot - at_lo[case]) / (at_hi[case] - at_lo[case]))
    assert abs(np.mean(fits) / IN_PROCESS_PER_SEQ_S - 1) < 0.1, fits
    cases = yaml.safe_load((ROOT / "validation" / "accelmark.yaml").read_text())["cases"]
    vllm_073 = [c for c in cases if c["engine"] == "vllm@0.7.3"]
    assert vllm_073 and all(
        c["engine_args"]["cpu_per_seq_overhead_s"] == IN_PROCESS_PER_SEQ_S for c in vllm_073
    )
