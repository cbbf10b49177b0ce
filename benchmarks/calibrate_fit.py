"""How long a calibration to four runs takes: `python benchmarks/calibrate_fit.py [--json PATH]`.

Times `python -m sim.calibrate --runs FILE --only ... --out PATH` end to end in a fresh
process (start-up, reading the case file, the fit with its four terms, the leave-one-run-out
predictions, the YAML, report and plot) for two sets of four runs:

  real       Qwen3-32B on 8 x H100, vLLM 0.12.0, 1,024 -> 1,024 tokens at concurrency 8, 16, 32
             and 64: AIConfigurator's silicon rows, from the committed validation case file
             reports/validation/cases/silicon.yaml (nothing outside the repository is read)
  synthetic  Llama-3.1-8B on one H100, vLLM 0.10.1, closed loops at concurrency 1, 4, 16, 40
             whose measurements the simulator made with known terms (the recovery test's runs)

and prints, per set, the wall time, the simulations the fit ran, and the terms it found. The
issue's target: four runs in at most 30 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CASES = REPO / "reports" / "validation" / "cases" / "silicon.yaml"
REAL = [
    f"aic-qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_vllm_agg_1024x1024_c{c}_tp8_epnone_{n}"
    for c, n in ((8, 33), (16, 36), (32, 39), (64, 42))
]


def synthetic_runs(folder: Path) -> Path:
    """Four runs measured by the simulator itself at known terms (tests/test_calibrate_runs.py)."""
    from sim.run.calibration import Terms
    from sim.scenarios.fit_runs.cli import base_config
    from sim.scenarios.validate.cases import build_case
    from sim.scenarios.validate.runs import run_case

    truth = Terms(decode_scale=1.15, prefill_scale=1.3, cpu_step_ms=1.5, frontend_ms=20.0)
    cases = []
    for c in (1, 4, 16, 40):
        d = {
            "id": f"c{c}", "engine": "vllm@0.10.1", "hardware": "h100-sxm",
            "model": "llama-3.1-8b",
            "measured": {"mean_tpot_ms": 1, "mean_ttft_ms": 1, "output_throughput": 1},
            "workload": {"closed_loop": {"concurrency": c, "num_requests": max(8, 3 * c),
                                         "input_len": 2048, "output_len": 128}},
        }  # fmt: skip
        result = run_case(build_case(d, folder / "runs.yaml", base_config()), truth)
        d["measured"] = {k: round(v, 6) for k, v in result.predicted.items()}
        cases.append(d)
    path = folder / "synthetic.yaml"
    path.write_text(yaml.safe_dump({"cases": cases}, sort_keys=False))
    return path


def timed(args: list[str], out: Path) -> dict:
    started = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "sim.calibrate", *args, "--out", str(out)],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    wall = time.perf_counter() - started
    if run.returncode:
        raise SystemExit(f"failed: {run.stderr.strip().splitlines()[-1]}")
    (dep,) = yaml.safe_load(out.read_text())["deployments"]
    sims = re.search(r"\((\d+) simulations, ([\d.]+) s\)", run.stderr)
    return {
        "wall_s": round(wall, 2),
        "fit_s": float(sims.group(2)) if sims else None,
        "simulations": int(sims.group(1)) if sims else None,
        "terms": {k: v["value"] for k, v in dep["terms"].items() if v["fitted"]},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        results["real"] = timed(["--runs", str(CASES), "--only", *REAL], tmp / "real.yaml")
        runs = synthetic_runs(tmp)
        results["synthetic"] = timed(["--runs", str(runs)], tmp / "synthetic.yaml")
    for name, r in results.items():
        terms = ", ".join(f"{k} {v:.4g}" for k, v in r["terms"].items())
        print(f"{name:<10} {r['wall_s']:6.1f} s wall ({r['fit_s']} s fitting, "
              f"{r['simulations']} simulations): {terms}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
