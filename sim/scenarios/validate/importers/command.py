"""`python -m sim.importers KIND INPUT... --out cases.yaml`: case files from real results.

Kinds:
  silicon        AIConfigurator-style silicon CSV rows (mean TTFT and TPOT of a deployment at a
                 fixed concurrency and ISL/OSL): one closed-loop case per aggregated row
  bench_json     `vllm bench serve --save-result` files: the file is the workload and its
                 metrics are what was measured (name the engine, GPU and model with flags)
  llmservingsim  LLMServingSim bench_examples runs (vllm/meta.json + vllm/requests.jsonl): the
                 recorded arrivals replayed, TTFT and TPOT compared at mean, p50, p90 and p99
  guidellm       GuideLLM benchmark JSON: one case per benchmark (concurrent, constant, poisson
                 or throughput strategy; lengths fixed at the benchmark's mean token counts)
Paths in the written file are relative to its folder. Rows that cannot become a case (a
disaggregated deployment, a GuideLLM sweep step without a fixed rate) are skipped and counted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sim.errors import UserError
from sim.paths import shared_data_missing
from sim.scenarios.validate.importers.bench_json import bench_json
from sim.scenarios.validate.importers.fields import relative_path
from sim.scenarios.validate.importers.guidellm import guidellm
from sim.scenarios.validate.importers.llmservingsim import llmservingsim
from sim.scenarios.validate.importers.silicon import silicon
from sim.user_files import file_problem, require_file, yaml_text

KINDS = ("silicon", "bench_json", "llmservingsim", "guidellm")


def write_cases(cases: list[dict], out: Path, header: str) -> None:
    """The case file `out`: `header` as its opening comment, then the cases."""
    out.parent.mkdir(parents=True, exist_ok=True)
    body = yaml_text({"cases": cases})  # text that reads as a number (4e0) quoted
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    out.write_text(comment + body)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m sim.importers", description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=KINDS)
    ap.add_argument("inputs", nargs="+", help="files or folders to import")
    ap.add_argument("--out", required=True, help="the case file to write")
    ap.add_argument("--backend", action="append", help="silicon: only these backends")
    ap.add_argument("--system", action="append", help="silicon: only these systems")
    ap.add_argument("--engine", help="bench_json / guidellm: engine spec, e.g. vllm@0.10.2")
    ap.add_argument("--hardware", help="bench_json / guidellm: catalogue GPU name")
    ap.add_argument("--model", help="bench_json / guidellm: catalogue model or config.json")
    ap.add_argument("--tp", type=int, default=1)
    return ap


def imported(args: argparse.Namespace, out: Path) -> tuple[list[dict], dict[str, int]]:
    """(cases, inputs skipped by reason) of the command's kind and inputs."""
    for p in args.inputs:
        if args.kind == "llmservingsim" and file_problem(p) == "is a directory":
            continue  # a folder of runs
        require_file(p, str(p), shared_data_missing(p))
    if args.kind == "silicon":
        cases, skipped = [], {}
        for p in args.inputs:
            got, skip = silicon(Path(p), out, args.backend, args.system)
            cases += got
            for k, v in skip.items():
                skipped[k] = skipped.get(k, 0) + v
        return cases, skipped
    if args.kind == "llmservingsim":
        return llmservingsim(args.inputs, out), {}
    if not (args.engine and args.hardware):
        raise UserError(f"{args.kind}: give --engine and --hardware (and --model)")
    if args.kind == "bench_json":
        return bench_json(args.inputs, out, args.engine, args.hardware, args.model, args.tp), {}
    return guidellm(args.inputs, out, args.engine, args.hardware, args.model, args.tp)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    out = Path(args.out)
    try:
        cases, skipped = imported(args, out)
    except (UserError, OSError, ValueError) as exc:
        print(f"sim.importers: error: {exc}", file=sys.stderr)
        return 2
    header = (
        f"Written by `python -m sim.importers {args.kind}` from "
        f"{', '.join(relative_path(p, out) for p in args.inputs)}.\n"
        "Measured values are the source's; paths are relative to this file."
    )
    write_cases(cases, out, header)
    print(f"wrote {len(cases)} cases to {out}")
    for why, count in sorted(skipped.items()):
        print(f"  skipped {count}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
