"""`python -m sim.calibrate [--gpu NAME] [--data DIR] [--out DIR] [--tables DIR]`: fit the
per-GPU cost profiles from measured kernel tables (sim/calibrate/gpu.py) and write
calibration/profiles/<gpu>.json and calibration/fit-report.md.

`python -m sim.calibrate --runs FILE [--only ID ...] --out PATH [KEY=VALUE ...]`: calibrate
each deployment to its own benchmark runs (a validation case file, or vllm bench serve /
GuideLLM JSON with the deployment given as engine=, hardware=, model=, parallel.tp=, dtype=),
writing its terms to PATH for calibration=PATH (sim/scenarios/fit_runs/)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sim.calibrate.gpu import FAMILIES, SOURCES, Source, calibrate_gpu
from sim.calibrate.kernel_tables import read_tables
from sim.calibrate.report import write_report
from sim.errors import UserError
from sim.paths import CALIBRATION_DIR, SHARED_DATA_DIR, shared_data_missing


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sim.calibrate", description=__doc__)
    parser.add_argument(
        "--data",
        type=Path,
        default=SHARED_DATA_DIR,
        help="the measured data folder (default ../shared/data)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="where profiles/ and fit-report.md go (default calibration/); with --runs, the "
        "calibration file to write (YAML)",
    )
    parser.add_argument("--gpu", action="append", help="only these GPUs (repeatable)")
    parser.add_argument(
        "--tables",
        type=Path,
        help="fit one GPU (--gpu NAME) from this folder of tables instead, e.g. "
        "the output of calibration/profile_gpu.py",
    )
    _run_arguments(parser)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    if args.runs:
        return _runs(parser, args, argv)
    if args.overrides or args.only or args.terms or args.held_out:
        parser.error("KEY=VALUE, --only, --terms and --held-out go with --runs FILE")
    args.out = args.out or CALIBRATION_DIR
    sources = SOURCES
    if args.tables:
        if not args.gpu or len(args.gpu) != 1:
            parser.error("--tables needs exactly one --gpu NAME")
        obs = read_tables(args.tables)
        family = sorted(f for f in obs["family"].unique() if f.startswith(FAMILIES))
        if not family:
            parser.error(f"{args.tables}: no tables of a supported family ({FAMILIES})")
        sources = (Source(args.gpu[0], (str(args.tables.resolve()),), (), family[-1]),)
        args.data = Path("/")

    unknown = sorted(set(args.gpu or ()) - {s.gpu for s in sources})
    if unknown:
        parser.error(
            f"--gpu {', '.join(unknown)}: no table sources listed for it in "
            f"sim/calibrate/gpu.py SOURCES (known: {', '.join(s.gpu for s in sources)}); "
            "add a Source, or fit your own tables with --tables DIR --gpu NAME"
        )
    reports = []
    for source in sources:
        if args.gpu and source.gpu not in args.gpu:
            continue
        if not any((args.data / f).exists() for f in source.folders):
            print(f"skip {source.gpu}: no tables under {args.data}")
            continue
        print(f"fitting {source.gpu}")
        reports.append(calibrate_gpu(source, args.data, args.out))
    if not reports:  # nothing fitted: keep the report that is there
        parser.error(
            f"no tables found under {args.data} for {', '.join(args.gpu or ['any GPU'])}"
            f"{shared_data_missing(args.data, how='give --data PATH of your copy')}"
        )
    report = args.out / (f"fit-report-{args.gpu[0]}.md" if args.tables else "fit-report.md")
    write_report(reports, report)
    print(f"wrote {args.out / 'profiles'} and {report}")


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runs",
        action="append",
        help="a deployment's benchmark runs: a validation case file, or a vllm bench serve / "
        "GuideLLM JSON (repeatable); calibrate to them instead of fitting kernel tables",
    )
    parser.add_argument("--only", action="append", nargs="+", help="--runs: only these case ids")
    parser.add_argument(
        "--terms",
        help="--runs: the terms to fit, comma-separated (decode_scale, prefill_scale, "
        "cpu_step_ms, frontend_ms; default: as many as the runs can tell apart)",
    )
    parser.add_argument(
        "--tolerance",
        type=_tolerance,
        default=0.25,
        help="--runs: refuse a run the fitted terms miss by more than this share (default 0.25)",
    )
    parser.add_argument(
        "--jobs", type=int, help="--runs: simulations at once (default: every core)"
    )
    parser.add_argument(
        "--held-out",
        action="store_true",
        help="--runs: the held-out study: each deployment with 4+ runs calibrated on its lowest "
        "concurrency or rate, the others predicted (PATH gets the tables)",
    )
    parser.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE",
        help="--runs with bench JSON: the deployment (engine=vllm@0.10.1 hardware=h100-sxm "
        "model=llama-3.1-8b parallel.tp=1 dtype=bf16 engine_args.NAME=VALUE)",
    )  # fmt: skip


def _tolerance(text: str) -> float:
    value = float(text)
    if not (0 < value < 1e6):
        raise argparse.ArgumentTypeError(f"{text}: expected a share above 0, such as 0.25")
    return value


def _runs(parser: argparse.ArgumentParser, args, argv: list[str]) -> int:
    if args.out is None:
        parser.error("--runs needs --out PATH (the calibration file to write, .yaml)")
    if args.out.suffix.lower() not in (".yaml", ".yml"):
        parser.error(f"--out {args.out}: the calibration file is YAML; name it PATH.yaml")
    # the fit simulates validation cases: the scenarios above this package (its entry point
    # counts as a root entry, docs/architecture.md)
    from sim.scenarios.fit_runs.cli import calibrate_runs

    try:
        calibrate_runs(args, argv)
    except UserError as exc:
        print(f"sim.calibrate: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
