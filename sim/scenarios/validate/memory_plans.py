"""The memory plan held to the engines' own start-up logs.

`python -m sim.scenarios.validate.memory_plans validation/memory/memory_logs.yaml --out DIR`
reads a case file of logged engine start-ups (its schema: the header of that file),
rebuilds each engine's settings as a scenario run does (sim/engines/resolve.py resolve, then
sim/kv/memory.py plan_memory, as sim/run/setup.py Setup._build calls them) and compares the
KV pool the plan predicts with the one the engine logged. It writes DIR/memory_plans.csv and
DIR/report.md: per case the predicted and logged KV tokens, the error in % of the logged
tokens, and the error in bytes as a share of the GPU's memory (a memory-tight pool is a small
difference of large numbers: a 2% miss of an 80 GiB GPU is 1.6 GiB of KV).

Tokens are KV bytes over the model's KV bytes per token on one GPU (the plan's
kv_bytes_per_token); a log that gives only the pool's memory (vLLM's "Available KV cache
memory") is turned into tokens the same way, so both sides use one per-token size. The plan is
built with check_fit=False: an engine that refused to start (a pool smaller than
max_model_len, or a negative one) still logged its pool, and that is what is compared.
A case's `sampler` (pytorch | flashinfer) records the top-k/top-p path its installation
ran where the release alone does not decide it (vLLM V1 0.8.x runs FlashInfer's sampler when
the installation has FlashInfer < 0.2.3, as its Docker images do): the profile run's sampler
peak per logit comes from sim/kv/memory.py installed_sampler_bytes_per_logit.
A case the simulator cannot rebuild (an unknown GPU or release, a model that does not fit) is
a row with its reason, never a number.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from sim.engines.resolve import resolve
from sim.errors import UserError
from sim.kv.memory import GIB, installed_sampler_bytes_per_logit, plan_memory
from sim.report.escape import md_cell
from sim.scenarios.validate.targets import Target
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model
from sim.user_files import load_yaml

REQUIRED = ("id", "source", "engine", "hardware", "model", "logged")
KNOWN = (*REQUIRED, "dtype", "parallel", "entry_point", "engine_args", "sampler", "notes")
LOGGED = (
    "kv_tokens",
    "kv_cache_gib",
    "num_gpu_blocks",
    "block_size",
    "weights_gib",
    "non_torch_gib",
    "activation_gib",
    "total_gpu_gib",
)
LOGGED_PARTS = ("weights_gib", "activation_gib", "non_torch_gib")  # shown beside the plan's
TOKENS_TARGET = 0.05  # median |error| of KV tokens (issue 43's acceptance)
GPU_SHARE_TARGET = 0.02  # every case within 2% of the GPU's memory
COLUMNS = (
    "id",
    "engine",
    "hardware",
    "model",
    "tp",
    "logged_tokens",
    "predicted_tokens",
    "error_pct",
    "error_gpu_pct",
    "logged_kv_gib",
    "predicted_kv_gib",
    "weights_gib",
    "logged_weights_gib",
    "activation_gib",
    "logged_activation_gib",
    "cudagraph_gib",
    "non_torch_gib",
    "logged_non_torch_gib",
    "gpu_memory_utilization",
    "total_gpu_gib",
    "logged_total_gpu_gib",
    "source",
    "error",
)


@dataclass(frozen=True, slots=True)
class Comparison:
    """One case's logged pool against the plan's (`error` set: the case was not rebuilt)."""

    case: dict
    logged_tokens: int | None = None
    predicted_tokens: int | None = None
    logged_bytes: int | None = None
    predicted_bytes: int | None = None
    gpu_bytes: int | None = None
    plan: object = None
    error: str = ""

    @property
    def error_pct(self) -> float | None:
        """(predicted - logged) / logged tokens, in %; None for a pool logged at or below 0."""
        if self.error or not self.logged_tokens or self.logged_tokens <= 0:
            return None
        return 100.0 * (self.predicted_tokens - self.logged_tokens) / self.logged_tokens

    @property
    def error_gpu_pct(self) -> float | None:
        """(predicted - logged) KV bytes as a share of the GPU's memory, in %."""
        if self.error:
            return None
        return 100.0 * (self.predicted_bytes - self.logged_bytes) / self.gpu_bytes

    def row(self) -> dict:
        c, p = self.case, self.plan
        par = c.get("parallel") or {}
        out = {
            "id": c.get("id"),
            "engine": c.get("engine"),
            "hardware": c.get("hardware"),
            "model": c.get("model"),
            "tp": par.get("tp", 1),
            "source": c.get("source"),
            "error": self.error,
        }
        if self.error:
            return out
        pct, gpu, logged = self.error_pct, self.error_gpu_pct, c["logged"]
        return (
            out
            | {
                "logged_tokens": self.logged_tokens,
                "predicted_tokens": self.predicted_tokens,
                "error_pct": "" if pct is None else round(pct, 2),
                "error_gpu_pct": round(gpu, 3),
                "logged_kv_gib": round(self.logged_bytes / GIB, 3),
                "predicted_kv_gib": round(self.predicted_bytes / GIB, 3),
                "weights_gib": round(p.weight_bytes / GIB, 3),
                "activation_gib": round(p.activation_bytes / GIB, 3),
                "cudagraph_gib": round(p.cudagraph_bytes / GIB, 3),
                "non_torch_gib": round(p.non_torch_bytes / GIB, 3),
                "gpu_memory_utilization": p.gpu_memory_utilization,
                "total_gpu_gib": round(p.total_bytes / GIB, 3),
            }
            | {f"logged_{k}": logged[k] for k in (*LOGGED_PARTS, "total_gpu_gib") if k in logged}
        )


def load_cases(path: Path) -> list[dict]:
    """The case file's cases, each checked against the schema (one-line UserError)."""
    raw = load_yaml(path, "memory-log case file")
    if not isinstance(raw, dict) or not isinstance(raw.get("cases"), list) or not raw["cases"]:
        raise UserError(f"{path}: expected a mapping with a non-empty list under 'cases'")
    seen: set = set()
    for k, case in enumerate(raw["cases"]):
        where = f"{path}: case {k + 1}"
        if not isinstance(case, dict):
            raise UserError(f"{where}: expected a mapping")
        missing = [key for key in REQUIRED if key not in case]
        unknown = [key for key in case if key not in KNOWN]
        if missing or unknown:
            what = f"missing {', '.join(missing)}" if missing else f"unknown {', '.join(unknown)}"
            raise UserError(f"{where} ({case.get('id')}): {what}; keys: {', '.join(KNOWN)}")
        if case["id"] in seen:
            raise UserError(f"{where}: id {case['id']!r} is used twice")
        seen.add(case["id"])
        logged = case["logged"]
        if not isinstance(logged, dict) or not any(k in logged for k in LOGGED[:2]):
            raise UserError(f"{where} ({case['id']}): logged needs kv_tokens or kv_cache_gib")
        bad = [k for k, v in logged.items() if k not in LOGGED or not _finite(v)]
        if bad:
            raise UserError(
                f"{where} ({case['id']}): logged {', '.join(map(str, bad))}: finite numbers "
                f"under {', '.join(LOGGED)}"
            )
    return raw["cases"]


def _finite(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def compare(case: dict, base: Path) -> Comparison:
    """Rebuild one case's settings and memory plan and hold them to its log."""
    try:
        hw_name, model_name = str(case["hardware"]), str(case["model"])
        hardware = load_hardware(_resolve_path(hw_name, base, (".yaml", ".yml")))
        model = load_model(_resolve_path(model_name, base, (".json",)))
        par = case.get("parallel") or {}
        tp, pp = int(par.get("tp", 1)), int(par.get("pp", 1))
        args = dict(case.get("engine_args") or {})
        settings = resolve(
            str(case["engine"]), hardware, model, tp,
            case.get("entry_point", "server"), args, workers=tp * pp,
        )  # fmt: skip
        if "sampler" in case:  # the installation's sampler: the profile run's peak per logit
            per_logit = installed_sampler_bytes_per_logit(
                settings.version, settings.scheduler, str(case["sampler"])
            )
            if per_logit is not None:
                args["sampler_bytes_per_logit"] = per_logit
                settings = resolve(
                    str(case["engine"]), hardware, model, tp,
                    case.get("entry_point", "server"), args, workers=tp * pp,
                )  # fmt: skip
        plan = plan_memory(
            hardware, model, settings, tp, str(case.get("dtype", "auto")), pp, check_fit=False
        )
    except (UserError, ValueError, TypeError) as exc:
        return Comparison(case, error=str(exc).splitlines()[0])
    per_token = plan.kv_bytes_per_token
    logged = case["logged"]
    if "kv_tokens" in logged:
        logged_tokens = int(logged["kv_tokens"])
        logged_bytes = logged_tokens * per_token
    else:
        logged_bytes = int(float(logged["kv_cache_gib"]) * GIB)
        logged_tokens = logged_bytes // per_token if logged_bytes > 0 else 0
    predicted_bytes = plan.kv_cache_bytes
    return Comparison(
        case,
        logged_tokens=logged_tokens,
        predicted_tokens=max(predicted_bytes, 0) // per_token,
        logged_bytes=logged_bytes,
        predicted_bytes=predicted_bytes,
        gpu_bytes=hardware.hbm_bytes,
        plan=plan,
    )


def _resolve_path(name: str, base: Path, suffixes: tuple[str, ...]) -> str:
    """A path in the case file is relative to the file's folder; a catalogue name stays."""
    if not name.endswith(suffixes) or Path(name).is_absolute():
        return name
    return str(base / name)


def summary(results: list[Comparison]) -> dict:
    """Median |error| of tokens, the worst error as a share of GPU memory, and the verdicts."""
    pcts = [abs(r.error_pct) for r in results if r.error_pct is not None]
    gpus = [abs(r.error_gpu_pct) for r in results if r.error_gpu_pct is not None]
    median = statistics.median(pcts) if pcts else None
    worst = max(gpus) if gpus else None
    return {
        "cases": len(results),
        "compared": len(gpus),
        "refused": sum(1 for r in results if r.error),
        "median_abs_error_pct": median,
        "max_abs_error_gpu_pct": worst,
        "tokens_ok": median is not None and median <= 100 * TOKENS_TARGET,
        "gpu_ok": worst is not None and worst <= 100 * GPU_SHARE_TARGET,
    }


def suite_targets(results: list[Comparison]) -> list:
    """The validation suite's two targets of the memory plan (issue 43): median |error| of KV
    tokens <= 5%, and every case within 2% of its GPU's memory."""
    s = summary(results)
    where = "engine start-up logs (validation/memory/memory_logs.yaml)"
    median, worst = s["median_abs_error_pct"], s["max_abs_error_gpu_pct"]
    tokens_ok = None if median is None else s["tokens_ok"]
    gpu_ok = None if worst is None else s["gpu_ok"]
    n = s["compared"]
    return [
        Target(where, "KV tokens", "median_abs_pct_error", 100 * TOKENS_TARGET, median, n,
               tokens_ok),
        Target(where, "KV tokens' error in GPU memory", "max_abs_pct_of_gpu_memory",
               100 * GPU_SHARE_TARGET, worst, n, gpu_ok),
    ]  # fmt: skip


def write_outputs(results: list[Comparison], out: Path, source: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "memory_plans.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for r in results:
            writer.writerow(r.row())
    (out / "report.md").write_text(report(results, source))


def report(results: list[Comparison], source: Path) -> str:
    s = summary(results)
    fmt = lambda v, d=1: "n/a" if v is None else f"{v:.{d}f}"  # noqa: E731
    lines = [
        "# Memory plans held to the engines' start-up logs",
        "",
        f"Cases: `{source}` ({s['cases']}; {s['compared']} compared, {s['refused']} refused). "
        "Command: `python -m sim.scenarios.validate.memory_plans "
        f"{source} --out <dir>`.",
        "",
        f"- median |error| of KV tokens: {fmt(s['median_abs_error_pct'])}% "
        f"(target <= {100 * TOKENS_TARGET:.0f}%: {'met' if s['tokens_ok'] else 'NOT met'})",
        f"- worst |error| as a share of the GPU's memory: {fmt(s['max_abs_error_gpu_pct'], 2)}% "
        f"(target <= {100 * GPU_SHARE_TARGET:.0f}% for every case: "
        f"{'met' if s['gpu_ok'] else 'NOT met'})",
        *_total_lines(results),
        "",
        "| case | engine | GPU | TP | logged tokens | predicted | error | of GPU memory "
        "| plan: weights / activation / graphs / non-torch GiB (log: weights / activation / "
        "non-torch) | source |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        c = r.case
        tp = (c.get("parallel") or {}).get("tp", 1)
        cells = (md_cell(c.get(key)) for key in ("id", "engine", "hardware"))
        head = f"| {' | '.join(cells)} | {tp}"
        if r.error:
            lines.append(
                f"{head} | | | refused: {md_cell(r.error)} | | | {md_cell(c.get('source'))} |"
            )
            continue
        p = r.plan
        parts = (p.weight_bytes, p.activation_bytes, p.cudagraph_bytes, p.non_torch_bytes)
        plan = " / ".join(f"{b / GIB:.2f}" for b in parts)
        logged = c["logged"]
        if any(k in logged for k in LOGGED_PARTS):
            shown = (logged.get(k) for k in ("weights_gib", "activation_gib", "non_torch_gib"))
            plan += " (log: " + " / ".join("?" if v is None else f"{v:.2f}" for v in shown) + ")"
        pct = "n/a (pool <= 0)" if r.error_pct is None else f"{r.error_pct:+.1f}%"
        lines.append(
            f"{head} | {r.logged_tokens:,} | {r.predicted_tokens:,} | {pct} "
            f"| {r.error_gpu_pct:+.2f}% | {plan} | {md_cell(c.get('source'))} |"
        )
    return "\n".join(lines) + "\n"


def _total_lines(results: list[Comparison]) -> list[str]:
    """A line per GPU whose catalogue total differs from the total its engine logged (vLLM's
    total_gpu_memory is torch's, what the pool is sized against) by more than 0.01 GiB."""
    seen: dict[str, tuple[float, float]] = {}
    for r in results:
        logged = (r.case.get("logged") or {}).get("total_gpu_gib")
        if r.error or logged is None:
            continue
        catalogue = r.plan.total_bytes / GIB
        if abs(catalogue - logged) > 0.01:
            seen.setdefault(str(r.case.get("hardware")), (catalogue, float(logged)))
    return [
        f"- {md_cell(gpu)}: the plan's total is {plan:.2f} GiB, the engine logged {logged:.2f} GiB "
        f"({plan - logged:+.2f} GiB)"
        for gpu, (plan, logged) in sorted(seen.items())
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sim.scenarios.validate.memory_plans", description=__doc__.splitlines()[0]
    )
    parser.add_argument("cases", type=Path, help="a memory-log case file (YAML)")
    parser.add_argument("--out", type=Path, default=Path("reports/validation/memory_plans"))
    args = parser.parse_args(argv)
    try:
        cases = load_cases(args.cases)
        results = [compare(c, args.cases.parent) for c in cases]
        write_outputs(results, args.out, args.cases)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    s = summary(results)
    median, worst = s["median_abs_error_pct"], s["max_abs_error_gpu_pct"]
    print(
        f"{s['compared']} of {s['cases']} cases compared: median |error| "
        f"{'n/a' if median is None else f'{median:.1f}%'} of KV tokens, worst "
        f"{'n/a' if worst is None else f'{worst:.2f}%'} of GPU memory; wrote "
        f"{args.out / 'memory_plans.csv'} and {args.out / 'report.md'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
