"""A deployment's calibration (`calibration=PATH`): the terms `python -m sim.calibrate --runs`
fitted to a user's own benchmark runs, read back and applied to any run whose deployment
matches.

A term is a deviation of one deployment (its GPUs, driver, host CPU, network) from what the
kernel tables and engine rules price, in units a user can read:

    decode_scale   x   the GPU time of each step without its prefill tokens (weights and KV
                       reads, the all-reduces, the LM head and launches): a decode-only step's
    prefill_scale  x   what a step's prefill tokens add to it (their GEMMs' extra work and the
                       prefill attention)
    cpu_step_ms    ms  serial host time added to every step (a slower host CPU)
    frontend_ms    ms  each request's delay between the client's send and the engine's queue
                       (HTTP, tokeniser, a proxy), in parallel, counted in TTFT

The cost model (sim/cost/step.py) applies the first three, the driver the last
(`Workload.transit_s`). A deployment is the model, the GPU, the engine release, tp x pp (and
ep) and the weights' dtype; data-parallel replicas share their deployment's terms. A run of
another release of the same engine gets the terms that carry (`Term.carries`: the machine's,
not the engine's code), the rest at their priors, and its record says so. A run whose
workload leaves the envelope the calibration runs covered gets the terms and a note per
dimension it leaves (how far).

File schema (written by sim/scenarios/fit_runs/output.py):

    calibration: 1
    deployments:
    - deployment: {model, hardware, engine: name@version, parallel: {tp, pp, ep}, dtype}
      terms: {NAME: {value, sd, prior, fitted, carries, unit}, ...}
      envelope: {concurrency: [lo, hi] | null, rate: [lo, hi] | null, input_len: [lo, hi],
                 output_len: [lo, hi], context_tokens: [lo, hi], batch: [lo, hi]}
      runs: [...]               # each run's measured, before and after, residuals, held-out
      leave_one_run_out: {...}
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

from sim.errors import UserError, shown
from sim.user_files import load_yaml, require_file

SCHEMA = 1


@dataclass(frozen=True, slots=True)
class Term:
    name: str
    prior: float  # the uncalibrated value
    low: float  # bounds of the fit
    high: float
    prior_sd: float  # the spread of this term between deployments the fit's prior allows
    metric: str  # the measured figure that identifies it: tpot | ttft
    carries: bool  # to another release of the same engine
    unit: str
    what: str
    step: float  # the fit's finite-difference step (sim/scenarios/fit_runs/fit.py)


TERMS = (
    Term("decode_scale", 1.0, 0.5, 2.0, 0.15, "tpot", True, "x",
         "GPU time of each step without its prefill tokens", 0.025),
    Term("prefill_scale", 1.0, 0.5, 3.0, 0.25, "ttft", True, "x",
         "GPU time a step's prefill tokens add", 0.025),
    Term("cpu_step_ms", 0.0, 0.0, 20.0, 2.0, "tpot", False, "ms",
         "serial host time added to every step (the engine's code: not carried)", 0.25),
    Term("frontend_ms", 0.0, 0.0, 2000.0, 50.0, "ttft", True, "ms",
         "each request's delay from the client's send to the engine's queue", 5.0),
)  # fmt: skip
TERM = {t.name: t for t in TERMS}
ENVELOPE = ("concurrency", "rate", "input_len", "output_len", "context_tokens", "batch")


@dataclass(frozen=True, slots=True)
class Terms:
    """Values of the terms (the priors where not calibrated)."""

    decode_scale: float = 1.0
    prefill_scale: float = 1.0
    cpu_step_ms: float = 0.0
    frontend_ms: float = 0.0

    @classmethod
    def of(cls, values: dict) -> Terms:
        return cls(**{k: float(v) for k, v in values.items()})

    def as_dict(self) -> dict[str, float]:
        return {t.name: getattr(self, t.name) for t in TERMS}

    @property
    def cost_scales(self) -> tuple[float, float, float] | None:
        """(decode scale, prefill scale, serial CPU seconds per step) for the cost model, None
        where all three are the priors (the cost model then runs its uncalibrated sums)."""
        if (self.decode_scale, self.prefill_scale, self.cpu_step_ms) == (1.0, 1.0, 0.0):
            return None
        return self.decode_scale, self.prefill_scale, self.cpu_step_ms / 1e3


@dataclass(frozen=True, slots=True)
class Applied:
    """What a run got from `calibration=PATH`: the terms (None: no deployment matched) and
    the record its summary carries as `calibration`."""

    terms: Terms | None
    record: dict
    envelope: dict | None = None


def deployment_of(model: str, hardware: str, engine: str, tp: int, pp: int, ep: int,
                  dtype: str) -> dict:  # fmt: skip
    """The key a calibration is stored and matched under."""
    return {
        "model": model,
        "hardware": hardware,
        "engine": engine,
        "parallel": {"tp": int(tp), "pp": int(pp), "ep": int(ep)},
        "dtype": dtype,
    }


def describe(d: dict) -> str:
    p = d.get("parallel") or {}
    par = f"TP{p.get('tp', 1)}" + (f" PP{p['pp']}" if p.get("pp", 1) != 1 else "")
    par += f" EP{p['ep']}" if p.get("ep", 1) != 1 else ""
    return f"{d.get('model')} on {d.get('hardware')}, {d.get('engine')}, {par}, {d.get('dtype')}"


def read(path: str | Path) -> list[dict]:
    """The deployments of a calibration file (checked; cached by path and modification time)."""
    p = Path(path)
    require_file(p, f"calibration={shown(str(p), 120, text=True)}:")
    return _read(str(p.resolve()), os.stat(p).st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _read(path: str, _mtime: int) -> list[dict]:
    doc = load_yaml(path, "calibration file")
    where = f"calibration={path}"
    if not isinstance(doc, dict) or doc.get("calibration") != SCHEMA:
        raise UserError(
            f"{where}: not a calibration file (expected `calibration: {SCHEMA}` and a list of "
            "deployments, as python -m sim.calibrate --runs FILE --out PATH writes)"
        )
    deployments = doc.get("deployments")
    if not isinstance(deployments, list) or not deployments:
        raise UserError(f"{where}: no deployments; calibrate some with python -m sim.calibrate")
    for i, d in enumerate(deployments):
        _check(d, f"{where}: deployment {i + 1}")
    return deployments


def _check(d, where: str) -> None:
    if not isinstance(d, dict) or not isinstance(d.get("deployment"), dict):
        raise UserError(f"{where}: expected a mapping with `deployment` and `terms`")
    terms = d.get("terms")
    if not isinstance(terms, dict):
        raise UserError(f"{where}: `terms` missing")
    for name, body in terms.items():
        term = TERM.get(name)
        if term is None:
            raise UserError(f"{where}: unknown term {shown(name)}; known: {', '.join(TERM)}")
        value = body.get("value") if isinstance(body, dict) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{where}: {name} has no numeric `value`")
        if not (math.isfinite(value) and term.low <= value <= term.high):
            raise UserError(
                f"{where}: {name} = {value!r} is outside [{term.low:g}, {term.high:g}], what "
                "the fit allows; refit with python -m sim.calibrate"
            )


def apply(path: str, key: dict) -> Applied:
    """The terms of the deployment `key` (deployment_of) in the calibration file `path`: all of
    them for the same release, those that carry for another release of the same engine, none
    (and why) where no deployment matches."""
    deployments = read(path)
    engine, _, version = key["engine"].partition("@")
    same_family = []
    for d in deployments:
        dep = d["deployment"]
        other_engine, _, other_version = str(dep.get("engine", "")).partition("@")
        rest = {k: v for k, v in dep.items() if k != "engine"}
        mine = {k: v for k, v in key.items() if k != "engine"}
        if _same(rest, mine) and other_engine == engine:
            if other_version == version:
                return _applied(path, d, key, carried_from=None)
            same_family.append((other_version, d))
    if same_family:
        return _applied(path, max(same_family, key=lambda x: _release(x[0]))[1], key, "carry")
    held = "; ".join(describe(d["deployment"]) for d in deployments[:4])
    more = f" and {len(deployments) - 4} more" if len(deployments) > 4 else ""
    reason = (
        f"no deployment in {path} is {describe(key)} (it holds: {held}{more}); this run is "
        "uncalibrated: calibrate it with python -m sim.calibrate --runs FILE"
    )
    return Applied(None, {"path": str(path), "deployment": None, "reason": reason})


def _same(a: dict, b: dict) -> bool:
    pa, pb = a.get("parallel") or {}, b.get("parallel") or {}
    par = all(int(pa.get(k, 1)) == int(pb.get(k, 1)) for k in ("tp", "pp", "ep"))
    return par and all(str(a.get(k)) == str(b.get(k)) for k in ("model", "hardware", "dtype"))


def _release(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in version.replace("rc", ".").split("."))


def _applied(path: str, d: dict, key: dict, carried_from) -> Applied:
    values, carried, left = {}, [], []
    for name, body in d["terms"].items():
        if carried_from is None or TERM[name].carries:
            values[name] = float(body["value"])
            carried.append(name)
        else:
            left.append(name)
    record = {
        "path": str(path),
        "deployment": d["deployment"],
        "terms": values,
    }
    if carried_from:
        record["carried_from"] = d["deployment"]["engine"]
        record["carried"] = carried
        record["not_carried"] = left
        record["note"] = (
            f"calibrated on {d['deployment']['engine']}, run on {key['engine']}: "
            f"{', '.join(carried) or 'no term'} carried (the machine's), "
            f"{', '.join(left) or 'none'} left at the prior (the engine's own code)"
        )
    return Applied(Terms.of(values), record, d.get("envelope"))


def outside(envelope: dict | None, run: dict) -> list[dict]:
    """The dimensions where `run` (ENVELOPE keys -> value) leaves `envelope` and by how much."""
    out = []
    for dim in ENVELOPE:
        span, value = (envelope or {}).get(dim), run.get(dim)
        if not span or value is None:
            continue
        lo, hi = float(span[0]), float(span[1])
        if value > hi * (1 + 1e-9):
            how = f"{value / hi:.3g}x the largest calibrated ({hi:g})" if hi > 0 else "above"
        elif value < lo * (1 - 1e-9):
            how = f"{value / lo:.3g}x the smallest calibrated ({lo:g})"
        else:
            continue
        out.append({"dimension": dim, "value": value, "envelope": [lo, hi], "by": how})
    return out


def workload_point(workload) -> dict:
    """A generated workload's position in the envelope's dimensions."""
    n = len(workload)
    prompt, output = workload.prompt_len, workload.output_len
    point = {
        "input_len": float(prompt.mean()),
        "output_len": float(output.mean()),
        "context_tokens": float((prompt + output).max()),
        "concurrency": float(workload.concurrency) if workload.concurrency else None,
        "rate": None,
    }
    span = float(workload.arrival_s[-1] - workload.arrival_s[0]) if n > 1 else 0.0
    if not workload.concurrency and span > 0:
        point["rate"] = (n - 1) / span
    return point


def with_terms(workload, terms: Terms):
    """The workload as the calibrated deployment's front end delays it."""
    if not terms.frontend_ms:
        return workload
    return replace(workload, transit_s=terms.frontend_ms / 1e3)


def run_record(applied: Applied, workload, mean_batch: float | None) -> dict:
    """The run's summary.json `calibration`: the file's record, and where the run (its
    workload, its mean running batch) leaves the envelope of the runs the deployment was
    calibrated on."""
    record = dict(applied.record)
    if applied.terms is not None and applied.envelope is not None:
        point = workload_point(workload) | {"batch": mean_batch}
        record["outside_envelope"] = outside(applied.envelope, point)
    return record
