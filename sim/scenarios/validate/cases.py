"""The validation case file: its schema, and loading it into cases for scenario=validate.

A case file holds real runs, each with what the simulator needs to replay it and what was
measured:

    cases:
      - id: any-unique-string
        engine: vllm@0.8.3
        hardware: a100-40gb
        model: llama-3.1-70b            # catalogue name or a config.json path
        dtype: bf16                     # optional; kv_cache_dtype: fp8 optional
        parallel: {tp: 8, pp: 1, dp: 1, ep: 1}
        engine_args: {gpu_memory_utilization: 0.95}
        workload:                       # exactly one of:
          closed_loop: {concurrency: 16, num_requests: 80, input_len: 1024, output_len: 1024}
          poisson: {rate: 4.0, num_requests: 200, lengths: PATH}
          burst: {num_requests: 5000, lengths: PATH}
          bench_json: PATH              # its metrics are the default `measured`
          trace: PATH                   # extensions: replay recorded arrivals and lengths,
          constant: {rate: 4.0, num_requests: 200, input_len: 512, output_len: 128}  # or rate
        measured: {mean_ttft_ms: 121.4, mean_tpot_ms: 13.2}   # any summary.json keys
        requests: PATH                  # optional: per-request measurements, for KS tests

Other keys a case may carry: entry_point (server | offline), seed, cost_profile, notes, source,
flags (data-quality marks an importer sets, e.g. prefill_above_peak).
Relative paths resolve against the case file's folder. A case that cannot be simulated (a
schema error, an unknown model, a model that does not fit, a missing file) becomes an error row
with its reason; the other cases still run. A measured value of 0, null, NaN, text or a negative
number does not refuse its case: that metric's row carries the reason (`Case.unusable`).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from sim.config import SimConfig, WorkloadConfig
from sim.errors import UserError, key_name, shown
from sim.scenarios.validate.engine_queue import TTFT_FROM
from sim.user_files import file_problem, load_yaml, require_file
from sim.workload.bench_results import bench_metrics

WORKLOAD_KINDS = ("closed_loop", "poisson", "burst", "bench_json", "trace", "constant")
REQUIRED = ("id", "engine", "hardware", "model", "workload")
KNOWN = (
    *REQUIRED,
    "dtype",
    "kv_cache_dtype",
    "parallel",
    "engine_args",
    "measured",
    "requests",
    "entry_point",
    "seed",
    "cost_profile",
    "notes",
    "source",
    "flags",
    "launch",  # engine_args an importer assumed ({source, engine_args}): the band varies them
    "ttft_from",  # send (default) | engine_queue: where the source counts TTFT from
)
PARALLEL_KEYS = (
    "tp",
    "pp",
    "dp",
    "ep",
    "router",
    "dp_lockstep",
    "link_bytes_per_s",
    "link_latency_s",
    "gpus_per_node",  # pipeline stages beyond one server cross it over node_link
    "node_link",
)
WORKLOAD_FIELDS = {f.name for f in fields(WorkloadConfig)}
PATH_KEYS = ("lengths", "path")
MAX_LABEL = 200  # characters of an id (or a slice's name) a report shows
MAX_REASON = 2000  # characters of a case's error a report shows


@dataclass(frozen=True)
class Case:
    id: str
    file: str
    data: dict  # the case as written
    config: SimConfig | None = None
    measured: dict = field(default_factory=dict)  # metric -> value (None: missing)
    requests: str | None = None  # per-request measurements
    error: str | None = None
    unusable: dict = field(default_factory=dict)  # metric -> why its measured value is unusable

    @property
    def slices(self) -> dict:
        w = self.data.get("workload")
        kind = next(iter(w), "?") if isinstance(w, dict) else "?"
        return {
            "hardware": _label(self.data.get("hardware", "?")),
            "engine": _label(self.data.get("engine", "?")),
            "workload": _label(kind),
            "model": _label(self.data.get("model", "?")),
        }

    @property
    def flags(self) -> tuple[str, ...]:
        f = self.data.get("flags") or ()
        return tuple(_label(x) for x in f) if isinstance(f, list) else ()


def _label(value) -> str:
    """A value of the case file as reports show it: text, cut to MAX_LABEL characters."""
    return shown(value if isinstance(value, str) else str(value), MAX_LABEL, text=True)


def load_cases(paths, base: SimConfig) -> list[Case]:
    """Every case of every file; per-case problems become cases with `error` set."""
    cases: list[Case] = []
    seen: set[str] = set()
    for path in paths:
        path = Path(path)
        if file_problem(path) == "is a directory":
            raise UserError(f"validate.cases: {path} is a folder; give the case files in it")
        require_file(path, f"validate.cases: {path}")
        doc = load_yaml(path, "case file")
        if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list):
            raise UserError(f"{path}: expected a mapping with a list under `cases:`")
        for i, data in enumerate(doc["cases"]):
            label = f"{path.name}#{i + 1}"  # the case's place in its file
            try:
                case_id = _case_id(data)
                label = case_id or label
                if case_id in seen:
                    raise UserError(f"duplicate case id {shown(case_id, MAX_LABEL)}")
                case = _build(data, path, base)
            except UserError as exc:
                raw = data if isinstance(data, dict) else {"id": label}
                # a reason quotes the file's values: cut, as every value reports show is
                case = Case(label, str(path), raw, error=shown(str(exc), MAX_REASON, text=True))
            seen.add(case.id)
            cases.append(case)
    return cases


def _case_id(data) -> str | None:
    """The case's id (None where the case is not a mapping: _build says why); an id that is
    null, empty, not text or a number, or longer than MAX_LABEL is refused."""
    if not isinstance(data, dict) or "id" not in data:
        return None
    value = data["id"]
    if (
        isinstance(value, bool)
        or not isinstance(value, str | int | float)
        or not str(value).strip()
    ):
        shown_id = "null" if value is None else shown(value, 40)
        raise UserError(
            f"id is {shown_id}; every case needs an id: a short, unique, non-empty text"
        )
    text = str(value)
    if len(text) > MAX_LABEL:
        raise UserError(f"id {shown(text, 40)} is {len(text):,} characters; at most {MAX_LABEL}")
    if not text.isprintable():
        raise UserError(f"id {shown(text, 40)} holds a line break or a control character")
    return text


def build_case(data: dict, path: Path, base: SimConfig) -> Case:
    """One case from its mapping, as if read from the case file `path` (relative paths
    resolve against its folder); a UserError says what is wrong with it."""
    _case_id(data)
    return _build(data, path, base)


def _build(data, path: Path, base: SimConfig) -> Case:
    if not isinstance(data, dict):
        raise UserError("a case must be a mapping")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise UserError(f"missing key(s) {', '.join(missing)}")
    here = path.parent
    model = str(data["model"])
    if model.endswith(".json"):
        model = str(_resolve(here, model))
    parallel = data.get("parallel") or {}
    if not isinstance(parallel, dict) or set(parallel) - set(PARALLEL_KEYS):
        raise UserError(f"parallel: expected a mapping of {', '.join(PARALLEL_KEYS)}")
    engine_args = data.get("engine_args") or {}
    if not isinstance(engine_args, dict):
        raise UserError("engine_args: expected a mapping of engine argument names to values")
    engine_args = dict(engine_args)
    if "kv_cache_dtype" in data:
        engine_args["kv_cache_dtype"] = data["kv_cache_dtype"]
    ttft_from = data.get("ttft_from", "send")
    if ttft_from not in TTFT_FROM:
        raise UserError(
            f"ttft_from: {shown(ttft_from)} is not one of {', '.join(TTFT_FROM)} (engine_queue: "
            "the source counts TTFT from when the engine read the request, as vLLM's queued_ts)"
        )
    workload, measured_default, requests = _workload(data["workload"], here)
    measured = data.get("measured", measured_default)
    if not isinstance(measured, dict) or not measured:
        raise UserError("measured: expected a mapping of summary.json keys to values")
    measured, unusable = _measured(measured)
    if "requests" in data:
        requests = str(_resolve(here, str(data["requests"])))
    mapping = {
        k: v for k, v in asdict(base).items() if k not in ("workload", "validate", "engine_args")
    }
    mapping |= {
        "task": "simulate",
        "engine": str(data["engine"]),
        "hardware": str(data["hardware"]),
        "model": model,
        "dtype": str(data.get("dtype", "auto")),
        "entry_point": str(data.get("entry_point", "server")),
        "seed": data.get("seed", base.seed),
        "cost_profile": str(data.get("cost_profile", base.cost_profile)),
        "parallel": {**asdict(base.parallel), **{k: 1 for k in ("tp", "pp", "dp", "ep")}}
        | parallel,
        "engine_args": engine_args,
        "workload": workload,
        "output": {"report": False, "progress": False},
    }
    config = SimConfig.from_mapping(mapping)
    return Case(str(data["id"]), str(path), data, config, measured, requests, unusable=unusable)


def _measured(measured: dict) -> tuple[dict[str, float | None], dict[str, str]]:
    """(metric -> value, metric -> why its value cannot be compared): a zero, negative,
    missing (null, NaN) or non-numeric measured value stays in the table as a row with its
    reason instead of refusing the whole case (sim/scenarios/validate/validation.py)."""
    values: dict[str, float | None] = {}
    unusable: dict[str, str] = {}
    for key, value in measured.items():
        name = str(key)
        number = None
        if not isinstance(value, bool) and isinstance(value, (int, float)):
            try:
                number = float(value)
            except OverflowError:  # an integer beyond float's range
                number = math.inf if value > 0 else -math.inf
        values[name] = number
        if value is None:
            unusable[name] = "no measured value (null)"
        elif number is None:
            unusable[name] = f"measured value {shown(value)} is not a number"
        elif math.isnan(number):
            unusable[name] = "no measured value (NaN)"
        elif number == 0:
            unusable[name] = "measured value is 0: a relative error is undefined"
        elif number < 0:
            unusable[name] = f"measured value {number:g} is negative: check the source"
        elif number >= 1e300:
            unusable[name] = f"measured value {shown(value)} is too large to compare"
    return values, unusable


def _resolve(here: Path, value: str) -> Path:
    p = Path(value)
    with contextlib.suppress(RuntimeError):  # ~user of a user this machine does not have
        p = p.expanduser()
    p = p if p.is_absolute() else here / p
    problem = file_problem(p)
    if problem is not None:
        where = shown(str(p), 120, text=True)
        problem = "no such file" if problem == "does not exist" else problem
        raise UserError(f"{shown(value, 80, text=True)}: {problem} (resolved to {where})")
    return p


def _workload(spec, here: Path) -> tuple[dict, dict, str | None]:
    """(WorkloadConfig mapping, default measured metrics, per-request file) of a case."""
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in WORKLOAD_KINDS:
        raise UserError(f"workload: expected exactly one of {', '.join(WORKLOAD_KINDS)}")
    kind, body = next(iter(spec.items()))
    if kind in ("bench_json", "trace"):
        if not isinstance(body, str):
            raise UserError(f"workload.{kind}: expected a file path")
        path = _resolve(here, body)
        out = {"kind": kind, "path": str(path), "num_requests": None, "rate": None}
        if kind == "bench_json":
            return out, bench_metrics(path), str(path)
        return out, {}, None
    if not isinstance(body, dict):
        raise UserError(f"workload.{kind}: expected a mapping")
    unknown = sorted(set(body) - WORKLOAD_FIELDS, key=str)
    if unknown:
        raise UserError(f"workload.{kind}: unknown key {key_name(unknown[0])}")
    need = {
        "closed_loop": ("concurrency", "num_requests"),
        "poisson": ("rate", "num_requests"),
        "constant": ("rate", "num_requests"),
    }
    need = need.get(kind, ("num_requests",))
    missing = [k for k in need if k not in body]
    if missing:
        raise UserError(f"workload.{kind}: missing {', '.join(missing)}")
    if "lengths" not in body and not {"input_len", "output_len"} <= set(body):
        raise UserError(f"workload.{kind}: give input_len and output_len, or lengths: PATH")
    out = {"kind": kind, "length_dist": "fixed", "rate": None, **body}
    for key in PATH_KEYS:
        if key in out and out[key] is not None:
            out[key] = str(_resolve(here, str(out[key])))
    return out, {}, None
