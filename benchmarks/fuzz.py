"""Fuzzing every parser of user input: `python benchmarks/fuzz.py [--examples N] [--seed S]
[--only PARSER] [--json PATH]`.

Draws about N malformed inputs per parser (default 1,000), spread evenly over the kinds of
tests/fuzz_inputs.py (missing fields, wrong types, NaN / inf, huge numbers, unsorted and
duplicate rows, empty / truncated / non-UTF-8 / random bytes, deep nesting, wrong extensions,
bad paths, ...), writes each to a file and parses it. Every input must either load with sane
values or fail with a one-line UserError naming the file (the key, for the config); anything
else (another exception, a message without the file, insane values, a hang) is FAILED.

Hypothesis draws the inputs from a fixed seed (--seed, default 0): the same command draws the
same inputs with the same Hypothesis version. No shrinking: each failure is kept as drawn.
Prints a table per parser and kind (tried, loaded, clear error, FAILED), writes
benchmarks/fuzz_results.json, and exits 1 if anything FAILED.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as fixed_seed

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fuzz_inputs import PARSERS, STRATEGIES, run  # noqa: E402

OUTCOMES = ("loaded", "error", "FAILED")


def fuzz(parser: str, kind: str, examples: int, seed: int) -> tuple[Counter, list[dict], float]:
    """(outcome counts, failures, slowest example in s) of `examples` inputs of one kind."""
    counts: Counter = Counter()
    failures: list[dict] = []
    slowest = [0.0]

    @fixed_seed(seed)
    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(STRATEGIES[parser][kind])
    def one(example) -> None:
        start = time.perf_counter()
        try:
            counts[run(parser, example)] += 1
        except AssertionError as exc:
            counts["FAILED"] += 1
            failures.append(
                {
                    "parser": parser,
                    "kind": kind,
                    "name": example.name[:80],
                    "where": example.where,
                    "content": (example.content or b"")[:300].decode("utf-8", "replace"),
                    "why": str(exc)[:500],
                }
            )
        slowest[0] = max(slowest[0], time.perf_counter() - start)

    one()
    return counts, failures, slowest[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--examples", type=int, default=1000, help="inputs per parser (default 1000)")
    ap.add_argument("--seed", type=int, default=0, help="Hypothesis seed (default 0)")
    ap.add_argument("--only", action="append", choices=PARSERS, help="fuzz only these parsers")
    ap.add_argument("--json", default=str(REPO / "benchmarks" / "fuzz_results.json"))
    args = ap.parse_args(argv)
    started = time.perf_counter()
    results, failures = {}, []
    for parser in args.only or PARSERS:
        kinds = STRATEGIES[parser]
        per_kind = math.ceil(args.examples / len(kinds))
        t0 = time.perf_counter()
        by_kind, slowest = {}, 0.0
        for kind in kinds:
            counts, failed, slow = fuzz(parser, kind, per_kind, args.seed)
            by_kind[kind] = {"tried": sum(counts.values())} | {o: counts[o] for o in OUTCOMES}
            by_kind[kind]["slowest_s"] = round(slow, 3)
            failures += failed
            slowest = max(slowest, slow)
        total = {o: sum(k[o] for k in by_kind.values()) for o in ("tried", *OUTCOMES)}
        results[parser] = total | {
            "wall_s": round(time.perf_counter() - t0, 1),
            "slowest_example_s": round(slowest, 3),
            "kinds": by_kind,
        }
        print(_table(parser, results[parser]), flush=True)
    wall_s = time.perf_counter() - started
    print(_summary(results, wall_s))
    for f in failures[:20]:
        print(f"FAILED {f['parser']}/{f['kind']} {f['name']} {f['where']}: {f['why']}")
    out = {
        "command": " ".join(["python benchmarks/fuzz.py", *(argv or sys.argv[1:])]),
        "examples_per_parser": args.examples,
        "seed": args.seed,
        "wall_s": round(wall_s, 1),
        "parsers": results,
        "failures": failures[:100],
    }
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 1 if failures else 0


def _table(parser: str, r: dict) -> str:
    lines = [
        f"\n{parser}: {r['tried']} inputs in {r['wall_s']} s (slowest {r['slowest_example_s']} s)",
        f"  {'kind':<16}{'tried':>7}{'loaded':>8}{'error':>7}{'FAILED':>8}{'slowest s':>11}",
    ]
    for kind, k in r["kinds"].items():
        row = "".join(f"{k[o]:>{w}}" for o, w in zip(OUTCOMES, (8, 7, 8), strict=True))
        lines.append(f"  {kind:<16}{k['tried']:>7}{row}{k['slowest_s']:>11.3f}")
    return "\n".join(lines)


def _summary(results: dict, wall_s: float) -> str:
    lines = [
        "\n| parser | tried | loaded | clear error | FAILED |",
        "|---|---:|---:|---:|---:|",
    ]
    for parser, r in results.items():
        lines.append(f"| {parser} | {r['tried']} | {r['loaded']} | {r['error']} | {r['FAILED']} |")
    total = {o: sum(r[o] for r in results.values()) for o in ("tried", *OUTCOMES)}
    lines.append(
        f"| all | {total['tried']} | {total['loaded']} | {total['error']} | {total['FAILED']} |"
    )
    lines.append(f"\nwall time {wall_s:.1f} s")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
