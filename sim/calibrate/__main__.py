"""`python -m sim.calibrate [--gpu NAME] [--data DIR] [--out DIR] [--tables DIR]`: fit the
per-GPU cost profiles from measured kernel tables (sim/calibrate/gpu.py) and write
calibration/profiles/<gpu>.json and calibration/fit-report.md."""

from __future__ import annotations

import argparse
from pathlib import Path

from sim.calibrate.gpu import FAMILIES, SOURCES, Source, calibrate_gpu
from sim.calibrate.kernel_tables import read_tables
from sim.calibrate.report import write_report
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
        default=CALIBRATION_DIR,
        help="where profiles/ and fit-report.md go (default calibration/)",
    )
    parser.add_argument("--gpu", action="append", help="only these GPUs (repeatable)")
    parser.add_argument(
        "--tables",
        type=Path,
        help="fit one GPU (--gpu NAME) from this folder of tables instead, e.g. "
        "the output of calibration/profile_gpu.py",
    )
    args = parser.parse_args(argv)
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


if __name__ == "__main__":
    main()
