"""The runs a calibration is fitted to: the cases of a validation case file (`--only` picks
ids), or `vllm bench serve --save-result` / GuideLLM JSON files with the deployment named by
overrides (engine=, hardware=, model=, parallel.tp=, dtype=, engine_args.NAME=); each run a
Case (sim/scenarios/validate/cases.py), grouped by deployment (Setup.deployment)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sim.config import SimConfig
from sim.errors import UserError, shown
from sim.paths import MODEL_CATALOG_DIR
from sim.run.setup import Setup
from sim.scenarios.validate.cases import Case, build_case, load_cases
from sim.scenarios.validate.importers.bench_json import bench_json
from sim.scenarios.validate.importers.catalogue import catalogue_model
from sim.scenarios.validate.importers.guidellm import guidellm
from sim.user_files import file_problem, load_json, require_file

# the measured figures a fit reads, by family, in the order a run's own is chosen
FAMILIES = {
    "tpot": ("mean_tpot_ms", "median_tpot_ms", "p50_tpot_ms"),
    "ttft": ("mean_ttft_ms", "median_ttft_ms", "p50_ttft_ms"),
    "throughput": ("output_throughput",),
}
OVERRIDE_KEYS = ("engine", "hardware", "model", "dtype", "entry_point", "kv_cache_dtype")
PARALLEL_KEYS = ("parallel.tp", "parallel.pp", "parallel.ep", "parallel.dp")


@dataclass(frozen=True)
class Run:
    """One run to fit: its case, and the measured figure of each family it has."""

    case: Case
    keys: dict[str, str]  # family -> the summary.json key measured

    @property
    def id(self) -> str:
        return self.case.id


def parse_overrides(items: list[str]) -> dict:
    """KEY=VALUE words (engine=vllm@0.10.1 parallel.tp=2 engine_args.max_num_seqs=64) as a
    case's keys."""
    out: dict = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UserError(f"{shown(item)}: expected KEY=VALUE (e.g. engine=vllm@0.10.1)")
        if key in OVERRIDE_KEYS:
            out[key] = value
        elif key in PARALLEL_KEYS:
            out.setdefault("parallel", {})[key.split(".")[1]] = _number(key, value)
        elif key.startswith("engine_args.") and len(key) > len("engine_args."):
            out.setdefault("engine_args", {})[key.split(".", 1)[1]] = _value(value)
        else:
            known = ", ".join((*OVERRIDE_KEYS, *PARALLEL_KEYS, "engine_args.NAME"))
            raise UserError(f"{shown(key)}=: not a deployment key; give any of {known}")
    return out


def _number(key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise UserError(f"{key}={shown(value)}: expected a whole number") from None


def _value(value: str):
    try:
        return json.loads(value)
    except ValueError:
        return value


def read_runs(
    paths: list[str], only: list[str] | None, overrides: dict, base: SimConfig, skip=None
):
    """Every run of `paths` (the ids in `only`, when given) as Runs; a one-line UserError
    naming the fix for what cannot be fitted, or with `skip` (a dict) the run left out and
    counted there by its reason (the held-out study of a whole suite)."""
    if not paths:
        raise UserError(
            "no runs: give --runs FILE (a case file, vllm bench serve or GuideLLM JSON)"
        )
    cases: list[Case] = []
    for path in paths:
        cases += _cases(Path(path), overrides, base)
    if only:
        known = {c.id for c in cases}
        missing = [i for i in only if i not in known]
        if missing:
            some = ", ".join(sorted(known)[:5]) + (", ..." if len(known) > 5 else "")
            raise UserError(
                f"--only {shown(missing[0])}: no run of that id in {', '.join(paths)} (ids: {some})"
            )
        cases = [c for c in cases if c.id in only]
    if not cases:
        raise UserError(f"no runs in {', '.join(paths)}: the file lists none")
    runs = []
    for case in cases:
        if case.error and skip is not None:
            why = case.error.split(":")[0]
            skip[why] = skip.get(why, 0) + 1
            continue
        if case.error:
            raise UserError(f"run {case.id} cannot be simulated: {case.error}")
        keys = {
            family: key
            for family, names in FAMILIES.items()
            if (key := next((k for k in names if _usable(case, k)), None))
        }
        if not keys and skip is not None:
            why = "measured none of TPOT, TTFT, throughput"
            skip[why] = skip.get(why, 0) + 1
            continue
        if not keys:
            raise UserError(
                f"run {case.id} measured none of TPOT, TTFT or output throughput "
                f"({', '.join(n for names in FAMILIES.values() for n in names)}): a fit needs them"
            )
        runs.append(Run(case, keys))
    return runs


def _usable(case: Case, key: str) -> bool:
    return case.measured.get(key) is not None and key not in case.unusable


def _cases(path: Path, overrides: dict, base: SimConfig) -> list[Case]:
    if file_problem(path) == "is a directory":
        raise UserError(f"--runs {path} is a folder; give the files in it")
    require_file(path, f"--runs {path}")
    if path.suffix.lower() in (".yaml", ".yml"):
        if overrides:
            raise UserError(
                f"{path} is a case file: each case names its own deployment; the overrides "
                f"({', '.join(overrides)}) are for bench JSON files"
            )
        return load_cases([path], base)
    if path.suffix.lower() != ".json":
        raise UserError(
            f"--runs {path}: expected a case file (.yaml) or a vllm bench serve / GuideLLM "
            "result (.json)"
        )
    data = load_json(path, "benchmark result")
    if isinstance(data, dict) and isinstance(data.get("benchmarks"), list):
        kind = "GuideLLM"
    elif isinstance(data, dict) and "input_lens" in data and "output_lens" in data:
        kind = "vllm bench serve"
    else:
        raise UserError(
            f"{path}: a JSON without the fields a run needs: save vllm bench serve results with "
            "--save-result (input_lens, output_lens and the metrics), or give a GuideLLM "
            "result (its `benchmarks` list)"
        )
    for key in ("engine", "hardware"):
        if key not in overrides:
            raise UserError(
                f"{path} ({kind}) does not say its deployment: add {key}=... (and model=, "
                "parallel.tp=, dtype= where they differ from the defaults)"
            )
    model = overrides.get("model")
    stated = str(data.get("model_id", "")) if kind == "vllm bench serve" else ""
    if model and stated:
        named = catalogue_model(stated)[0]
        known = (MODEL_CATALOG_DIR / f"{named}.json").exists()
        if known and named != model and not model.endswith(".json"):
            raise UserError(
                f"{path} is a run of {stated} ({named}), not model={model}: calibrate each "
                "model from its own runs"
            )
    tp = int((overrides.get("parallel") or {}).get("tp", 1))
    args = (path.parent / "runs.yaml", overrides["engine"], overrides["hardware"], model, tp)
    if kind == "GuideLLM":
        dicts, _skipped = guidellm([path], *args)
        if not dicts:
            raise UserError(f"{path}: no GuideLLM benchmark at a fixed rate or concurrency")
    else:
        dicts = bench_json([path], *args)
    cases = []
    for d in dicts:
        d = d | {k: v for k, v in overrides.items() if k not in ("engine", "hardware", "model")}
        d["parallel"] = {"tp": tp} | (overrides.get("parallel") or {})
        if d.get("model") in (None, ""):
            raise UserError(
                f"{path}: its model_id {shown(stated)} is not in the catalogue; add model="
            )
        try:
            cases.append(build_case(d, path.parent / "runs.yaml", base))
        except UserError as exc:
            raise UserError(f"{path}: {exc}") from None
    return cases


def by_deployment(runs: list[Run], skip=None) -> list[tuple[dict, list[Run]]]:
    """The runs grouped by deployment, in the order each first appears (a run that cannot be
    set up refused, or with `skip` counted there)."""
    groups: dict[str, tuple[dict, list[Run]]] = {}
    for run in runs:
        try:
            key = Setup.from_config(run.case.config).deployment
        except UserError as exc:
            if skip is not None:
                why = f"cannot be set up: {str(exc).split(';')[0]}"
                skip[why] = skip.get(why, 0) + 1
                continue
            raise UserError(f"run {run.id} cannot be simulated: {exc}") from None
        groups.setdefault(json.dumps(key, sort_keys=True), (key, []))[1].append(run)
    return list(groups.values())
