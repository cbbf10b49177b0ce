"""What the physics audit finds (sim/run/audit.py) and how a run reports it: one finding per
check's worst, the tallies, summary.json's `audit` of several runs merged, the console's
warning line, and strict mode (SIM_AUDIT=strict, the test suite's) that makes a violation an
error."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

TOLERANCE = 1e-6  # float rounding in the prices' sums, not physics
STRICT_ENV = "SIM_AUDIT"  # SIM_AUDIT=strict: a violation is an error


class AuditError(RuntimeError):
    """A simulation printed a figure no GPU can reach (raised under SIM_AUDIT=strict)."""


@dataclass(frozen=True, slots=True)
class Finding:
    check: str  # "hbm_bandwidth", "tensor_flops", "link_bandwidth", "memory"
    subject: str  # what was priced: "step", "decode attention (full, batch 12)", ...
    where: str  # which one: "step 1,204 (replica 0)", "context 4,095", ...
    ratio: float  # the least time (or bytes) physics allows over the price (or the limit)
    detail: str  # the figures behind the ratio

    @property
    def violation(self) -> bool:
        return self.ratio > 1 + TOLERANCE

    def sentence(self) -> str:
        return f"{self.subject}, {self.where}: {self.detail} ({self.ratio:.3g}x the limit)"

    def record(self) -> dict:
        return {
            "check": self.check,
            "subject": self.subject,
            "where": self.where,
            "ratio": float(self.ratio),
            "violation": bool(self.violation),
            "detail": self.detail,
        }


@dataclass(slots=True)
class Tally:
    """One check's count of what it held against a limit, its violations and its worst."""

    checked: int = 0
    violations: int = 0
    worst: Finding | None = None

    def add(self, ratios: np.ndarray, describe) -> None:
        """Count `ratios`; `describe(i)` makes the Finding of entry i (only the worst's)."""
        ratios = np.asarray(ratios, dtype=np.float64).ravel()
        if not len(ratios):
            return
        self.checked += len(ratios)
        self.violations += int(np.count_nonzero(ratios > 1 + TOLERANCE))
        i = int(np.argmax(ratios))
        if self.worst is None or ratios[i] > self.worst.ratio:
            self.worst = describe(i)

    def record(self) -> dict:
        worst = None if self.worst is None else self.worst.record()
        return {"checked": self.checked, "violations": self.violations, "worst": worst}


def merge_records(records: list[dict], where: list[str] | None = None) -> dict:
    """One `audit` of several runs' (a scenario's simulations): counts summed, each check's
    worst and the overall worst kept, each named by its run (`where`: a label per record)."""
    out = {"runs": 0, "checked_steps": 0, "violations": 0, "worst": None, "checks": {},
           "tolerance": TOLERANCE}  # fmt: skip
    for i, record in enumerate(records):
        if not record:
            continue
        label = f"{where[i]}: " if where else ""
        out["runs"] += 1
        out["checked_steps"] += record["checked_steps"]
        out["violations"] += record["violations"]
        for name, tally in record["checks"].items():
            merged = out["checks"].setdefault(name, {"checked": 0, "violations": 0, "worst": None})
            merged["checked"] += tally["checked"]
            merged["violations"] += tally["violations"]
            merged["worst"] = _worse(merged["worst"], tally["worst"], label)
        out["worst"] = _worse(out["worst"], record["worst"], label)
    return out


def _worse(kept: dict | None, other: dict | None, label: str) -> dict | None:
    if other is None or (kept is not None and kept["ratio"] >= other["ratio"]):
        return kept
    return {**other, "subject": f"{label}{other['subject']}"}


def enforce(record: dict) -> None:
    """Raise AuditError for a violation when SIM_AUDIT=strict (the test suite's setting)."""
    if record["violations"] and os.environ.get(STRICT_ENV) == "strict":
        w = record["worst"]
        raise AuditError(f"physics audit: {record['violations']} violation(s); worst: "
                         f"{w['subject']}, {w['where']}: {w['detail']}")  # fmt: skip


def warning_line(record: dict) -> str | None:
    """The console's one line about a run whose audit found violations (None: it found none)."""
    if not record or not record["violations"]:
        return None
    w = record["worst"]
    return (f"sim: warning: physics audit: {record['violations']:,} figure(s) beyond what the "
            f"hardware allows; worst: {w['subject']}, {w['where']}: {w['detail']}")  # fmt: skip
