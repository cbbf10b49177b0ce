"""`python -m sim.validation_suite`: the committed validation report, rebuilt from the real runs.

It imports the real end-to-end runs in ../shared/data into case files (the vLLM and SGLang
rows on H100 and H200 of AIConfigurator's silicon sample, and LLMServingSim's four vLLM runs
with per-request timestamps), adds the committed case files of public runs under validation/
(AccelMark, GPUStack's performance lab: validation/README.md), replays every case, and
writes under --out (default reports/validation/): the case files, validation.csv,
summary.json, report.md and its plots, with the issue's accuracy targets checked at the top of
the report. Unless --no-sensitivity,
it replays the vLLM cases again under the other plausible benchmark settings (clients spread,
prefix cache warm: sim/scenarios/validate/settings.py) and reports the prediction as a band.

Nothing here is fitted to these runs: the kernel costs come from isolated-kernel tables
(calibration/profiles), the CPU overheads by release from calibration/engine_overheads.yaml.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from sim.config import SimConfig
from sim.errors import UserError
from sim.paths import REPO_DIR, SHARED_DATA_DIR, shared_data_missing
from sim.report.console import outputs_line
from sim.scenarios.fanout import say_if_capped
from sim.scenarios.validate import memory_plans
from sim.scenarios.validate.cases import Case, load_cases
from sim.scenarios.validate.importers.command import write_cases
from sim.scenarios.validate.importers.llmservingsim import llmservingsim
from sim.scenarios.validate.importers.silicon import silicon
from sim.scenarios.validate.preamble import preamble
from sim.scenarios.validate.report import audit_sentence, write_validation
from sim.scenarios.validate.runs import run_all
from sim.scenarios.validate.settings import run_settings
from sim.scenarios.validate.targets import Target, targets
from sim.scenarios.validate.validation import Validation

DEFAULT_DATA = SHARED_DATA_DIR
DEFAULT_OUT = REPO_DIR / "reports" / "validation"
VISIBLE = REPO_DIR / "validation"  # committed case files of public runs (validation/README.md)
MEMORY_LOGS = VISIBLE / "memory" / "memory_logs.yaml"  # engines' start-up logs: KV pools
SILICON_BACKENDS = ("vllm", "sglang")
SILICON_SYSTEMS = ("h100_sxm", "h200_sxm")
COMMAND = "python -m sim.validation_suite"
BAND_ENGINES = ("vllm@",)  # the engines whose cases get a band over the plausible settings


def build_cases(data: Path, out: Path, visible: Path = VISIBLE) -> tuple[list[Path], list[str]]:
    """Case files from the shared data, written under out/cases; and what was skipped."""
    cases_dir = out / "cases"
    cases_dir.mkdir(parents=True, exist_ok=True)
    csv = data / "aiconfigurator" / "silicon_sample.csv"
    lss = data / "LLMServingSim" / "bench_examples"
    for need in (csv, lss):
        if not need.exists():
            raise UserError(
                f"{need} does not exist"
                + (
                    shared_data_missing(data, how="give --data PATH of your copy")
                    or ": the validation suite replays the real runs in ../shared/data (give "
                    "--data PATH where the shared data folder is elsewhere)"
                )
            )
    notes = []
    files = []
    sil_out = cases_dir / "silicon.yaml"
    sil, skipped = silicon(csv, sil_out, SILICON_BACKENDS, SILICON_SYSTEMS)
    rel = os.path.relpath(csv, sil_out.parent)
    write_cases(
        sil,
        sil_out,
        f"Written by `{COMMAND}` (sim.importers silicon) from {rel}:\n"
        f"the {', '.join(SILICON_BACKENDS)} rows on {', '.join(SILICON_SYSTEMS)}. Measured "
        "values are AIConfigurator's (Apache-2.0).",
    )
    files.append(sil_out)
    notes += [f"silicon sample: skipped {n} rows ({why})" for why, n in sorted(skipped.items())]
    lss_out = cases_dir / "llmservingsim.yaml"
    runs = llmservingsim([str(lss)], lss_out)
    write_cases(
        runs,
        lss_out,
        f"Written by `{COMMAND}` (sim.importers llmservingsim) from "
        f"{os.path.relpath(lss, lss_out.parent)}. Measured values are LLMServingSim's (MIT).",
    )
    files.append(lss_out)
    files += visible_case_files(visible)
    return files, notes


def visible_case_files(folder: Path = VISIBLE) -> list[Path]:
    """The committed case files of public real runs (validation/, each case with its source)."""
    return sorted(folder.glob("*.yaml"))


def banded(case: Case) -> bool:
    """The cases the suite simulates under every plausible benchmark setting
    (sim/scenarios/validate/settings.py): the vLLM cases (the silicon rows on H100/H200, the
    LLMServingSim runs, ...). Their sources do not say how the clients started nor whether the
    server's prefix cache was warm. The SGLang rows are left out to keep the suite's time."""
    return str(case.data.get("engine", "")).startswith(BAND_ENGINES)


def _progress():
    """A progress printer for one pass over the cases: done / total, elapsed, time left."""
    started = time.perf_counter()

    def report(done: int, total: int) -> None:
        if done % max(1, total // 20) == 0 or done == total:
            el = time.perf_counter() - started
            eta = el / done * (total - done)
            print(f"  {done}/{total} cases  {el:5.0f} s elapsed, ~{eta:4.0f} s left", flush=True)

    return report


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="the shared data folder")
    ap.add_argument(
        "--visible",
        default=str(VISIBLE),
        help="the folder of committed case files of public runs (default validation/)",
    )
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="where the report goes")
    ap.add_argument(
        "--jobs",
        type=_positive,
        default=None,
        help="cases at once (default and at most: all cores)",
    )
    ap.add_argument(
        "--no-sensitivity",
        action="store_true",
        help="skip re-running the vLLM cases under the other plausible benchmark settings "
        "(clients spread, prefix cache warm): no band, no client-start table",
    )
    return ap


def _positive(text: str) -> int:
    """--jobs: a whole number >= 1 (argparse says so in one line otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    out = Path(args.out)
    t0 = time.perf_counter()
    try:
        files, notes = build_cases(Path(args.data), out, Path(args.visible))
        cases = load_cases(files, SimConfig.from_mapping({}))
    except UserError as exc:
        print(f"sim.validation_suite: error: {exc}", file=sys.stderr)
        return 2
    print(f"validation suite: {len(cases)} cases from {', '.join(str(f) for f in files)}")
    say_if_capped(args.jobs, "--jobs")
    results = run_all(cases, args.jobs, progress=_progress())
    validation = Validation(tuple(cases), tuple(results), "the real runs in ../shared/data")
    spread = band = None
    if not args.no_sensitivity:
        print(
            "plausible settings: the vLLM cases again, clients spread / prefix cache warm / "
            "first wave counted or left out / the engine's default launch / a front end"
        )
        band = run_settings(cases, results, args.jobs, banded, _progress())
        validation = replace(validation, bands=band.bands, band_runs=band.extra)
        spread = band.client_sensitivity()
    table = validation.table
    logs = memory_plans.load_cases(MEMORY_LOGS)
    memory = [memory_plans.compare(c, MEMORY_LOGS.parent) for c in logs]
    reached = targets(table) + memory_plans.suite_targets(memory)
    text = preamble(reached, notes, COMMAND, spread, table, band)
    extra = {"targets": [t.summary for t in reached]}
    if spread:
        extra["client_sensitivity"] = {m: s.summary for m, s in spread.items()}
    if band is not None:
        extra["settings_band"] = band.summary(table)
    extra["memory_plans"] = memory_plans.summary(memory)
    write_validation(validation, out, preamble=text, extra=extra)
    memory_plans.write_outputs(memory, out / "memory_plans", MEMORY_LOGS)
    print(f"{validation.num_cases} cases ({validation.num_failed} could not be simulated)")
    print(audit_sentence(validation.audit).replace("**", ""))
    _print_targets(reached)
    print(outputs_line(out))
    print(f"{(time.perf_counter() - t0) / 60:.1f} min")
    return 0


def _print_targets(reached: list[Target]) -> None:
    for t in reached:
        if t.statistic in ("median_abs_pct_error", "worst_slice_median_abs_pct_error"):
            lim = "" if t.limit_pct is None else f" (target <= {t.limit_pct:.0f}%)"
            value = "n/a" if t.value_pct is None else f"{t.value_pct:.1f}%"
            worst = "worst slice's " if t.statistic.startswith("worst") else ""
            print(f"  {t.target}: {t.metric} {worst}median |error| {value}{lim}")
    for t in reached:
        if t.statistic == "inside_band_pct" and t.value_pct is not None:
            print(f"  {t.target}: {t.metric} inside the band in {t.value_pct:.0f}% (target >= "
                  f"{t.limit_pct:.0f}%)")  # fmt: skip
        if t.statistic == "max_abs_pct_of_gpu_memory" and t.value_pct is not None:
            print(f"  {t.target}: {t.metric}, worst {t.value_pct:.2f}% (target <= "
                  f"{t.limit_pct:.0f}%)")  # fmt: skip
    lss = [t for t in reached if t.statistic == "abs_pct_error"]
    if lss:
        ok = sum(1 for t in lss if t.met)
        print(f"  LLMServingSim runs: {ok}/{len(lss)} of p50/p90 TTFT/TPOT within 15%")


if __name__ == "__main__":
    sys.exit(main())
