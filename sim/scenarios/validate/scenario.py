"""scenario=validate as a Scenario: every case of the case files simulated
(sim/scenarios/validate/runs.py), then compared with its measurements
(sim/scenarios/validate/validation.py, written by sim/scenarios/validate/report.py)."""

from __future__ import annotations

from pathlib import Path

from sim.config import SimConfig
from sim.errors import UserError
from sim.report.console import ProgressBar, outputs_line
from sim.scenarios.fanout import say_if_capped
from sim.scenarios.validate.cases import load_cases
from sim.scenarios.validate.report import audit_sentence, write_validation
from sim.scenarios.validate.runs import run_all
from sim.scenarios.validate.validation import Validation


class Validate:
    counts = "cases"

    def check(self, cfg: SimConfig) -> None:
        case_files(cfg)

    def run(self, cfg: SimConfig, out_dir: Path, bar: ProgressBar) -> Validation:
        paths = case_files(cfg)
        cases = load_cases(paths, cfg)
        say_if_capped(cfg.validate.jobs, "validate.jobs")
        results = run_all(cases, cfg.validate.jobs, progress=bar.update_count)
        return Validation(tuple(cases), tuple(results), ", ".join(str(p) for p in paths))

    def write(self, result: Validation, out_dir: Path) -> None:
        write_validation(result, out_dir)

    def brief(self, result: Validation, out_dir: Path, sweeping: bool) -> None:
        print(f"validate: {result.num_cases} cases ({result.num_failed} could not be simulated)")
        overall = result.overall
        for metric, med in overall.median_abs_pct_error.items():
            p90 = overall.p90_abs_pct_error[metric]
            print(f"  {metric:<24} median |error| {med:6.1f}%   p90 {p90:6.1f}%")
        for cid, why in list(result.failed.items())[:5]:
            print(f"  failed {cid}: {why}")
        print("  " + audit_sentence(result.audit).replace("**", ""))
        print(outputs_line(out_dir))


def case_files(cfg: SimConfig) -> tuple[str, ...]:
    paths = cfg.validate.cases
    if not paths:
        raise UserError("scenario=validate needs validate.cases=FILE (or a list: [A,B])")
    missing = [p for p in paths if not Path(p).is_file()]
    if missing:
        raise UserError(f"validate.cases: {missing[0]} does not exist")
    return paths
