"""`python -m sim.compare RUN_DIR ...`: the headline figures of several runs side by side.

Each argument is a run dir (holding summary.json) or a folder of them (a Hydra multirun dir);
runs are listed in the order given, a multirun's in job order. Prints a table and, with
--out FILE.md or FILE.csv, writes it. Beside the setup, a column per setting that differs
between the runs compared (from each summary.json's `config`: a sweep's swept values, or any
other override), by its own name (`rate`, `max_num_batched_tokens`; the dotted key where two
share a name).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import pandas as pd

COLUMNS = {  # column -> (summary key path, format)
    "engine": (("backend",), "{}"),
    "req/s": (("request_throughput",), "{:.2f}"),
    "out tok/s": (("output_throughput",), "{:.0f}"),
    "TTFT p50 ms": (("median_ttft_ms",), "{:.1f}"),
    "TTFT p99 ms": (("p99_ttft_ms",), "{:.1f}"),
    "TPOT p50 ms": (("median_tpot_ms",), "{:.2f}"),
    "TPOT p99 ms": (("p99_tpot_ms",), "{:.2f}"),
    "ITL p50 ms": (("median_itl_ms",), "{:.2f}"),
    "E2E p50 s": (("median_e2el_ms",), "{:.2f}"),
    "preempted": (("sim", "preemptions"), "{}"),
    "batch mean": (("sim", "mean_batch_size"), "{:.1f}"),
    "KV peak": (("sim", "kv_usage_peak"), "{:.0%}"),
    "rejected": (("failed",), "{}"),
}


def find_runs(paths: list[str]) -> list[Path]:
    runs: list[Path] = []
    for p in map(Path, paths):
        if (p / "summary.json").exists():
            runs.append(p)
            continue
        found = sorted(
            (s.parent for s in p.glob("*/summary.json")),
            key=lambda d: (not d.name.isdigit(), int(d.name) if d.name.isdigit() else d.name),
        )
        if not found:
            raise SystemExit(f"sim.compare: error: no summary.json in {p} or its subfolders")
        runs += found
    return runs


# config keys the setup and engine columns already show, and output options (no effect on a
# run's figures)
SHOWN = {"engine", "model", "hardware", "parallel.tp", "parallel.pp", "parallel.ep", "parallel.dp",
         "parallel.router"}  # fmt: skip
NOT_SETTINGS = "output."


def flat(config: dict, prefix: str = "") -> dict[str, str]:
    """A run's config as dotted keys and their values as text (16.0 -> 16, None -> null)."""
    out = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            out |= flat(value, f"{prefix}{key}.")
        elif isinstance(value, float):
            out[f"{prefix}{key}"] = f"{value:g}"
        else:
            out[f"{prefix}{key}"] = value if isinstance(value, str) else json.dumps(value)
    return out


def differing(configs: list[dict[str, str]]) -> dict[str, str]:
    """The config keys whose values differ between the runs -> their column names (the leaf
    name, or the dotted key where two leaves share a name). A key some runs lack (written by
    an older release) is left out: nobody set it."""
    keys = [
        k
        for k in configs[0]
        if k not in SHOWN and not k.startswith(NOT_SETTINGS) and all(k in c for c in configs)
    ]
    keys = [k for k in keys if len({c[k] for c in configs}) > 1]
    leaves = Counter(k.rpartition(".")[2] for k in keys)
    return {k: k.rpartition(".")[2] if leaves[k.rpartition(".")[2]] == 1 else k for k in keys}


def table(runs: list[Path]) -> pd.DataFrame:
    summaries = [json.loads((run / "summary.json").read_text()) for run in runs]
    configs = [flat(s.get("config") or {}) for s in summaries]
    columns = differing(configs) if len(runs) > 1 else {}
    rows = []
    for run, s, config in zip(runs, summaries, configs, strict=True):
        if "request_throughput" not in s:
            raise SystemExit(f"sim.compare: error: {run} is not a simulation run")
        row = {}
        for column, (path, _) in COLUMNS.items():
            value = s
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            row[column] = value
        if row["E2E p50 s"] is not None:
            row["E2E p50 s"] /= 1e3
        cfg = s.get("config", {})
        par = cfg.get("parallel", {})
        setup = f"{s.get('model_id', '')} on {cfg.get('hardware', '')} tp{par.get('tp', 1)}"
        setup += "".join(f" {k}{par[k]}" for k in ("pp", "ep", "dp") if par.get(k, 1) > 1)
        if par.get("dp", 1) > 1:
            setup += f" {par.get('router', '')}"
        row["setup"] = setup
        row |= {name: config.get(key, "") for key, name in columns.items()}
        row["run"] = str(run)
        rows.append(row)
    df = pd.DataFrame(rows)
    df.attrs["differing"] = list(columns.values())
    return df


def formatted(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    for column, (_, fmt) in COLUMNS.items():
        out[column] = [fmt.format(v) if v is not None else "" for v in df[column]]
    return out.drop(columns=["run"])[["setup", *df.attrs.get("differing", []), *COLUMNS]]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m sim.compare", description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="run dirs or multirun dirs")
    ap.add_argument("--out", help="write the table to FILE.md or FILE.csv")
    args = ap.parse_args(argv)
    df = table(find_runs(args.runs))
    text = markdown(formatted(df))
    print(text)
    if args.out:
        out = Path(args.out)
        if out.suffix == ".csv":
            df.to_csv(out, index=False)
        else:
            out.write_text(text + "\n")
        print(f"wrote {out}", file=sys.stderr)


def markdown(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    width = {c: max(len(c), *(len(str(v)) for v in df[c])) for c in cols}

    def line(cells) -> str:
        return "| " + " | ".join(str(v).ljust(width[c]) for c, v in cells) + " |"

    rows = [line((c, c) for c in cols), "|" + "|".join("-" * (width[c] + 2) for c in cols) + "|"]
    rows += [line((c, r[c]) for c in cols) for _, r in df.iterrows()]
    return "\n".join(rows)


if __name__ == "__main__":
    main()
